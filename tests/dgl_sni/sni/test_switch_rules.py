"""The stock-script switch's rules without a cluster: the exchange pattern, ids, the static cache."""
import numpy as np
import pytest
import torch

from dgl_sni.config import SNIConfig
from dgl_sni.config.sni import cache_budget
from dgl_sni.halo.resolver import Origin
from dgl_sni.metrics import Counters
from dgl_sni.sni.kvstore import _as_ids
from dgl_sni.sni.served import ExchangeUse, may_serve_stale
from dgl_sni.sni.static_cache import StaticRowCache


def _steps(use, n, own=True):
    served = []
    for _ in range(n):
        use.on_push(own)
        served.append(use.on_pull())
    return served


def test_the_exchange_pattern_is_served_from_its_third_step():
    use = ExchangeUse()
    assert _steps(use, 5) == [False, False, True, True, True] and not use.broken


@pytest.mark.parametrize("breaker, reason", [
    (lambda u: (u.on_push(False), u.on_pull()), "a push wrote rows of other machines"),
    (lambda u: (u.on_push(True), u.on_push(True), u.on_pull()), "two pushes in one step"),
    (lambda u: (u.on_push(True), u.on_pull(), u.on_pull()), "two pulls in one step"),
])
def test_any_other_use_is_exact_for_the_rest_of_the_run(breaker, reason):
    use = ExchangeUse()
    _steps(use, 3)
    breaker(use)
    assert use.reason == reason
    assert _steps(use, 4) == [False] * 4  # even a clean pattern afterwards is never served


def test_a_pull_before_any_write_is_not_the_pattern():
    """An evaluation buffer read before it is (re)written, or a tensor only read."""
    use = ExchangeUse()
    assert use.on_pull() is False and use.reason == "a pull with no push before it"


def test_ids_become_int64_and_bad_ids_are_named():
    assert _as_ids(torch.tensor([3, 1], dtype=torch.int32)).dtype == torch.int64
    assert _as_ids([2, 2, 0]).tolist() == [2, 2, 0]
    with pytest.raises(TypeError, match="boolean mask"):
        _as_ids(torch.tensor([True, False]))
    with pytest.raises(TypeError, match="integers"):
        _as_ids(torch.tensor([1.0]))


def test_nothing_can_be_stale_at_interval_1_or_without_a_predictor():
    assert not may_serve_stale(SNIConfig(sync_interval=1))
    assert not may_serve_stale(SNIConfig(sync_interval=5, predictor="none"))
    assert may_serve_stale(SNIConfig(sync_interval=2))


def test_cache_budget_sizes_and_shares():
    assert cache_budget("20%", 1000) == 200 and cache_budget("1K", 0) == 1024 and cache_budget("0", 5) == 0
    with pytest.raises(ValueError, match="0%..100%"):
        cache_budget("120%", 10)
    with pytest.raises(ValueError, match="feature_cache_bytes must be"):
        SNIConfig(feature_cache_bytes="lots").validate()


class _Rows:
    """Row ``i`` is ``[i, i+0.5]``; records every pull."""

    def __init__(self):
        self.pulled = []

    def publish(self):
        pass

    def pull(self, ids):
        self.pulled.append(np.asarray(ids).tolist())
        ids = np.asarray(ids, dtype=np.float32)
        return np.stack([ids, ids + 0.5], axis=1)

    def peek(self):
        raise AssertionError("a static tensor is never peeked")


class _StaticTensor:
    """A static tensor's lookups as the switch makes them (``resolve(step, training, src, ids)``)."""

    def __init__(self, cache, counters):
        self.static_cache, self.counters = cache, counters

    def resolve(self, _step, _training, src, ids):
        return self.static_cache.lookup(ids, src.pull, self.counters)


def _static(capacity, ranking=None, replan_every=1000):
    counters = Counters()
    cache = StaticRowCache(capacity, ranking, replan_every=replan_every)
    return _StaticTensor(cache, counters), counters


