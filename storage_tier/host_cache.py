"""Partition-wise host cache: resident units under a byte budget, whole layers evicted LRU.

The load/evict granularity is one unit, ``(kind, layer, part)``: the rows of one
sub-partition (or of the halo) of one layer's activations or gradients. A *group*
``(kind, layer)`` is all units of one layer of one kind.

Replacement (GriNNder section 4): to make room, :meth:`HostCache.admit` first evicts whole
groups other than the incoming unit's own (and other than ``protect_groups``), least
recently used group first; only when that is not enough -- one layer alone exceeds the
budget -- it falls back to evicting single units (``unit_eviction=True``; units in
``protect_keys`` are never evicted): least recently used first, or, while the engine has
published the pass's access schedule (``next_use``), the unit needed farthest in the
future, bypassing the incoming unit instead when it is needed later than all of them. A unit larger than
the budget, or one that cannot be made room for, is *not admitted*: the caller uses it
transiently and drops it (bypass). The resident bytes never exceed the budget; the peak
is recorded.

Dirty units (gradients accumulated in place, or activations under the lazy write policy)
are handed to ``writeback(key, array)`` when evicted; clean ones are simply dropped
because storage already holds them. Dead data (a layer no longer needed this epoch) is
removed with :meth:`discard_group`, which never writes.

Owned by :class:`storage_tier.units.UnitStore` (for the layer-wise engine), which decides what to admit: inputs
gathered for the current layer, opportunistically the outputs it writes, and the
gradient accumulation buffers.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from .io.buffers import buffer_nbytes


@dataclass
class _Entry:
    arr: np.ndarray
    nbytes: int
    dirty: bool


def group_of(key) -> tuple:
    return (key[0], key[1])


class HostCache:
    """Resident units and their replacement policy; statistics for the metrics JSON."""

    def __init__(self, budget_bytes: int, writeback: Callable | None = None,
                 sizeof: Callable[[np.ndarray], int] = buffer_nbytes,
                 recycle: Callable[[np.ndarray], None] | None = None):
        if budget_bytes < 0:
            raise ValueError(f"host cache budget must be >= 0 bytes, got {budget_bytes}")
        self.budget = int(budget_bytes)
        self.writeback = writeback
        # where dropped buffers go for reuse (the I/O engine's ``pool.release``); None: nowhere
        self.recycle = recycle
        self.sizeof = sizeof
        self.next_use: Callable | None = None  # key -> next access in this pass (None: never)
        self._units: "OrderedDict[tuple, _Entry]" = OrderedDict()  # LRU first
        self._group_time: dict = {}
        self._groups: dict = {}  # group -> {key: None} (insertion-ordered)
        self._clock = 0
        self.resident_bytes = 0
        self.reset_stats()

    # ------------------------------------------------------------------ stats
    def reset_stats(self) -> None:
        self.hits = self.misses = 0
        self.admitted = self.rejected = 0
        self.group_evictions = self.unit_evictions = 0
        self.writeback_bytes = 0
        self.peak_bytes = self.resident_bytes

    def snapshot(self) -> dict:
        total = self.hits + self.misses
        return dict(cache_budget_bytes=self.budget, cache_peak_bytes=self.peak_bytes,
                    cache_resident_bytes=self.resident_bytes, cache_hits=self.hits,
                    cache_misses=self.misses, cache_hit_rate=self.hits / total if total else 0.0,
                    cache_admitted=self.admitted, cache_rejected=self.rejected,
                    cache_group_evictions=self.group_evictions,
                    cache_unit_evictions=self.unit_evictions,
                    cache_writeback_bytes=self.writeback_bytes)

    # ------------------------------------------------------------------ lookup
    def _touch(self, key) -> None:
        self._clock += 1
        self._units.move_to_end(key)
        self._group_time[group_of(key)] = self._clock

    def get(self, key, count: bool = True):
        """The resident array of ``key`` (refreshing its recency) or None; counts a hit/miss."""
        entry = self._units.get(key)
        if entry is None:
            if count:
                self.misses += 1
            return None
        if count:
            self.hits += 1
        self._touch(key)
        return entry.arr

    def peek(self, key):
        entry = self._units.get(key)
        return None if entry is None else entry.arr

    def __contains__(self, key) -> bool:
        return key in self._units

    def keys(self) -> list:
        return list(self._units)

    def is_dirty(self, key) -> bool:
        entry = self._units.get(key)
        return bool(entry and entry.dirty)

    # ------------------------------------------------------------------ admission / eviction
    def admit(self, key, arr: np.ndarray, dirty: bool = False, protect_groups: Iterable = (),
              protect_keys: Iterable = (), unit_eviction: bool = True) -> bool:
        """Make ``arr`` resident as ``key`` if the policy can make room; return whether it did.

        An existing entry of ``key`` is replaced (a newer version supersedes it; it is
        never written back). Eviction as described in the module docstring.
        """
        self.discard(key)
        nbytes = int(self.sizeof(arr))
        if nbytes > self.budget:
            self.rejected += 1
            return False
        own = group_of(key)
        protect_groups = set(protect_groups) | {own}
        protect_keys = set(protect_keys)
        while self.resident_bytes + nbytes > self.budget:
            groups = [g for g in self._groups if g not in protect_groups]
            if groups:
                victim = min(groups, key=lambda g: self._group_time.get(g, 0))
                for k in [k for k in self._groups[victim] if k not in protect_keys]:
                    self._evict(k)
                self.group_evictions += 1
                protect_groups.add(victim)  # whatever stayed (protected keys) is off limits
                continue
            if not unit_eviction:
                self.rejected += 1
                return False
            victim = self._unit_victim(key, protect_keys)
            if victim is None:
                self.rejected += 1
                return False
            self._evict(victim)
            self.unit_evictions += 1
        self._units[key] = _Entry(arr, nbytes, dirty)
        self._groups.setdefault(own, {})[key] = None
        self.resident_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.resident_bytes)
        self.admitted += 1
        self._touch(key)
        return True

    def _unit_victim(self, key, protect_keys):
        """The sub-partition unit to evict for ``key``, or None to bypass ``key`` instead.

        Without a schedule: the least recently used unit. With one (``next_use``, set by
        the engine for the pass in progress): the unit needed farthest in the future
        (never again first, least recently used among equals) -- Belady's choice, which
        keeps a stable subset resident under cyclic sub-partition scans where LRU would
        miss every time; and if every candidate is needed sooner than ``key`` itself,
        ``key`` is not admitted.
        """
        cands = [k for k in self._units if k not in protect_keys]
        if not cands:
            return None
        if self.next_use is None:
            return cands[0]
        inf = float("inf")

        def nu(k):
            v = self.next_use(k)
            return inf if v is None else v
        victim = max(cands, key=nu)  # first maximum = least recently used among ties
        need = nu(key)
        if nu(victim) < need or (nu(victim) == need and need != inf):
            return None
        return victim

    def _remove(self, key):
        entry = self._units.pop(key, None)
        if entry is not None:
            self.resident_bytes -= entry.nbytes
            members = self._groups[group_of(key)]
            del members[key]
            if not members:
                del self._groups[group_of(key)]
        return entry

    def _evict(self, key) -> None:
        entry = self._remove(key)
        if entry.dirty:
            if self.writeback is None:
                raise RuntimeError(f"dirty unit {key} evicted without a writeback target")
            self.writeback(key, entry.arr)
            self.writeback_bytes += entry.arr.nbytes
        self._recycle(entry.arr)  # reused only once nothing (e.g. a queued write) holds it

    def _recycle(self, arr: np.ndarray) -> None:
        if self.recycle is not None:
            self.recycle(arr)

    def flush(self, keys: Iterable) -> list:
        """Write back the dirty ones among ``keys`` (they stay resident, now clean)."""
        done = []
        for key in keys:
            entry = self._units.get(key)
            if entry is not None and entry.dirty:
                self.writeback(key, entry.arr)
                self.writeback_bytes += entry.arr.nbytes
                entry.dirty = False
                done.append(key)
        return done

    def discard(self, key) -> None:
        """Drop ``key`` without writing it back (its data is dead or superseded)."""
        entry = self._remove(key)
        if entry is not None:
            self._recycle(entry.arr)

    def discard_group(self, group) -> None:
        for key in self.group_keys(group):
            self.discard(key)

    def group_keys(self, group) -> list:
        return list(self._groups.get(tuple(group), ()))

    def clear(self) -> None:
        self._units.clear()
        self._groups.clear()
        self.resident_bytes = 0
