"""Registered halo id sets: pull and push a trainer's halo rows without sending their ids.

A trainer pulls the same halo rows, and pushes gradients to the same rows, at every exact
step. DGL's ``KVClient.pull``/``push`` send the 8-byte id of every row each time: at a
hidden width of 16 that is 11% of a float32 row's bytes on the wire, and 25% of an 8-bit
row's. :class:`HaloIdSet` sends each owner the ids of its rows once
(:class:`RegisterSetRequest`; the server keeps their shard offsets); afterwards a pull
(:class:`PullSetRequest`) or push (:class:`PushSetRequest`) names the set, and the
owner's server reads or updates those rows with the tensor's own pull or push handler
(so tier-backed and quantized tensors behave as with DGL's requests).

Each trainer talks to one fixed server per owning machine (every server of a machine sees
the same shared-memory shards, but a set lives in the server that registered it). A server
handles one client's requests in the order sent, so a :class:`FlushSetRequest` answered by
every owner orders this trainer's pushes before anything the trainer does next.

A pull is split in two: :meth:`HaloIdSet.send_pull` sends its requests and returns a
:class:`PendingPull`, whose :meth:`~PendingPull.wait` receives the answers (matched by
message sequence number, so several pulls may be in flight and complete in any order).
Pipelined steps leave a pull on the wire while the trainer computes; other pulls wait at
once. Precondition (the caller's to keep): while a pull is pending, no other code
of this process receives DGL RPC messages (a blocking ``DistTensor`` read, a flush, an
await of pushes); a message that belongs to no pending pull raises.

A pull names the publish it reads (:class:`PullSetRequest`'s ``after``: the puller's own
count of announced writes to that tensor, the same on every trainer, which runs the same
passes). After writing its owned rows into its machine's shard, a trainer announces it
to its machine's servers (:class:`PublishedRequest`); a server holds a pull until every
trainer writing its shard has announced that many writes, and answers it from the
announcement. Likewise a trainer reading the gradients the others pushed to its rows asks
its machine's servers (:class:`AwaitPushesRequest`), which answer once every registered
set has pushed that many times. Neither needs the trainers to meet (a barrier: every
trainer waits for the slowest, one collective per layer and direction); a pull waits
only for the rows it reads.

A step that samples its halo rows (boundary node sampling, ``--halo-sample``) pulls and
pushes a random share of each set through the same requests: the request carries the
share and a seed (``draw``, one per owner), and the owner's server draws the same members
the trainer drew (:func:`sampled`), so no ids travel and no one meets either.

These are DGL RPC services (:func:`register_services`: every process of a job, servers
before their loop starts). Used by :class:`~dgl_sni.halo.exchange.KVHaloExchange`.
"""
from __future__ import annotations

import zlib
from dataclasses import dataclass

import numpy as np
import torch

import dgl_sni  # noqa: F401  (DGL shims first)
from dgl.distributed import rpc
from dgl.distributed.kvstore import default_pull_handler

from ..messages import FieldState
from .bit_choice import ADAPTIVE, choose_bits, encode_mixed
from .quantize import row_seed

REGISTER_SET = 906211  # DGL's own services use 9012xx, the write notices 90620x
PULL_SET = 906212
PUSH_SET = 906213
FLUSH_SET = 906214
PUBLISHED = 906215
AWAIT_PUSHES = 906216

_SETS: dict = {}  # server side: (trainer rank, key) -> (partition policy, shard offsets of the rows, weights)
_arrived: dict = {}  # trainer side: msg_seq -> SetRowsResponse received while waiting for another pull
_pending: dict = {}  # trainer side: msg_seq -> the PendingPull it belongs to
_announced: dict = {}  # trainer side: tensor name -> writes this trainer announced
_rounds: dict = {}  # trainer side: tensor name -> push rounds this trainer took part in
_published: dict = {}  # server side: tensor name -> {writer rank: writes announced}
_writers: dict = {}  # server side: tensor name -> trainers writing this machine's shard
_pushes: dict = {}  # server side: tensor name -> set pushes applied
_held: dict = {}  # server side: tensor name -> [(ready(), client rank, group, msg_seq, answer())]


def sampled(draw: int, count: int, share: float) -> np.ndarray:
    """The positions (sorted) of the members of a set of ``count`` that a sampled request with
    seed ``draw`` moves: each with probability ``share``, drawn from ``draw`` alone, so the
    trainer and the owner's server draw the same ones."""
    return np.flatnonzero(np.random.default_rng(draw).random(count) < share)


