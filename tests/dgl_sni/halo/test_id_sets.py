"""Registered halo id sets, server side: rows by set name, the tensor's own handlers, no ids on the wire."""
import pytest
import torch
from dgl.distributed import rpc
from dgl.distributed.kvstore import PullRequest

from dgl_sni.halo import id_sets
from dgl_sni.halo.grad_shard import accumulate_push_handler


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
        self.data_store = {"h1": torch.arange(30.0).reshape(10, 3), "g1": torch.zeros(10, 2, 3, dtype=torch.float64),
                           "e1": torch.zeros(10, 3)}
        self.pull_handlers = {"h1": lambda store, name, local: store[name][local]}
        self.push_handlers = {"g1": accumulate_push_handler}


class _State:
    def __init__(self):
        self.kv_store = _KV()


_SERVER_STATE = ("_SETS", "_published", "_writers", "_pushes", "_held")


@pytest.fixture
def server():
    for name in _SERVER_STATE:
        getattr(id_sets, name).clear()
    yield _State()
    for name in _SERVER_STATE:
        getattr(id_sets, name).clear()


@pytest.fixture
def sent(monkeypatch):
    """The answers of held requests, as (trainer rank, group, message sequence, answer)."""
    out = []
    monkeypatch.setattr(id_sets, "_send_held", lambda rank, group, seq, response: out.append((rank, group, seq, response)))
    return out


def test_a_registered_set_pulls_and_accumulates_its_rows_in_registered_order(server):
    ack = id_sets.RegisterSetRequest("h1", 3, "halo", torch.tensor([107, 101, 107])).process_request(server)
    assert isinstance(ack, id_sets.SetAck)
    rows = id_sets.PullSetRequest("h1", 3, "halo").process_request(server).rows
    assert torch.equal(rows, server.kv_store.data_store["h1"][[7, 1, 7]])
    grad = torch.ones(3, 3)
    assert id_sets.PushSetRequest("g1", 3, "halo", grad).process_request(server) is None  # no answer
    expect = torch.zeros(10, 3, dtype=torch.float64)
    expect[7], expect[1] = 2.0, 1.0  # a member listed twice gets both rows
    assert torch.equal(server.kv_store.data_store["g1"][:, 0], expect)
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


def _request(state, request, seq):
    """Handle ``request`` as DGL's server loop does: its message number set first."""
    rpc.set_msg_seq(seq)
    return request.process_request(state)


def test_a_pull_is_held_until_every_writer_of_the_shard_announced_its_write(server, sent):
    kv = server.kv_store
    id_sets.RegisterSetRequest("h1", 3, "halo", torch.tensor([104, 100])).process_request(server)
    assert _request(server, id_sets.PullSetRequest("h1", 3, "halo", after=1, group=2), 41) is None  # held
    kv.data_store["h1"][4] = -1.0  # the first writer's rows; the second has not written
    assert _request(server, id_sets.PublishedRequest("h1", 0, 1, writers=2), 42) is None and sent == []
    kv.data_store["h1"][0] = -2.0
    _request(server, id_sets.PublishedRequest("h1", 1, 1, writers=2), 43)
    (rank, group, seq, answer), = sent
    assert (rank, group, seq) == (3, 2, 41)  # to the puller, numbered as its request
    assert torch.equal(answer.rows, torch.tensor([[-1.0] * 3, [-2.0] * 3]))
    # a pull of a write already announced is answered at once; of the next one, held again
    assert torch.equal(_request(server, id_sets.PullSetRequest("h1", 3, "halo", after=1), 44).rows, answer.rows)
    assert _request(server, id_sets.PullSetRequest("h1", 3, "halo", after=2), 45) is None
    _request(server, id_sets.PublishedRequest("h1", 1, 2, writers=2), 46)
    assert len(sent) == 1  # one writer's second write is not enough
    _request(server, id_sets.PublishedRequest("h1", 0, 2, writers=2), 47)
    assert [s[2] for s in sent] == [41, 45]


def test_a_held_pull_of_an_unknown_set_fails_at_once(server, sent):
    with pytest.raises(RuntimeError, match="no halo id set 'halo' is registered for trainer 5"):
        id_sets.PullSetRequest("h1", 5, "halo", after=3).process_request(server)
    assert id_sets._held == {}