def test_static_rows_are_exact_with_duplicates_and_pulled_once():
    res, counters = _static(None)
    src = _Rows()
    ids = np.array([7, 3, 7, 9], dtype=np.int64)
    first = res.resolve(0, True, src, ids=ids)
    assert src.pulled == [[3, 7, 9]]  # duplicates pulled once
    assert first.rows.tolist() == src.pull(ids).tolist() and first.count(Origin.PULLED) == 4
    again = res.resolve(1, True, src, ids=np.array([9, 3, 3, 11]))
    assert src.pulled[-1] == [11] and again.rows[:, 0].tolist() == [9, 3, 3, 11]
    assert again.origin.tolist() == [Origin.STATIC, Origin.STATIC, Origin.STATIC, Origin.PULLED]
    assert counters.extra["served_rows"] == 3


def test_the_budget_keeps_the_rows_with_most_in_edges_first():
    ranking = lambda: (np.array([10, 11, 12, 13]), np.array([1, 5, 5, 2]))  # noqa: E731
    res, _ = _static(3, ranking)
    src = _Rows()
    res.resolve(0, True, src, ids=np.array([10, 13, 20, 21]))  # ranked: 11, 12 (tie by id), 13
    hits = res.resolve(1, True, src, ids=np.array([10, 11, 12, 13, 20, 21]))
    # the capacity of 3 is planned for 11, 12, 13 (most in-edges, ties by id): 10, 20, 21 are pulled again
    assert hits.origin.tolist() == [Origin.PULLED, Origin.PULLED, Origin.PULLED, Origin.STATIC,
                                    Origin.PULLED, Origin.PULLED]
    full = res.resolve(2, True, src, ids=np.array([11, 12, 13]))
    assert full.count(Origin.STATIC) == 3 and res.static_cache.used == 3
    assert full.rows[:, 0].tolist() == [11, 12, 13]


def test_slots_the_ranking_leaves_free_take_rows_in_first_pull_order():
    res, _ = _static(3, lambda: (np.array([50]), np.array([4])))
    src = _Rows()
    res.resolve(0, True, src, ids=np.array([5, 6, 7, 8]))  # 50 reserved; 5 and 6 take the free slots
    again = res.resolve(1, True, src, ids=np.array([5, 6, 7, 8, 50]))
    assert again.origin.tolist() == [Origin.STATIC, Origin.STATIC, Origin.PULLED, Origin.PULLED, Origin.PULLED]
    assert res.resolve(2, True, src, ids=np.array([50])).count(Origin.STATIC) == 1


def test_counted_accesses_replace_the_in_edge_plan():
    """After ``replan_every * capacity`` accesses the rows accessed most are the ones kept."""
    res, _ = _static(2, lambda: (np.array([1, 2]), np.array([9, 8])), replan_every=3)
    src = _Rows()
    res.resolve(0, True, src, ids=np.array([1, 2, 7]))  # plan 1, 2 (in-edges): both kept
    assert res.resolve(1, True, src, ids=np.array([1, 2])).count(Origin.STATIC) == 2
    # 7 and 8 are needed far more often than 1 and 2: after the re-plans, 7 and 8 are kept
    for step in range(2, 6):
        res.resolve(step, True, src, ids=np.array([7, 8, 7, 1, 8]))
    again = res.resolve(6, True, src, ids=np.array([1, 2, 7, 8]))
    kept = {int(i) for i, o in zip([1, 2, 7, 8], again.origin) if o == Origin.STATIC}
    assert kept == {7, 8} and res.static_cache.cached_rows == 2
    assert again.rows[:, 0].tolist() == [1, 2, 7, 8]  # exact whatever is kept


def test_rows_written_here_leave_the_cache_and_budget_zero_keeps_nothing():
    res, _ = _static(None)
    src = _Rows()
    res.resolve(0, True, src, ids=np.array([1, 2, 3]))
    res.static_cache.invalidate(np.array([2]))
    assert res.resolve(1, True, src, ids=np.array([1, 2, 3])).origin.tolist() == [
        Origin.STATIC, Origin.PULLED, Origin.STATIC]
    res.static_cache.invalidate()
    assert res.resolve(2, True, src, ids=np.array([1, 3])).count(Origin.PULLED) == 2
    off, _ = _static(0)
    off.resolve(0, True, src, ids=np.array([1, 2]))
    assert off.resolve(1, True, src, ids=np.array([1, 2])).count(Origin.PULLED) == 2
    with pytest.raises(ValueError, match="capacity"):
        StaticRowCache(-1)


