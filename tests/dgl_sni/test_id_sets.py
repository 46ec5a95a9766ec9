"""Registered halo id sets, server side: rows by set name, the tensor's own handlers, no ids on the wire."""
import pytest
import torch
from dgl.distributed import rpc
from dgl.distributed.kvstore import PullRequest

from dgl_sni.halo import id_sets
from dgl_sni.halo.tensors import accumulate_push_handler


class _Policy:
    def __init__(self, policy_str, start):
        self.policy_str, self.start = policy_str, start

    def to_local(self, ids):
        return ids - self.start


class _KV:
    """The parts of DGL's KVServer the requests read: this machine owns global rows 100..109."""

    def __init__(self):
        self.part_policy = {"h1": _Policy("node~_N", 100), "g1": _Policy("node~_N", 100),
                            "e1": _Policy("edge~_E", 100)}
        self.data_store = {"h1": torch.arange(30.0).reshape(10, 3), "g1": torch.zeros(10, 3, dtype=torch.float64),
                           "e1": torch.zeros(10, 3)}
        self.pull_handlers = {"h1": lambda store, name, local: store[name][local]}
        self.push_handlers = {"g1": accumulate_push_handler}


class _State:
    def __init__(self):
        self.kv_store = _KV()


@pytest.fixture
def server():
    id_sets._SETS.clear()
    yield _State()
    id_sets._SETS.clear()


def test_a_registered_set_pulls_and_accumulates_its_rows_in_registered_order(server):
    ack = id_sets.RegisterSetRequest("h1", 3, "halo", torch.tensor([107, 101, 107])).process_request(server)
    assert isinstance(ack, id_sets.SetAck)
    rows = id_sets.PullSetRequest("h1", 3, "halo").process_request(server).rows
    assert torch.equal(rows, server.kv_store.data_store["h1"][[7, 1, 7]])
    grad = torch.ones(3, 3)
    assert id_sets.PushSetRequest("g1", 3, "halo", grad).process_request(server) is None  # no answer
    expect = torch.zeros(10, 3, dtype=torch.float64)
    expect[7], expect[1] = 2.0, 1.0  # a member listed twice gets both rows
    assert torch.equal(server.kv_store.data_store["g1"], expect)
    assert isinstance(id_sets.FlushSetRequest().process_request(server), id_sets.SetAck)


def test_sets_are_per_trainer_and_unknown_or_mismatched_sets_are_refused(server):
    id_sets.RegisterSetRequest("h1", 0, "halo", torch.tensor([100])).process_request(server)
    id_sets.RegisterSetRequest("h1", 1, "halo", torch.tensor([109])).process_request(server)
    assert float(id_sets.PullSetRequest("h1", 1, "halo").process_request(server).rows[0, 0]) == 27.0
    with pytest.raises(RuntimeError, match="no halo id set 'other' is registered for trainer 0"):
        id_sets.PullSetRequest("h1", 0, "other").process_request(server)
    with pytest.raises(RuntimeError, match="registered for 'node~_N'; tensor 'e1' is sharded by 'edge~_E'"):
        id_sets.PushSetRequest("e1", 0, "halo", torch.ones(1, 3)).process_request(server)
    id_sets.RegisterSetRequest("h1", 0, "halo", torch.tensor([102, 103])).process_request(server)  # replaces
    assert id_sets.PullSetRequest("h1", 0, "halo").process_request(server).rows.shape == (2, 3)


def test_set_requests_carry_no_ids():
    ids = torch.arange(1000)
    _, dgl_pull = rpc.serialize_to_payload(PullRequest("h1", ids))
    _, set_pull = rpc.serialize_to_payload(id_sets.PullSetRequest("h1", 0, "halo"))
    _, set_push = rpc.serialize_to_payload(id_sets.PushSetRequest("g1", 0, "halo", torch.ones(1000, 16)))
    assert [t.numel() for t in dgl_pull] == [1000] and set_pull == []
    assert [tuple(t.shape) for t in set_push] == [(1000, 16)]  # the gradient rows only


@pytest.mark.parametrize("dtype,shape", [(torch.float32, (10, 16)), (torch.uint8, (10, 24)), (torch.uint8, (10, 13)),
                                         (torch.float64, (10, 5)), (torch.int16, (10, 3)), (torch.float32, (10, 3, 2))])
def test_gather_rows_equals_indexing_bit_for_bit(dtype, shape):
    g = torch.Generator().manual_seed(0)
    data = (torch.randn(shape, generator=g) * 100).to(dtype)
    offsets = torch.tensor([9, 0, 4, 4, 7])
    rows = id_sets.gather_rows(data, offsets)
    assert rows.dtype == dtype and rows.shape == (5,) + shape[1:] and rows.is_contiguous()
    assert torch.equal(rows.view(torch.uint8), data[offsets].view(torch.uint8))
    assert id_sets.gather_rows(data, offsets[:0]).shape == (0,) + shape[1:]


def test_default_handler_pulls_are_gathered_and_other_handlers_called(server, monkeypatch):
    from dgl.distributed.kvstore import default_pull_handler
    kv = server.kv_store
    kv.pull_handlers["h1"] = default_pull_handler
    gathered = []
    real = id_sets.gather_rows
    monkeypatch.setattr(id_sets, "gather_rows", lambda data, off: gathered.append(off) or real(data, off))
    id_sets.RegisterSetRequest("h1", 0, "halo", torch.tensor([108, 102])).process_request(server)
    rows = id_sets.PullSetRequest("h1", 0, "halo").process_request(server).rows
    assert torch.equal(rows, kv.data_store["h1"][[8, 2]]) and len(gathered) == 1
    kv.pull_handlers["h1"] = lambda store, name, local: -store[name][local]  # the tensor's own handler
    rows = id_sets.PullSetRequest("h1", 0, "halo").process_request(server).rows
    assert torch.equal(rows, -kv.data_store["h1"][[8, 2]]) and len(gathered) == 1
