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
        self._err = np.zeros((2, n), np.float64)  # decayed errors per sampled row: transferred, agent's
        self.scores = np.zeros(n, np.int64)
        self._base = None  # fit_rows of the owned rows at the last sync
        self._gram = None  # base^T base, with the ridge on its diagonal
        self._nonneg = False

    @property
    def ready(self) -> bool:
        return self._base is not None

    @property
    def err_transfer(self) -> np.ndarray:
        return self._err[0]

    @property
    def err_agent(self) -> np.ndarray:
        return self._err[1]

    @staticmethod
    def fit_rows(owned: np.ndarray) -> np.ndarray:
        """``[rows, 1]``, a new float64 array: the owned rows a map is fitted on (an even
        stride over partitions of more than ``FIT_ROWS`` rows) and a column of ones."""
        owned = np.asarray(owned)
        if owned.shape[0] > FIT_ROWS:
            owned = owned[:: -(-owned.shape[0] // FIT_ROWS)]
        rows = np.empty((owned.shape[0], owned.shape[1] + 1))
        rows[:, :-1] = owned
        rows[:, -1] = 1.0
        return rows

    def on_sync(self, owned: np.ndarray) -> None:
        """Remember the owned rows of a sync epoch (the base of the next maps)."""
        self._rebase(self.fit_rows(owned))

    def fit(self, owned: np.ndarray) -> np.ndarray:
        """The map ``M`` taking the last sync's owned rows to ``owned`` (this step's):
        ``[owned_sync, 1] @ M ~ owned``, ``M`` of shape ``(d + 1, d)``."""
        return self._fit(self.fit_rows(owned))

    def transferred(self, cache_rows: np.ndarray, owned: np.ndarray) -> np.ndarray:
        """The sampled halo rows moved by this step's map: ``[n_sampled, d]``."""
        return self._moved(cache_rows, self._fit(self.fit_rows(owned)))

    def sync(self, rows: np.ndarray, cache_rows: np.ndarray, agent_rows: np.ndarray | None,
             fresh: np.ndarray) -> None:
        """A sync epoch's work, in order: score the map from the last sync (``rows``:
        :meth:`fit_rows` of this sync's owned rows; ``cache_rows``: the rows served since
        the last sync; ``agent_rows``: what the agent would have served now, ``None``: not
        scored) against the ``fresh`` rows, then take ``rows`` as the base of the next maps."""
        if self.ready and agent_rows is not None:
            self.score(self._moved(cache_rows, self._fit(rows)), agent_rows, fresh)
        self._rebase(rows)

    def _rebase(self, rows: np.ndarray) -> None:
        gram = rows.T @ rows
        gram.flat[:: gram.shape[0] + 1] += self.ridge * max(np.trace(gram) / gram.shape[0], 1e-12)
        self._base, self._gram = rows, gram
        self._nonneg = bool(rows.size) and bool((rows >= 0).all())  # (its ones column is)

    def _fit(self, rows: np.ndarray) -> np.ndarray:
        if rows.shape[0] != self._base.shape[0]:
            raise ValueError(f"owned rows changed from {self._base.shape[0]} to {rows.shape[0]} "
                             "fit rows since the last sync")
        return np.linalg.solve(self._gram, self._base.T @ rows)[:, :-1]  # the ones column maps to itself

    def _moved(self, cache_rows: np.ndarray, m: np.ndarray) -> np.ndarray:
        out = cache_rows[self.sampled] @ m[:-1]  # in float64
        out += m[-1]
        if self._nonneg:
            np.maximum(out, 0.0, out=out)
        return out.astype(np.float32)

    def score(self, moved: np.ndarray, agent_rows: np.ndarray, fresh: np.ndarray) -> None:
        """Sync epoch: how far the transferred and the agent's rows were from the fresh ones."""
        sel = self.sampled
        diff = np.stack((moved, agent_rows[sel])) - fresh[sel]
        err = np.sqrt(np.einsum("kij,kij->ki", diff, diff))  # [transferred, agent's] per sampled row
        g = self.decay
        pick = self.chosen()  # the layer test: what the rows chosen so far would have served
        e_t, e_a = err
        agent_sum = e_a.sum()
        sums = np.array([agent_sum - e_a[pick].sum() + e_t[pick].sum(), agent_sum])
        self.layer_error = sums if self.layer_error is None else g * self.layer_error + (1 - g) * sums
        self._err = np.where(self.scores == 0, err, g * self._err + (1 - g) * err)
        self.scores += 1

    def chosen(self) -> np.ndarray:
        """Positions (into the sampled rows) where the transferred row is served."""
        ok = (self.scores >= self.min_scores) & (self._err[0] < self.margin * self._err[1])
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
