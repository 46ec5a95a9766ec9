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

The arithmetic is compiled (``csrc/drift_fit.hpp`` through :mod:`dgl_sni._ops`): a sync's
two fits are one call over one float64 copy of the owned rows (the Gram matrix's Cholesky
factor kept for the next maps), and the moves and scores one call each. Written as numpy it was
some forty calls per layer whose per-call cost, on partitions of a few hundred rows, was
most of the time (see ``benchmarks/MEASUREMENTS.md``).
"""
from __future__ import annotations

import numpy as np

from .. import _ops

FIT_ROWS = 65536  # owned rows the map is fitted on (an even stride over larger partitions)


class DriftTransfer:
    """Affine drift of one layer's owned rows since the last sync, gated per halo row."""

    def __init__(self, sampled: np.ndarray, decay: float = 0.5, margin: float = 0.9,
                 min_scores: int = 2, layer_margin: float = 0.95, ridge: float = 1e-6):
        self.sampled = np.flatnonzero(np.asarray(sampled, dtype=bool))
        self.decay, self.margin, self.min_scores, self.ridge = decay, margin, min_scores, ridge
        self.layer_margin = layer_margin
        n = self.sampled.size
        self._err = np.zeros((2, n), np.float64)  # decayed errors per sampled row: transferred, agent's
        self.scores = np.zeros(n, np.int64)
        self._layer = np.zeros(2, np.float64)  # decayed (served as chosen, agent's) error sums
        self._layer_scored = False
        self._base = None  # the fit rows of the owned rows at the last sync, [rows, 1] in float64
        self._chol = None  # the Cholesky factor of their Gram matrix (with the ridge)
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

    @property
    def layer_error(self) -> np.ndarray | None:
        """The decayed sums over sampled rows (served as chosen, agent's); None before a score."""
        return self._layer if self._layer_scored else None

    @staticmethod
    def _rows(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a, dtype=np.float32)

    @staticmethod
    def _stride(owned: np.ndarray) -> int:
        """Fit rows are every stride-th owned row: at most ``FIT_ROWS`` of them."""
        return max(1, -(-owned.shape[0] // FIT_ROWS))

    def fit(self, owned: np.ndarray) -> np.ndarray:
        """The map ``M`` taking the last sync's owned rows to ``owned`` (this step's):
        ``[owned_sync, 1] @ M ~ owned``, ``M`` of shape ``(d + 1, d)``."""
        owned = self._rows(owned)
        return _ops.drift_fit_rows(owned, self._stride(owned), self._base, self._chol)[0]

    def transferred(self, cache_rows: np.ndarray, owned: np.ndarray) -> np.ndarray:
        """The sampled halo rows moved by this step's map: ``[n_sampled, d]``."""
        return _ops.drift_move_rows(self._rows(cache_rows), self.sampled, self.fit(owned), self._nonneg)

    def sync(self, owned: np.ndarray, cache_rows: np.ndarray | None = None, agent_rows: np.ndarray | None = None,
             fresh: np.ndarray | None = None) -> None:
        """A sync epoch's work, in order: score the map from the last sync (``cache_rows``:
        the rows served since it; ``agent_rows``: what the agent would have served now,
        ``None``: not scored) against the ``fresh`` rows, then take this sync's ``owned``
        rows as the base of the next maps; one call over the owned rows does both fits.
        ``sync(owned)`` only takes the base (the first sync, or nothing to score)."""
        owned = self._rows(owned)
        scoring = self.ready and agent_rows is not None
        m, base, chol, nonneg = _ops.drift_fit_rows(owned, self._stride(owned), self._base if scoring else None,
                                                    self._chol if scoring else None, rebase=True, ridge=self.ridge)
        if scoring:
            self.score(_ops.drift_move_rows(self._rows(cache_rows), self.sampled, m, self._nonneg),
                       agent_rows, fresh)
        self._base, self._chol, self._nonneg = base, chol, nonneg

    def score(self, moved: np.ndarray, agent_rows: np.ndarray, fresh: np.ndarray) -> None:
        """Sync epoch: how far the transferred and the agent's rows were from the fresh ones."""
        _ops.drift_score_rows(self._rows(moved), self._rows(agent_rows), self._rows(fresh), self.sampled,
                              self.decay, self.margin, self.min_scores, self._err, self.scores, self._layer,
                              self._layer_scored)
        self._layer_scored = True

    def chosen(self) -> np.ndarray:
        """Positions (into the sampled rows) where the transferred row is served."""
        ok = (self.scores >= self.min_scores) & (self._err[0] < self.margin * self._err[1])
        return np.flatnonzero(ok)

    @property
    def layer_open(self) -> bool:
        """Whether the chosen rows, together, have beaten the agent's rows at recent syncs."""
        e = self._layer
        return self._layer_scored and e[0] < self.layer_margin * e[1]

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
