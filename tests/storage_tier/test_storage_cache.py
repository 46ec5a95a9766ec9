"""Host cache: whole-layer LRU eviction, sub-partition fallback, budget enforcement, write-back."""
import numpy as np
import pytest

from storage_tier.host_cache import HostCache

UNIT = 1000  # bytes per test unit (sizeof is overridden: plain arrays, exact sizes)


def unit(fill=0.0):
    return np.full(UNIT // 4, fill, dtype=np.float32)


def make(budget_units, **kw):
    written = []
    cache = HostCache(budget_units * UNIT, writeback=lambda k, a: written.append(k),
                      sizeof=lambda a: a.nbytes, **kw)
    return cache, written


def test_whole_layers_evicted_lru_first():
    cache, _ = make(6)
    for layer in (0, 1, 2):
        for part in (0, 1):
            assert cache.admit(("act", layer, part), unit())
    assert cache.resident_bytes == 6 * UNIT
    cache.get(("act", 0, 1))  # layer 0 is now more recent than layer 1
    assert cache.admit(("act", 3, 0), unit())
    # the least recently used *layer* (1) went, entirely; layers 0 and 2 are whole
    assert ("act", 1, 0) not in cache and ("act", 1, 1) not in cache
    assert all((("act", l, p) in cache) for l in (0, 2) for p in (0, 1))
    assert cache.group_evictions == 1 and cache.unit_evictions == 0
    assert cache.admit(("act", 3, 1), unit())  # fits in the room freed by layer 1
    assert cache.admit(("act", 3, 2), unit())  # next LRU layer: 2
    assert ("act", 2, 0) not in cache and ("act", 0, 0) in cache


def test_falls_back_to_unit_eviction_when_one_layer_exceeds_budget():
    cache, _ = make(3)
    for part in range(3):
        assert cache.admit(("act", 5, part), unit())
    cache.get(("act", 5, 0))  # part 1 is now the least recently used unit
    assert cache.admit(("act", 5, 3), unit())
    assert ("act", 5, 1) not in cache
    assert [k for k in cache.keys()] == [("act", 5, 2), ("act", 5, 0), ("act", 5, 3)]
    assert cache.unit_evictions == 1 and cache.group_evictions == 0
    # protected keys are never evicted
    assert cache.admit(("act", 5, 4), unit(), protect_keys={("act", 5, 2)})
    assert ("act", 5, 2) in cache and ("act", 5, 0) not in cache


def test_other_layers_go_before_units_of_the_active_layer():
    cache, _ = make(4)
    cache.admit(("act", 0, 0), unit())
    cache.admit(("act", 0, 1), unit())
    cache.admit(("act", 1, 0), unit())
    cache.admit(("act", 1, 1), unit())
    cache.get(("act", 1, 0))
    cache.get(("act", 0, 0))  # layer 0 most recent, but layer 1 is the incoming unit's own
    assert cache.admit(("act", 1, 2), unit())
    assert ("act", 0, 0) not in cache and ("act", 0, 1) not in cache
    assert {("act", 1, p) for p in range(3)} <= set(cache.keys())


def test_protected_groups_and_opportunistic_admission():
    cache, _ = make(3)
    for part in range(3):
        cache.admit(("act", 1, part), unit())
    # an output unit may not evict the layer being read: rejected, nothing evicted
    assert not cache.admit(("act", 2, 0), unit(), protect_groups={("act", 1)}, unit_eviction=False)
    assert cache.resident_bytes == 3 * UNIT and cache.rejected == 1
    # without protection the whole other layer goes
    assert cache.admit(("act", 2, 0), unit(), unit_eviction=False)
    assert cache.keys() == [("act", 2, 0)]


def test_budget_never_exceeded_and_oversized_units_bypass():
    rng = np.random.default_rng(0)
    cache, _ = make(5)
    assert not cache.admit(("act", 0, 0), np.zeros(6 * UNIT // 4, np.float32))
    for _ in range(2000):
        layer, part = int(rng.integers(4)), int(rng.integers(6))
        size = int(rng.integers(1, 3)) * UNIT // 4
        op = rng.random()
        key = ("act" if rng.random() < 0.5 else "grad", layer, part)
        if op < 0.6:
            cache.admit(key, np.zeros(size, np.float32), dirty=key[0] == "grad",
                        unit_eviction=bool(rng.random() < 0.7))
        elif op < 0.9:
            cache.get(key)
        else:
            cache.discard_group(key[:2])
        assert cache.resident_bytes <= cache.budget
        assert cache.resident_bytes == sum(cache.peek(k).nbytes for k in cache.keys())
    assert 0 < cache.peak_bytes <= cache.budget


def test_dirty_units_written_back_on_eviction_only():
    cache, written = make(2)
    cache.admit(("grad", 1, 0), unit(), dirty=True)
    cache.admit(("act", 1, 0), unit())
    cache.discard(("act", 1, 0))
    assert written == []  # discarding dead data never writes
    cache.admit(("act", 2, 0), unit())
    cache.admit(("act", 3, 0), unit())  # evicts the LRU layer: the dirty gradient unit
    assert written == [("grad", 1, 0)] and cache.writeback_bytes == UNIT
    cache.admit(("grad", 4, 0), unit(), dirty=True)
    assert cache.flush([("grad", 4, 0), ("act", 3, 0)]) == [("grad", 4, 0)]
    assert not cache.is_dirty(("grad", 4, 0)) and ("grad", 4, 0) in cache
    cache.admit(("act", 5, 0), unit())
    cache.admit(("act", 6, 0), unit())
    assert written == [("grad", 1, 0), ("grad", 4, 0)]  # flushed, then evicted clean: no rewrite


def test_hit_rate_and_snapshot():
    cache, _ = make(2)
    cache.admit(("act", 0, 0), unit())
    assert cache.get(("act", 0, 0)) is not None
    assert cache.get(("act", 0, 1)) is None
    snap = cache.snapshot()
    assert snap["cache_hits"] == 1 and snap["cache_misses"] == 1 and snap["cache_hit_rate"] == 0.5
    assert snap["cache_budget_bytes"] == 2 * UNIT and snap["cache_peak_bytes"] == UNIT
    with pytest.raises(ValueError):
        HostCache(-1)


def test_schedule_aware_unit_eviction_keeps_a_stable_subset():
    # one layer of 4 units, room for 2, scanned cyclically 0,1,2,3,0,1,2,3,...: LRU would
    # miss every access; evicting the unit needed farthest ahead keeps hitting
    schedule = [p for _ in range(5) for p in range(4)]
    for use_schedule in (False, True):
        cache, _ = make(2)
        pos = [0]

        def next_use(key):
            later = [i for i in range(pos[0], len(schedule)) if schedule[i] == key[2]]
            return later[0] if later else None
        cache.next_use = next_use if use_schedule else None
        hits = 0
        for i, part in enumerate(schedule):
            pos[0] = i + 1
            key = ("act", 1, part)
            if cache.get(key) is not None:
                hits += 1
            else:
                cache.admit(key, unit())
            assert cache.resident_bytes <= cache.budget
        if use_schedule:
            assert hits >= 8  # Belady: about half the accesses hit
        else:
            assert hits == 0  # LRU thrashes on a cyclic scan larger than the cache


def test_schedule_aware_admission_bypasses_units_needed_later():
    cache, _ = make(2)
    uses = {("act", 1, 0): 1, ("act", 1, 1): 2, ("act", 1, 2): 9}
    cache.next_use = uses.get
    cache.admit(("act", 1, 0), unit())
    cache.admit(("act", 1, 1), unit())
    assert not cache.admit(("act", 1, 2), unit())  # both residents are needed sooner
    assert cache.rejected == 1 and cache.keys() == [("act", 1, 0), ("act", 1, 1)]
    uses[("act", 1, 3)] = None
    assert not cache.admit(("act", 1, 3), unit())  # never needed again: bypass
    uses[("act", 1, 0)] = None  # unit 0 is done: it goes first
    assert cache.admit(("act", 1, 2), unit())
    assert ("act", 1, 0) not in cache