def _offsets(kv, name: str, rank: int, key: str) -> torch.Tensor:
    """The shard offsets of a registered set, for a tensor sharded as the set was registered."""
    entry = _SETS.get((rank, key))
    if entry is None:
        raise RuntimeError(f"no halo id set {key!r} is registered for trainer {rank} on this server")
    policy, offsets, _ = entry
    if kv.part_policy[name].policy_str != policy:
        raise RuntimeError(f"halo id set {key!r} was registered for {policy!r}; tensor {name!r} is sharded "
                           f"by {kv.part_policy[name].policy_str!r}")
    return offsets


@dataclass(eq=False)
class RegisterSetRequest(FieldState, rpc.Request):
    """Trainer ``rank`` will name the rows ``ids`` (global ids, owned by this machine) of
    tensors sharded like ``name`` by ``key``; ``weights``: how much each member weighs in the
    trainer's aggregations (the variance weights of a per-row bit choice; ``None``: alike)."""

    name: str
    rank: int
    key: str
    ids: torch.Tensor
    weights: torch.Tensor | None = None

    def process_request(self, server_state):
        policy = server_state.kv_store.part_policy[self.name]
        if self.weights is not None and self.weights.shape != self.ids.shape:
            raise ValueError(f"halo id set {self.key!r}: {self.weights.numel()} weights for {self.ids.numel()} members")
        _SETS[(self.rank, self.key)] = (policy.policy_str, policy.to_local(self.ids), self.weights)
        return SetAck()


@dataclass(eq=False)
class PullSetRequest(FieldState, rpc.Request):
    """The rows of tensor ``name`` in trainer ``rank``'s set ``key``, in registered order,
    once the trainers writing this machine's shard announced ``after`` writes of it
    (:class:`PublishedRequest`; 0: at once). ``group``: the trainer's client group (a
    held pull is answered from another request). ``share`` below 1: only the members
    :func:`sampled` draws from ``draw``. ``code`` :data:`~dgl_sni.halo.bit_choice.ADAPTIVE`:
    the server encodes the (float32) rows at a width per row it chooses, one block
    (:mod:`dgl_sni.halo.bit_choice`); 0: the rows as stored."""

    name: str
    rank: int
    key: str
    after: int = 0
    group: int = 0
    share: float = 1.0
    draw: int = 0
    code: int = 0

    def process_request(self, server_state):
        kv = server_state.kv_store
        offsets = _sampled_offsets(kv, self)  # an unknown set fails now, not when answered

        def answer():
            handler = kv.pull_handlers[self.name]
            if handler is default_pull_handler:  # DGL's ``data[offsets]``: the same rows, gathered faster
                rows = gather_rows(kv.data_store[self.name], offsets)
            else:
                rows = handler(kv.data_store, self.name, offsets)
            if self.code:
                rows = _encoded(rows, self)
            return SetRowsResponse(rows)
        return _answer_or_hold(self.name, lambda: _announced_writes(self.name) >= self.after,
                               self.rank, self.group, answer)


def _encoded(rows: torch.Tensor, request: PullSetRequest) -> torch.Tensor:
    """A pull's rows as the block of widths chosen per row (:mod:`dgl_sni.halo.bit_choice`),
    rounded with uniforms drawn from the set, the tensor and the publish the pull reads."""
    if request.code != ADAPTIVE:
        raise ValueError(f"a set pull's code must be 0 or {ADAPTIVE} (chosen widths), got {request.code}")
    if request.share < 1.0:
        raise ValueError("a sampled pull moves float32 rows: widths are chosen for every member")
    weights = _SETS[(request.rank, request.key)][2]
    seed = row_seed(zlib.crc32(request.name.encode()), request.after, 0, request.rank, 2)
    return encode_mixed(rows, choose_bits(rows, weights), torch.Generator().manual_seed(seed))


def _sampled_offsets(kv, request) -> torch.Tensor:
    """The shard offsets a pull or push of a registered set moves: every member's, or the
    ones its share and draw sample."""
    offsets = _offsets(kv, request.name, request.rank, request.key)
    if request.share >= 1.0:
        return offsets
    return offsets[torch.from_numpy(sampled(request.draw, offsets.numel(), request.share))]


