"""Drift transfer: move cached halo rows the way this worker's own rows moved.

Between two syncs every worker still computes its *owned* rows exactly, every epoch, with
the same weights as every other worker. Much of what makes a remote row stale is the
same change of those shared weights, which moves every row of a layer in a similar way.
:class:`DriftTransfer` measures that movement on the owned rows, as the affine map that
best takes their values at the last sync to their values now (least squares over the
owned rows: ``owned_now ~ [owned_sync, 1] @ M``, ``M`` of shape ``(d + 1, d)``), and
applies it to the cached halo rows: ``transferred = [cache, 1] @ M`` (clamped at 0 when
every owned row is non-negative, as after a ReLU). It needs no traffic: the map comes from
rows the worker holds.

It serves a row only where it has been the better choice, tested twice on every sync
epoch (after the first), before the fresh rows are used:

* per row: the transferred row and the row the agent would have served are scored against
  the fresh row, with decayed averages of both errors per sampled row (the rows the agent's
  predictors track); a row is *chosen* where its transfer average has been below ``margin``
  times the agent's for at least ``min_scores`` syncs;
* per layer (the confidence test): the rows this would have served (chosen rows moved, the
  others the agent's) against the agent's rows alone, summed over all sampled rows, decayed
  the same way. Under dropout noise per-row averages pick rows that were lucky, not better,
  and the sum shows it; the layer serves transferred rows only while that sum has stayed
  below ``layer_margin`` times the agent's.

Elsewhere the agent's row (cache or gated trend) stays.
:class:`~dgl_sni.halo.resolver.HaloResolver` owns one per hidden layer (``gated`` predictor,
fixed sync policy); the map is fitted and applied in the worker because it
needs the owned rows, which the agent does not see (on a DPU deployment it would travel
with the request: ``(d + 1) x d`` floats).
"""
from __future__ import annotations

import numpy as np

FIT_ROWS = 65536  # owned rows the map is fitted on (an even stride over larger partitions)


class DriftTransfer:
    """Affine drift of one layer's owned rows since the last sync, gated per halo row."""

    def __init__(self, sampled: np.ndarray, decay: float = 0.5, margin: float = 0.9,
                 min_scores: int = 2, layer_margin: float = 0.95, ridge: float = 1e-6):
        self.sampled = np.flatnonzero(np.asarray(sampled, dtype=bool))
        self.decay, self.margin, self.min_scores, self.ridge = decay, margin, min_scores, ridge
        self.layer_margin = layer_margin
        self.layer_error = None  # decayed (served as chosen, agent) error sums over sampled rows
        n = self.sampled.size
        self.err_transfer = np.zeros(n, np.float64)
        self.err_agent = np.zeros(n, np.float64)
        self.scores = np.zeros(n, np.int64)
        self._basis = None  # [owned rows at the last sync (fit rows), 1]
        self._gram = None
        self._nonneg = False

    @property
    def ready(self) -> bool:
        return self._basis is not None

    @staticmethod
    def _fit_rows(owned: np.ndarray) -> np.ndarray:
        owned = np.asarray(owned, dtype=np.float32)
        if owned.shape[0] > FIT_ROWS:
            owned = owned[:: -(-owned.shape[0] // FIT_ROWS)]
        return owned

    def on_sync(self, owned: np.ndarray) -> None:
        """Remember the owned rows of a sync epoch (the base of the next maps)."""
        rows = self._fit_rows(owned).astype(np.float64)
        basis = np.empty((rows.shape[0], rows.shape[1] + 1))
        basis[:, :-1], basis[:, -1] = rows, 1.0
        gram = basis.T @ basis
        gram[np.diag_indices_from(gram)] += self.ridge * max(np.trace(gram) / gram.shape[0], 1e-12)
        self._basis, self._gram = basis, gram
        self._nonneg = bool(rows.size) and bool((rows >= 0).all())

    def fit(self, owned: np.ndarray) -> np.ndarray:
        """The map ``M`` taking the last sync's owned rows to ``owned`` (this step's)."""
        target = self._fit_rows(owned).astype(np.float64)
        if target.shape[0] != self._basis.shape[0]:
            raise ValueError(f"owned rows changed from {self._basis.shape[0]} to {target.shape[0]} "
                             "fit rows since the last sync")
        return np.linalg.solve(self._gram, self._basis.T @ target)

    def transferred(self, cache_rows: np.ndarray, owned: np.ndarray) -> np.ndarray:
        """The sampled halo rows moved by this step's map: ``[n_sampled, d]``."""
        m = self.fit(owned)
        out = cache_rows[self.sampled].astype(np.float64) @ m[:-1] + m[-1]
        if self._nonneg:
            np.maximum(out, 0.0, out=out)
        return out.astype(np.float32)

    def score(self, moved: np.ndarray, agent_rows: np.ndarray, fresh: np.ndarray) -> None:
        """Sync epoch: how far the transferred and the agent's rows were from the fresh ones."""
        sel = self.sampled
        e_t = np.linalg.norm(moved - fresh[sel], axis=1)
        e_a = np.linalg.norm(agent_rows[sel] - fresh[sel], axis=1)
        g = self.decay
        pick = self.chosen()  # the layer test: what the rows chosen so far would have served
        sums = np.array([e_a.sum() - e_a[pick].sum() + e_t[pick].sum(), e_a.sum()])
        self.layer_error = sums if self.layer_error is None else g * self.layer_error + (1 - g) * sums
        first = self.scores == 0
        self.err_transfer = np.where(first, e_t, g * self.err_transfer + (1 - g) * e_t)
        self.err_agent = np.where(first, e_a, g * self.err_agent + (1 - g) * e_a)
        self.scores += 1

    def chosen(self) -> np.ndarray:
        """Positions (into the sampled rows) where the transferred row is served."""
        ok = (self.scores >= self.min_scores) & (self.err_transfer < self.margin * self.err_agent)
        return np.flatnonzero(ok)

    @property
    def layer_open(self) -> bool:
        """Whether the chosen rows, together, have beaten the agent's rows at recent syncs."""
        e = self.layer_error
        return e is not None and e[0] < self.layer_margin * e[1]

    @property
    def serving(self) -> bool:
        """Whether a stale step would serve any transferred row (else the map need not be fitted)."""
        return self.layer_open and bool(self.chosen().size)

    def serve(self, agent_rows: np.ndarray, moved: np.ndarray) -> tuple:
        """Rows to use: the agent's, with the chosen sampled rows transferred; and their row ids."""
        pick = self.chosen() if self.layer_open else np.empty(0, np.int64)
        rows = self.sampled[pick]
        if not pick.size:
            return agent_rows, rows
        out = np.array(agent_rows, dtype=np.float32, copy=True)
        out[rows] = moved[pick]
        return out, rows
