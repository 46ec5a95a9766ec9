"""A KVClient pull split in two: send the requests now, receive the rows later.

DGL 2.1's ``KVClient.pull`` sends one request per owning machine and then blocks until
every answer is in. The rows travel through DGL's communicator threads, so nothing stops
a trainer from computing while they are on the wire, except that ``pull`` waits.
:func:`send_pull` sends the requests of a pull and returns a :class:`PendingPull`;
:meth:`PendingPull.wait` receives its answers (matched by message sequence number, so
several pulls may be in flight at once and complete in any order).

Precondition (the caller's to keep): while a pull is pending, no other code of this
process receives DGL RPC messages (a blocking ``DistTensor`` read would take the pending
answers for its own): wait for every pending pull first. A message that belongs to no
pending pull raises.

Changes nothing in DGL (so it is not a patch): it sends and receives messages through
DGL 2.1's RPC layer (``rpc.send_request_to_machine``, ``rpc.recv_rpc_message``,
``kvstore.PullRequest``) and reads the KVClient's partition policies, shards and pull
handlers. Used by :class:`~dgl_sni.halo.exchange.KVHaloExchange` for pipelined steps.
"""
from __future__ import annotations

import torch

import dgl_sni  # noqa: F401  (DGL shims first)
from dgl.distributed import rpc
from dgl.distributed.kvstore import PullRequest, PullResponse

_arrived: dict = {}  # msg_seq -> PullResponse received while waiting for another pull
_pending: dict = {}  # msg_seq -> the PendingPull it belongs to


class PendingPull:
    """The rows of one pull, requested and on their way (see :func:`send_pull`)."""

    def __init__(self, rows: torch.Tensor, parts: list):
        self._rows = rows  # the answer being assembled, in the order of the requested ids
        self._parts = parts  # (msg_seq, positions) per remote request

    def wait(self) -> torch.Tensor:
        """Receive this pull's answers (blocking) and return its rows."""
        while self._parts:
            seq, pos = self._parts[0]
            response = _arrived.pop(seq, None)
            if response is None:
                _receive_one()
                continue
            self._rows[pos] = response.data_tensor.to(self._rows.dtype)
            self._parts.pop(0)
        return self._rows


def _receive_one() -> None:
    msg = rpc.recv_rpc_message(0)
    if msg is None or msg.msg_seq not in _pending:
        seq = None if msg is None else msg.msg_seq
        raise RuntimeError(f"a DGL message (sequence {seq}) arrived that belongs to no pending pull: "
                           "something else received from DGL while pulls were in flight")
    _pending.pop(msg.msg_seq)
    _arrived[msg.msg_seq] = rpc.deserialize_from_payload(PullResponse, msg.data, msg.tensors)


def send_pull(client, name: str, ids: torch.Tensor) -> PendingPull:
    """Send the requests of ``client.pull(name, ids)``; rows owned by this machine are read
    from its shard now, with the tensor's pull handler (as DGL does)."""
    ids = ids.to(torch.int64)
    policy = client._part_policy[name]  # DGL 2.1 KVClient internals
    shard = client._data_store[name]
    rows = torch.empty((ids.numel(),) + tuple(shard.shape[1:]), dtype=shard.dtype)
    if ids.numel() == 0:
        return PendingPull(rows, [])
    machine = policy.to_partid(ids).to(torch.int64)
    order = torch.sort(machine, stable=True).indices
    machines, counts = torch.unique_consecutive(machine[order], return_counts=True)
    parts, lo = [], 0
    handler = client._pull_handlers[name]
    for m, n in zip(machines.tolist(), counts.tolist()):
        pos, lo = order[lo: lo + n], lo + n
        part_ids = ids[pos]
        if m == client.machine_id:
            rows[pos] = handler(client._data_store, name, policy.to_local(part_ids))
            continue
        rpc.send_request_to_machine(m, PullRequest(name, part_ids))
        parts.append((rpc.get_msg_seq() - 1, pos))  # the request took the number before it
    pull = PendingPull(rows, parts)
    for seq, _ in parts:
        _pending[seq] = pull
    return pull

