"""Write notices: how a trainer is told that another machine wrote rows it may hold.

The stock-script switch keeps remote rows in memory (the static feature cache, the
agent's history). A write made on *another* machine must reach those copies before this
machine reads the rows again. DGL's pushes say nothing to third parties, so a trainer
whose write may leave a copy stale elsewhere (any write of static node data; a write of
rows another machine owns) posts a notice, ``(tensor name, row ids)``, to every server
(the first server of each machine, the one its trainers read) and waits for all of them
to take it. A server keeps its notices in order and counts
them in an 8-byte shared-memory word that the trainers of its machine read without a
round trip. Before it answers a pull from memory, a trainer compares that word with what
it has seen; only when it moved does it fetch the new notices from its machine's first
server (one round trip) and apply them.

So a row is never served older than a write whose ``push`` returned on any machine
before this machine's pull started: the writer's notice is taken by every server before
its push returns, which is what any barrier between the write and the read (DGL's or
torch's) orders. Notices are DGL RPC services (:func:`register_services`, run in every
process that imports DGL with the switch's variables set, servers included, however
they are started); the server side keeps them in the server process. Called by
:mod:`dgl_sni.sni.kvstore` only.
"""
from __future__ import annotations

import atexit
import os
from dataclasses import dataclass

import numpy as np
from dgl.distributed import rpc

from ..messages import FieldState

POST_NOTICE = 906201  # DGL's own services use 9012xx
FETCH_NOTICES = 906202
MAX_IDS = 1 << 22  # ids one notice carries; a larger write is posted as "every row" (ids None)

_BOARD = {"log": [], "path": None, "count": None}  # server side: this server's notices


def _board_counter() -> np.memmap:
    """The server's notice count in shared memory (created at its first request)."""
    if _BOARD["count"] is None:
        path = f"/dev/shm/dgl_sni_notices_{os.getpid()}"
        count = np.memmap(path, dtype=np.int64, mode="w+", shape=(1,))
        count[0] = 0
        _BOARD["path"], _BOARD["count"] = path, count
        atexit.register(_remove_counter, path)
    return _BOARD["count"]


def _remove_counter(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


@dataclass(eq=False)
class PostNoticeRequest(FieldState, rpc.Request):
    """A trainer wrote rows of ``name`` that other machines may hold (``ids`` None: all)."""

    name: str
    ids: object
    writer: int

    def process_request(self, server_state):
        log, count = _BOARD["log"], _board_counter()
        log.append((self.name, self.ids, self.writer))
        count[0] = len(log)
        return NoticeResponse(len(log), [], _BOARD["path"])


@dataclass(eq=False)
class FetchNoticesRequest(FieldState, rpc.Request):
    """The notices this server took after the first ``since``."""

    since: int

    def process_request(self, server_state):
        _board_counter()
        log = _BOARD["log"]
        return NoticeResponse(len(log), log[self.since:], _BOARD["path"])


@dataclass(eq=False)
class NoticeResponse(FieldState, rpc.Response):
    """How many notices the server holds, the ones asked for, and its counter's path."""

    count: int
    notices: list
    path: str


def register_services() -> None:
    """Register the notice services with DGL's RPC (idempotent; every process with the
    switch on: a server must know them before its loop starts)."""
    rpc.register_service(POST_NOTICE, PostNoticeRequest, NoticeResponse)
    rpc.register_service(FETCH_NOTICES, FetchNoticesRequest, NoticeResponse)


class NoticeBoard:
    """One trainer's side of the notices: :meth:`post` what it wrote, :meth:`news` what
    others wrote since it last looked. Owned by :class:`~dgl_sni.sni.kvstore.SNIKVClient`.

    ``machine_id``: this trainer's machine (its first server holds the notices it reads).
    """

    def __init__(self, machine_id: int):
        register_services()
        self.rank = rpc.get_rank()
        per_machine = rpc.get_num_server_per_machine()
        # the first server of every machine: the one that machine's trainers read
        self.homes = list(range(0, rpc.get_num_server(), per_machine))
        self.home = machine_id * per_machine
        self.seen = 0
        reply = self._fetch()  # the counter's path, and whatever was posted before this trainer started
        self._counter = np.memmap(reply.path, dtype=np.int64, mode="r", shape=(1,))
        self._pending = reply.notices
        self.seen = reply.count

    def _fetch(self) -> NoticeResponse:
        rpc.send_request(self.home, FetchNoticesRequest(self.seen))
        return rpc.recv_response()

    def post(self, name: str, ids: np.ndarray | None) -> None:
        """Tell every machine that this trainer wrote rows ``ids`` of ``name`` (None: all);
        returns once each machine's first server has taken the notice."""
        payload = None if ids is None or ids.size > MAX_IDS else np.asarray(ids, np.int64)
        for server in self.homes:
            rpc.send_request(server, PostNoticeRequest(name, payload, self.rank))
        for _ in self.homes:
            rpc.recv_response()

    def news(self) -> list:
        """``(name, ids or None)`` written by other trainers since the last call (no round
        trip when nothing was posted)."""
        notices, self._pending = self._pending, []
        if int(self._counter[0]) != self.seen:
            reply = self._fetch()
            notices += reply.notices
            self.seen = reply.count
        return [(name, ids) for name, ids, writer in notices if writer != self.rank]