def gather_rows(data: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """``data[offsets]`` (``offsets``: 1-d int64, as ``to_local`` gives them) as one
    ``index_select``, which copies whole rows. Torch's advanced indexing, which DGL's default
    pull handler uses, moves one element at a time. 300k rows out of 125k on one thread:
    16 float32 values 12-71 ms against 3.5-5 ms; 24-byte rows of 8-bit values 15-53 ms
    against 1.4-3.5 ms."""
    return torch.index_select(data, 0, offsets)


@dataclass(eq=False)
class PushSetRequest(FieldState, rpc.Request):
    """Apply ``data`` (one row per member, in registered order; with ``share`` below 1 one per
    member :func:`sampled` draws from ``draw``) to tensor ``name`` with its push handler; no
    answer (as DGL's pushes). Every trainer sends one per owner and round, empty ones too:
    they count the round (:class:`AwaitPushesRequest`)."""

    name: str
    rank: int
    key: str
    data: torch.Tensor
    share: float = 1.0
    draw: int = 0

    def process_request(self, server_state):
        kv = server_state.kv_store
        offsets = _sampled_offsets(kv, self)
        if self.data.dim() == 2 and offsets.numel() != self.data.shape[0]:  # (a 1-d block names its own rows)
            raise ValueError(f"a push to halo id set {self.key!r} of trainer {self.rank} has {self.data.shape[0]} "
                             f"rows for {offsets.numel()} members")
        kv.push_handlers[self.name](kv.data_store, self.name, offsets, self.data)
        _pushes[self.name] = _pushes.get(self.name, 0) + 1
        _release(self.name)


@dataclass(eq=False)
class FlushSetRequest(FieldState, rpc.Request):
    """Answered once everything this trainer sent to the server before it is applied."""

    def process_request(self, server_state):
        return SetAck()


@dataclass(eq=False)
class PublishedRequest(FieldState, rpc.Request):
    """Trainer ``rank`` wrote its rows of tensor ``name`` into this machine's shard for the
    ``count``-th time; ``writers`` trainers write that shard. Answers the pulls held for
    it (no answer to the trainer)."""

    name: str
    rank: int
    count: int
    writers: int

    def process_request(self, server_state):
        _published.setdefault(self.name, {})[self.rank] = self.count
        _writers[self.name] = self.writers
        _release(self.name)


@dataclass(eq=False)
class AwaitPushesRequest(FieldState, rpc.Request):
    """Answered once every set of ``key`` registered here has pushed to tensor ``name``
    ``rounds`` times (:class:`PushSetRequest`): the gradients the others sent for the
    asking trainer's rows are all applied."""

    name: str
    key: str
    rounds: int
    rank: int
    group: int = 0

    def process_request(self, server_state):
        key = self.key

        def done():
            pushers = sum(1 for _, k in _SETS if k == key)
            return _pushes.get(self.name, 0) >= self.rounds * pushers
        return _answer_or_hold(self.name, done, self.rank, self.group, SetAck)


def _announced_writes(name: str) -> int:
    """How many writes of ``name`` every trainer writing this shard has announced."""
    counts = _published.get(name, {})
    return min(counts.values()) if counts and len(counts) >= _writers.get(name, 1) else 0


def _answer_or_hold(name: str, ready, rank: int, group: int, answer):
    """The answer now where ``ready()``, else ``None`` (DGL sends nothing) with the request
    held until a later request of ``name`` makes it ready (:func:`_release`)."""
    if ready():
        return answer()
    _held.setdefault(name, []).append((ready, rank, group, rpc.get_msg_seq(), answer))
    return None


def _release(name: str) -> None:
    """Answer the held requests of ``name`` that are ready now, in the order they came."""
    waiting = _held.get(name)
    if not waiting:
        return
    keep = []
    for entry in waiting:
        ready, rank, group, seq, answer = entry
        if ready():
            _send_held(rank, group, seq, answer())
        else:
            keep.append(entry)
    _held[name] = keep


def _send_held(rank: int, group: int, seq: int, response) -> None:
    """Send a held request's answer: DGL numbers an answer with the sequence number of the
    request being handled, so the held request's number is put back for the send."""
    current = rpc.get_msg_seq()
    rpc.set_msg_seq(seq)
    try:
        rpc.send_response(rank, response, group)
    finally:
        rpc.set_msg_seq(current)


@dataclass(eq=False)
class SetAck(FieldState, rpc.Response):
    """An empty answer: the request (and every earlier one from the trainer) was handled."""


@dataclass(eq=False)
class SetRowsResponse(FieldState, rpc.Response):
    """The rows of a :class:`PullSetRequest`."""

    rows: torch.Tensor


def register_services() -> None:
    """Register the id-set services with DGL's RPC (idempotent; every process of a job,
    servers before ``dgl.distributed.initialize``)."""
    rpc.register_service(REGISTER_SET, RegisterSetRequest, SetAck)
    rpc.register_service(PULL_SET, PullSetRequest, SetRowsResponse)
    rpc.register_service(PUSH_SET, PushSetRequest, None)
    rpc.register_service(FLUSH_SET, FlushSetRequest, SetAck)
    rpc.register_service(PUBLISHED, PublishedRequest, None)
    rpc.register_service(AWAIT_PUSHES, AwaitPushesRequest, SetAck)


class HaloIdSet:
    """One trainer's halo rows, registered with their owners (collective-free: each trainer
    registers its own). :meth:`pull` and :meth:`push` move every member row of a tensor
    sharded like ``name`` (by ``policy``, the trainer's side of it); :meth:`flush` waits
    until the owners applied the pushes. :meth:`announce` tells this machine's servers the
    trainer wrote its rows of a tensor (the pulls after it read them);
    :meth:`end_round` waits until every set pushed to a tensor once more.

    ``ids``: global ids of the members, in the order rows are returned and pushed; ``key``
    names the set (registering the same key again replaces it); ``weights``: the members'
    weights in this trainer's aggregations, for owners that choose a width per row.
    """

    def __init__(self, name: str, policy, ids: torch.Tensor, key: str = "halo",
                 weights: torch.Tensor | None = None):
        register_services()
        self.rank, self.key = rpc.get_rank(), key
        self.size = int(ids.numel())
        per_machine = rpc.get_num_server_per_machine()
        here = rpc.get_machine_id()  # its servers hold this trainer's shard
        self.local_servers = [here * per_machine + i for i in range(per_machine)]
        self.writers = max(1, rpc.get_num_client() // max(1, rpc.get_num_machines()))  # trainers per machine
        owners = policy.to_partid(ids) if self.size else torch.empty(0, dtype=torch.int64)
        self.parts = []  # (server, positions: a slice where the owner's rows are contiguous, else a tensor)
        for machine in torch.unique(owners).tolist():
            pos = torch.nonzero(owners == machine).flatten()
            lo, hi = int(pos[0]), int(pos[-1]) + 1
            where = slice(lo, hi) if hi - lo == pos.numel() else pos
            server = machine * per_machine + self.rank % per_machine
            self.parts.append((server, where))
            rpc.send_request(server, RegisterSetRequest(name, self.rank, key, ids[pos],
                                                        None if weights is None else weights[pos]))
        self._answers(len(self.parts))

    @staticmethod
    def _answers(count: int) -> None:
        """Receive ``count`` acknowledgements (nothing else may be in flight)."""
        for _ in range(count):
            rpc.recv_response()

    def sample(self, share: float, words) -> SetSample:
        """A random share of the members, each with probability ``share``: per owner, the ones
        :func:`sampled` draws from a seed of ``words`` (integers) and the owner's server, which
        its server draws again from the seed the requests carry."""
        draws, where = [], []
        for server, positions in self.parts:
            draw = int(np.random.SeedSequence([*map(int, words), server]).generate_state(1, np.uint64)[0])
            if isinstance(positions, slice):
                positions = torch.arange(positions.start, positions.stop)
            count = positions.numel()
            draws.append(draw)
            where.append(positions[torch.from_numpy(sampled(draw, count, share))])
        return SetSample(share, draws, where)

    def send_pull(self, name: str, template: torch.Tensor, sample: SetSample | None = None, code: int = 0,
                  decode=None) -> PendingPull:
        """Send the pull of every member row of tensor ``name`` (rows shaped and typed like
        ``template``'s; ``sample``: only its members, the others' rows zero; ``code``: how the
        owners encode the rows, ``decode(block, count)`` the rows of an owner's answer); the
        rows arrive at :meth:`PendingPull.wait`."""
        shape = (self.size,) + tuple(template.shape[1:])
        rows = torch.empty(shape, dtype=template.dtype) if sample is None else torch.zeros(shape, dtype=template.dtype)
        parts = []
        after, group = _announced.get(name, 0), rpc.get_group_id()
        for i, (server, where) in enumerate(self.parts):
            share, draw = (1.0, 0) if sample is None else (sample.share, sample.draws[i])
            if sample is not None:
                where = sample.where[i]
            rpc.send_request(server, PullSetRequest(name, self.rank, self.key, after, group, share, draw, code))
            parts.append((rpc.get_msg_seq() - 1, where))  # the request took the number before it
        pull = PendingPull(rows, parts, decode)
        for seq, _ in parts:
            _pending[seq] = pull
        return pull

    def push(self, name: str, data: torch.Tensor, sample: SetSample | None = None, encode=None) -> int:
        """Send one row of ``data`` per member (``sample``: per member it holds; ``data`` still
        has a row for every member) to its owner's push handler (not flushed); ``encode``:
        each owner's rows as the block sent. Returns the payload bytes sent."""
        if data.shape[0] != self.size:
            raise ValueError(f"a push to halo id set {self.key!r} needs {self.size} rows, got {data.shape[0]}")
        sent = 0
        for i, (server, where) in enumerate(self.parts):
            share, draw = (1.0, 0) if sample is None else (sample.share, sample.draws[i])
            rows = data[where].contiguous() if sample is None else data.index_select(0, sample.where[i])
            if encode is not None:
                rows = encode(rows)
            sent += rows.numel() * rows.element_size()
            rpc.send_request(server, PushSetRequest(name, self.rank, self.key, rows, share, draw))
        return sent

    def flush(self) -> None:
        """Return once every owner has handled everything this trainer sent it."""
        for server, _ in self.parts:
            rpc.send_request(server, FlushSetRequest())
        self._answers(len(self.parts))

    def announce(self, name: str) -> None:
        """This trainer wrote its rows of tensor ``name`` into its machine's shard: pulls of
        them sent after this write's count may be answered (by every trainer, which runs
        the same passes and so announces the same writes)."""
        count = _announced[name] = _announced.get(name, 0) + 1
        for server in self.local_servers:
            rpc.send_request(server, PublishedRequest(name, self.rank, count, self.writers))

    def end_round(self, name: str, wait: bool = True) -> None:
        """A round of pushes to tensor ``name`` ended (every trainer says so at every round,
        an empty set too); with ``wait``, return once every set registered with this
        machine's servers pushed to ``name`` that many times: the gradients for this
        trainer's rows are all applied."""
        rounds = _rounds[name] = _rounds.get(name, 0) + 1
        if not wait:
            return
        group = rpc.get_group_id()
        for server in self.local_servers:
            rpc.send_request(server, AwaitPushesRequest(name, self.key, rounds, self.rank, group))
        self._answers(len(self.local_servers))


@dataclass(frozen=True)
class SetSample:
    """The members of a :class:`HaloIdSet` one sampled step moves (:meth:`HaloIdSet.sample`):
    per owner, the seed its requests carry and the members' positions (sorted)."""

    share: float
    draws: list
    where: list

    @property
    def count(self) -> int:
        """How many members are sampled."""
        return sum(int(w.numel()) for w in self.where)

    @property
    def positions(self) -> torch.Tensor:
        """Every sampled member's position."""
        return torch.cat(self.where) if self.where else torch.empty(0, dtype=torch.int64)


class PendingPull:
    """The rows of one set pull, requested and on their way (see :meth:`HaloIdSet.send_pull`)."""

    def __init__(self, rows: torch.Tensor, parts: list, decode=None):
        self._rows = rows  # the answer being assembled, in member order
        self._parts = parts  # (msg_seq, positions) per owner
        self._decode = decode  # decode(block, count): an owner's encoded answer as its rows
        self.nbytes = 0  # payload bytes received so far

    def wait(self) -> torch.Tensor:
        """Receive this pull's answers (blocking) and return its rows."""
        while self._parts:
            seq, where = self._parts[0]
            response = _arrived.pop(seq, None)
            if response is None:
                _receive_one()
                continue
            got = response.rows
            self.nbytes += got.numel() * got.element_size()
            if self._decode is not None:
                count = where.stop - where.start if isinstance(where, slice) else int(where.numel())
                got = self._decode(got, count)
            self._rows[where] = got
            self._parts.pop(0)
        return self._rows


def _receive_one() -> None:
    msg = rpc.recv_rpc_message(0)
    if msg is None or msg.msg_seq not in _pending:
        seq = None if msg is None else msg.msg_seq
        raise RuntimeError(f"a DGL message (sequence {seq}) arrived that belongs to no pending pull: "
                           "something else received from DGL while pulls were in flight")
    _pending.pop(msg.msg_seq)
    _arrived[msg.msg_seq] = rpc.deserialize_from_payload(SetRowsResponse, msg.data, msg.tensors)