class _Policy:
    """Rows 0-9 belong to machine 0, 10-19 to machine 1, ..."""

    def to_partid(self, ids):
        return torch.as_tensor(ids) // 10


class _Board:
    def __init__(self):
        self.posts = []

    def post(self, name, ids):
        self.posts.append((name, None if ids is None else ids.tolist()))


class _Client:
    """What a switch tensor asks of its client, without a cluster (machine 0 of 3)."""

    def __init__(self, **cfg):
        self.cfg = SNIConfig(**cfg).validate()
        meta = (torch.float32, (30, 2), _Policy())
        self.kv = type("KV", (), {"machine_id": 0, "get_data_meta": lambda _, name: meta})()
        self.notices = _Board()

    def new_static_cache(self, tensor):
        return StaticRowCache(None)

    def new_table_id(self):
        return 1

    def agent(self):
        raise AssertionError("no agent without a stale pull")

    def edge_counts(self, ids):
        return np.zeros(ids.size, np.int64)


def test_writes_that_may_leave_copies_stale_elsewhere_are_posted():
    from dgl_sni.sni.served import ServedTensor
    client = _Client(sync_interval=3, static=["feat"])
    static = ServedTensor(client, "feat", "feat", "static")
    exchange = ServedTensor(client, "h", "h", "exchange")
    static.on_push(torch.tensor([1, 2]))  # own rows of static data: others may cache them
    exchange.on_push(torch.tensor([3, 4]))  # own rows of the exchange: the pattern, not posted
    exchange.on_push(torch.tensor([5, 15, 27]))  # rows of machines 1 and 2: posted
    assert client.notices.posts == [("feat", [1, 2]), ("h", [15, 27])]
    assert exchange.role == "plain" and static.role == "static"  # a named static tensor stays cached


def test_notices_of_other_machines_writes_drop_what_is_held_here():
    from dgl_sni.sni.served import ServedTensor
    client = _Client(sync_interval=3, static=["named_feat"])
    named_static = ServedTensor(client, "named_feat", "named_feat", "static")
    src = _Rows()
    named_static.static_cache.lookup(np.array([11, 12, 13]), src.pull, Counters())
    named_static.on_notice(np.array([12]))
    again = named_static.static_cache.lookup(np.array([11, 12, 13]), src.pull, Counters())
    assert again.origin.tolist() == [Origin.STATIC, Origin.PULLED, Origin.STATIC]
    detected = ServedTensor(client, "feat", "feat", "static")
    detected.on_notice(np.array([12]))
    assert detected.role == "plain" and detected.counters.extra["exact_because"] == "written by another machine"
    exchange = ServedTensor(client, "h", "h", "exchange")
    exchange.on_notice(np.array([3, 7]))  # rows of this machine (read from its shared memory): nothing held
    assert exchange.role == "exchange"
    exchange.on_notice(np.array([3, 25]))
    assert exchange.role == "plain"
    assert exchange.counters.extra["exact_because"] == "another machine wrote rows of other machines"
    named = ServedTensor(_Client(sync_interval=3, tensors=["e"]), "e", "e", "named")
    named.on_notice(np.array([25, 21]))
    named.on_notice(None)  # any row: every row pulled until the next sync
    assert named.role == "named" and named._dirty.tolist() == list(range(30))


def test_the_switch_refuses_every_setting_it_would_not_honour():
    from dgl_sni.config.presets import RULES
    from dgl_sni.sni.kvstore import enable
    refused = {"smooth": 0.5, "quantize": 8, "stale_halo": "summed", "row_average": 0.9, "grad_average": 0.9,
               "sync_policy": "drift", "stale_grad": "last", "sync_halo": "inputs", "transfer": True,
               "halo_sample": 0.5, "stale_truth": "rows"}
    # every refusal of the switch's rows is refused by enable(), each naming its setting and context
    assert {r.setting for r in RULES if r.context == "switch" and r.refuse} == set(refused)
    for name, value in refused.items():
        with pytest.raises(ValueError, match=f"{name}={value!r} cannot apply with switch"):
            enable({name: value, "sync_interval": 3})
    # a value equal to the one the switch runs is no error: the rule's value is what runs
    assert SNIConfig.from_dict({"sync_policy": "fixed", "smooth": 0.0}).sync_policy == "fixed"
