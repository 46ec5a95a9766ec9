"""The stock-script switch's exact cache of read-only rows (input features).

A stock DistDGL script reads the graph's input features by id, mini-batch after
mini-batch; the rows other machines own cross the network every time. The switch keeps
them in a budgeted exact cache per tensor (``feature_cache_bytes``), filled on first pull
and emptied of rows that are written (:mod:`dgl_sni.sni.kvstore`). Exact at every sync
interval: the rows never change while they are cached.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..halo.resolver import Origin, Resolved
from ..metrics import Counters


class StaticRowCache:
    """The exact cache of one read-only tensor's remote rows (the resolver's ``STATIC`` rows).

    Owned by the stock-script switch's static tensors, which size it from
    ``feature_cache_bytes`` and read through :meth:`lookup`. Filled on first pull; rows this machine writes are dropped
    (:meth:`invalidate`). ``capacity``: rows it may hold (``None``: unbounded, every row
    pulled stays). Which rows a bounded cache keeps is ordered by how often they are
    needed: at first by ``ranking()`` (candidate ids and their in-edges into this
    machine's partition), then, once it has counted as many accesses as ``replan_every``
    times its capacity, by the accesses it counted (the in-edges break ties), re-planned at
    each such count; rows that drop out of the plan leave, rows that
    enter it are kept at their next pull. Slots the plan leaves free take rows in the order
    they are first pulled.
    """

    def __init__(self, capacity: int | None,
                 ranking: "Callable[[], tuple[np.ndarray, np.ndarray]] | None" = None, replan_every: int = 2):
        if capacity is not None and capacity < 0:
            raise ValueError(f"a static row cache needs a capacity >= 0, got {capacity}")
        self.capacity, self._ranking, self.replan_every = capacity, ranking, replan_every
        self._slot = np.zeros(0, dtype=np.int64)  # id -> slot (-1: not cached)
        self._planned = np.zeros(0, dtype=bool)  # id -> among the rows the plan keeps
        self._edges = np.zeros(0, dtype=np.int64)  # id -> in-edges into the partition (ranking)
        self._counts = np.zeros(0, dtype=np.int64)  # id -> accesses counted
        self._since_plan = 0
        self._free_unplanned = None  # slots left for rows outside the plan (None: not planned yet)
        self._free = []  # slots given back by rows that left
        self._rows = None
        self.used = 0  # slots ever filled (the high-water mark of ``_rows``)

    @property
    def row_shape(self) -> tuple:
        return tuple(self._rows.shape[1:]) if self._rows is not None else ()

    @property
    def dtype(self):
        return self._rows.dtype if self._rows is not None else np.float32

    def _grow(self, top: int) -> None:
        if top > self._slot.size:
            extra = max(top, 2 * self._slot.size) - self._slot.size
            self._slot = np.concatenate([self._slot, np.full(extra, -1, np.int64)])
            self._planned = np.concatenate([self._planned, np.zeros(extra, bool)])
            self._edges = np.concatenate([self._edges, np.zeros(extra, np.int64)])
            self._counts = np.concatenate([self._counts, np.zeros(extra, np.int64)])

    def _plan(self) -> None:
        """The first plan: the best-ranked rows by in-edges (once, at the first admission)."""
        planned = 0
        if self._ranking is not None and self.capacity:
            ids, need = self._ranking()
            ids, need = np.asarray(ids, np.int64), np.asarray(need, np.int64)
            if ids.size:
                self._grow(int(ids.max()) + 1)
                self._edges[ids] = need
            keep = ids[np.lexsort((ids, -need))][: self.capacity]
            self._planned[keep] = True
            planned = keep.size
        self._free_unplanned = None if self.capacity is None else self.capacity - planned

    def _replan(self) -> None:
        """Keep the ``capacity`` rows accessed most so far (in-edges, then id, break ties)."""
        seen = np.flatnonzero((self._counts > 0) | self._planned)
        order = np.lexsort((seen, -self._edges[seen], -self._counts[seen]))
        keep = seen[order[: self.capacity]]
        self._planned[:] = False
        self._planned[keep] = True
        self._free_unplanned = 0
        leaving = np.flatnonzero((self._slot >= 0) & ~self._planned)
        self._free.extend(self._slot[leaving].tolist())
        self._slot[leaving] = -1
        self._since_plan = 0

    def slots(self, ids: np.ndarray) -> np.ndarray:
        """Per id its slot, -1 where the row is not cached; counts the accesses."""
        out = np.full(ids.size, -1, dtype=np.int64)
        if self.capacity is not None and self.capacity > 0 and ids.size:
            self._grow(int(ids.max()) + 1)
            np.add.at(self._counts, ids, 1)
            self._since_plan += ids.size
            if self._free_unplanned is not None and self._since_plan >= self.replan_every * self.capacity:
                self._replan()
        inside = ids < self._slot.size
        out[inside] = self._slot[ids[inside]]
        return out

    def rows_at(self, slots: np.ndarray) -> np.ndarray:
        return self._rows[slots] if slots.size else np.empty((0,) + self.row_shape, self.dtype)

    def _take_slots(self, n: int) -> np.ndarray:
        reused = [self._free.pop() for _ in range(min(n, len(self._free)))]
        fresh = np.arange(self.used, self.used + n - len(reused))
        self.used += fresh.size
        return np.concatenate([np.asarray(reused, np.int64), fresh]).astype(np.int64)

    def admit(self, ids: np.ndarray, rows: np.ndarray) -> None:
        """Keep the rows of ``ids`` (unique, just pulled) that the plan has room for."""
        if self._free_unplanned is None and self.capacity is not None:
            self._plan()
        if self.capacity == 0 or ids.size == 0:
            return
        self._grow(int(ids.max()) + 1)
        take = self._slot[ids] < 0
        if self.capacity is not None:
            planned = self._planned[ids]
            extra = np.flatnonzero(take & ~planned)[: max(self._free_unplanned, 0)]
            self._free_unplanned -= extra.size
            chosen = np.zeros(ids.size, bool)
            chosen[extra] = True
            take &= planned | chosen
        idx = np.flatnonzero(take)
        if not idx.size:
            return
        if self._rows is None:
            cap = self.capacity if self.capacity is not None else max(idx.size, 1024)
            self._rows = np.empty((cap,) + rows.shape[1:], dtype=rows.dtype)
        slots = self._take_slots(idx.size)
        top = int(slots.max()) + 1
        if top > self._rows.shape[0]:  # unbounded: grow
            bigger = np.empty((max(top, 2 * self._rows.shape[0]),) + self._rows.shape[1:], dtype=self._rows.dtype)
            bigger[: self._rows.shape[0]] = self._rows
            self._rows = bigger
        self._rows[slots] = rows[idx]
        self._slot[ids[idx]] = slots

    def invalidate(self, ids: np.ndarray | None = None) -> None:
        """Forget the rows of ``ids`` (``None``: every row); they are pulled again next time."""
        gone = np.flatnonzero(self._slot >= 0) if ids is None else np.asarray(ids, np.int64)
        gone = gone[gone < self._slot.size]
        gone = gone[self._slot[gone] >= 0]
        self._free.extend(self._slot[gone].tolist())
        self._slot[gone] = -1

    @property
    def cached_rows(self) -> int:
        return int((self._slot >= 0).sum())

    def lookup(self, ids: np.ndarray, pull: "Callable[[np.ndarray], np.ndarray]", counters: Counters) -> Resolved:
        """Rows of ``ids``: cached ones from the cache (``STATIC``, counted as ``served_rows``),
        the others through ``pull`` (``PULLED``; kept where the plan has room). Duplicates are
        pulled once."""
        ids = np.asarray(ids, dtype=np.int64)
        slot = self.slots(ids)
        miss = slot < 0
        if miss.any():
            uniq, inverse = np.unique(ids[miss], return_inverse=True)
            fetched = np.asarray(pull(uniq))
            self.admit(uniq, fetched)
            rows = np.empty((ids.size,) + fetched.shape[1:], dtype=fetched.dtype)
            rows[miss] = fetched[inverse]
        else:
            rows = np.empty((ids.size,) + self.row_shape, dtype=self.dtype)
        hit = ~miss
        if hit.any():
            rows[hit] = self.rows_at(slot[hit])
        counters.add("served_rows", int(hit.sum()))
        origin = np.where(miss, int(Origin.PULLED), int(Origin.STATIC)).astype(np.uint8)
        return Resolved(rows, origin)