def test_gradients_are_awaited_until_every_registered_set_pushed_that_many_rounds(server, sent):
    kv = server.kv_store
    for rank, ids in ((1, [101, 102]), (2, [102])):  # two trainers have halo rows on this machine
        id_sets.RegisterSetRequest("h1", rank, "halo", torch.tensor(ids)).process_request(server)
    id_sets.RegisterSetRequest("h1", 3, "other", torch.tensor([109])).process_request(server)  # not a pusher here
    assert _request(server, id_sets.AwaitPushesRequest("g1", "halo", 1, rank=0, group=0), 7) is None
    _request(server, id_sets.PushSetRequest("g1", 1, "halo", torch.ones(2, 3)), 8)
    assert sent == []  # one of two pushes of round 1
    _request(server, id_sets.PushSetRequest("g1", 2, "halo", torch.ones(1, 3)), 9)
    (rank, group, seq, answer), = sent
    assert (rank, seq) == (0, 7) and isinstance(answer, id_sets.SetAck)
    assert float(kv.data_store["g1"][2, 0, 0]) == 2.0  # both pushes were applied before the answer
    assert isinstance(_request(server, id_sets.AwaitPushesRequest("g1", "halo", 1, rank=0), 10), id_sets.SetAck)
    assert _request(server, id_sets.AwaitPushesRequest("g1", "halo", 2, rank=0), 11) is None  # round 2: held


def test_held_answers_are_sent_numbered_as_their_request(monkeypatch):
    calls = []
    monkeypatch.setattr(rpc, "send_response", lambda target, response, group: calls.append((target, group, rpc.get_msg_seq())))
    rpc.set_msg_seq(90)
    id_sets._send_held(4, 1, 12, id_sets.SetAck())
    assert calls == [(4, 1, 12)] and rpc.get_msg_seq() == 90  # the handled request's number is restored


def test_a_sampled_pull_and_push_move_the_members_the_seed_draws_and_no_others(server):
    kv = server.kv_store
    members = torch.tensor([109, 100, 104, 102, 107, 101, 108, 103])
    id_sets.RegisterSetRequest("h1", 2, "halo", members).process_request(server)
    draw, share = 12345, 0.5
    picked = id_sets.sampled(draw, len(members), share)
    assert 0 < len(picked) < len(members)  # a share, not all or none, for this seed
    rows = id_sets.PullSetRequest("h1", 2, "halo", share=share, draw=draw).process_request(server).rows
    assert torch.equal(rows, kv.data_store["h1"][members[picked] - 100])
    other = id_sets.PullSetRequest("h1", 2, "halo", share=share, draw=999).process_request(server).rows
    assert not torch.equal(other, rows)  # the seed decides the members
    grad = torch.arange(len(picked) * 3, dtype=torch.float32).reshape(-1, 3) + 1
    id_sets.PushSetRequest("g1", 2, "halo", grad, share=share, draw=draw).process_request(server)
    expect = torch.zeros(10, 3, dtype=torch.float64)
    expect[members[picked] - 100] = grad.double()
    assert torch.equal(kv.data_store["g1"][:, 0], expect)  # the sampled members got their rows, no other row moved
    with pytest.raises(ValueError, match=f"has {len(members)} rows for {len(picked)} members"):
        id_sets.PushSetRequest("g1", 2, "halo", torch.ones(len(members), 3), share=share, draw=draw
                               ).process_request(server)
    every = id_sets.PullSetRequest("h1", 2, "halo", share=1.0, draw=draw).process_request(server).rows
    assert torch.equal(every, kv.data_store["h1"][members - 100])


def test_a_trainers_sample_is_what_each_owners_server_draws_again(server):
    halo = object.__new__(id_sets.HaloIdSet)  # the parts a registration gives: two owners' servers
    halo.parts = [(4, slice(0, 5)), (6, torch.tensor([5, 7, 9, 11, 13, 15, 17]))]
    halo.size, halo.rank, halo.key = 18, 1, "halo"
    members = {4: torch.tensor([100, 101, 102, 103, 104]), 6: torch.tensor([109, 108, 107, 106, 105, 104, 103])}
    sample = halo.sample(0.5, (7, 3, 1, 0xB5))
    again = halo.sample(0.5, (7, 3, 1, 0xB5))  # drawn from the words alone
    assert again.draws == sample.draws and torch.equal(again.positions, sample.positions)
    assert not torch.equal(halo.sample(0.5, (7, 4, 1, 0xB5)).positions, sample.positions)  # another step
    assert sample.draws[0] != sample.draws[1]  # each owner its own draw
    for (server_id, where), draw, chosen in zip(halo.parts, sample.draws, sample.where):
        positions = torch.arange(where.start, where.stop) if isinstance(where, slice) else where
        assert set(chosen.tolist()) <= set(positions.tolist())
        id_sets.RegisterSetRequest("h1", 1, "halo", members[server_id]).process_request(server)
        rows = id_sets.PullSetRequest("h1", 1, "halo", share=0.5, draw=draw).process_request(server).rows
        # the owner answers the rows of exactly the members the trainer placed them at
        index = {int(p): i for i, p in enumerate(positions)}
        expect = members[server_id][[index[int(p)] for p in chosen]] - 100
        assert torch.equal(rows, server.kv_store.data_store["h1"][expect])
    assert torch.equal(halo.sample(1.0, (7, 3, 1, 0xB5)).positions, torch.cat([torch.arange(5), halo.parts[1][1]]))
