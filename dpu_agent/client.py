"""The trainer's handle on its agent.

All clients have one declared interface, :class:`AgentClient`: ``add_table``; ``observe``
and ``request`` return at once (the agent works while the trainer computes); ``result``
waits for a requested step's rows; ``drift`` and ``stats`` wait for their answer.
Operations on one agent execute in the order they were issued.

* :class:`InlineAgentClient` -- the agent as a thread of the trainer (the compiled
  predictor releases the GIL); no copies through shared memory.
* :class:`RemoteAgentClient` -- the agent as another process, over a transport's
  host endpoint: shared memory on this host (:func:`spawn_agent`), or DOCA on a DPU.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys
from abc import ABC, abstractmethod
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection

import numpy as np

from .shm import ShmHostEndpoint
from .tables import Agent
from .transport import AgentError, HostEndpoint


class AgentClient(ABC):
    """The trainer's handle on its agent (see module docstring); made by :func:`start_agent`,
    used by the trainer's SNI tables (``dgl_sni.sni``). Failures raise :class:`AgentError`."""

    @abstractmethod
    def add_table(self, table: int, num_rows: int, dim: int, sampled, kind: str, **params) -> None:
        """Create the agent's history table ``table`` (``kind`` from ``PREDICTOR_NAMES``); waits."""

    @abstractmethod
    def observe(self, table: int, step: float, rows: np.ndarray, row_ids: np.ndarray | None = None) -> None:
        """Hand over fresh rows (all rows, or ``row_ids``) synchronised at ``step``; returns at once."""

    @abstractmethod
    def request(self, table: int, step: float, preview: bool = False) -> None:
        """Ask for the rows served at ``step``; returns at once (see :meth:`result`)."""

    @abstractmethod
    def result(self, table: int, step: float, preview: bool = False) -> tuple:
        """``(rows, weight)`` served at ``step`` (requests them if not yet requested); waits."""

    @abstractmethod
    def drift(self, table: int, step: float) -> np.ndarray:
        """Predicted drift of every row at ``step`` (adaptive sync policy); waits."""

    @abstractmethod
    def stats(self) -> dict:
        """The agent's counters (``predictor_s``, ``tables``, ...); waits."""

    @abstractmethod
    def close(self) -> None:
        """Finish outstanding operations and stop the agent."""


class InlineAgentClient(AgentClient):
    """Agent running on a background thread of the trainer process: owns the
    :class:`~dpu_agent.tables.Agent` and its one-thread pool. Made by ``start_agent("inline")``."""

    def __init__(self):
        self.agent = Agent()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sni-agent")
        self._requests = {}

    def add_table(self, table, num_rows, dim, sampled, kind, **params):
        self._pool.submit(self.agent.add_table, table, num_rows, dim, np.array(sampled), kind,
                          **params).result()

    def observe(self, table, step, rows, row_ids=None):
        rows = np.array(rows, dtype=np.float32)  # the caller may reuse its buffer
        ids = None if row_ids is None else np.array(row_ids, dtype=np.int64)
        self._pool.submit(lambda: self.agent.table(table).observe(step, rows, ids))

    def request(self, table, step, preview=False):
        key = (table, step, preview)
        if key not in self._requests:
            self._requests[key] = self._pool.submit(
                lambda: tuple(a.copy() for a in self.agent.table(table).serve(step, preview)))

    def result(self, table, step, preview=False):
        self.request(table, step, preview)
        try:
            return self._requests.pop((table, step, preview)).result()
        except Exception as err:
            raise AgentError(str(err)) from err

    def drift(self, table, step):
        return self._pool.submit(lambda: self.agent.table(table).drift(step).copy()).result()

    def stats(self):
        return self._pool.submit(self.agent.stats).result()

    def close(self):
        self._pool.shutdown(wait=True)


class RemoteAgentClient(AgentClient):
    """Agent in another process or on a DPU, reached through a host endpoint: owns the
    endpoint, the agent process (when it started one) and the replies the agent owes.
    Made by :func:`spawn_agent` and :func:`connect_doca`."""

    def __init__(self, endpoint: HostEndpoint, process: subprocess.Popen | None = None):
        self.endpoint, self.process = endpoint, process
        self._expected = deque()  # replies the agent owes, in order
        self._unacked = {}  # table -> observes whose rows the agent has not read yet
        self._results = {}  # (table, step, preview) -> (rows, weight) copied at arrival
        self._closed = False

    # -------------------------------------------------------------- replies
    def _send(self, msg, expect):
        try:
            self.endpoint.send(msg)
        except (BrokenPipeError, ConnectionError, OSError) as err:
            raise AgentError(self._gone(err)) from err
        self._expected.append(expect)

    def _gone(self, err) -> str:
        code = self.process.poll() if self.process is not None else None
        gone = f"the agent went away ({err})"
        return f"{gone}; exit code {code}" if code is not None else gone

    def _drain_one(self):
        try:
            reply = self.endpoint.recv()
        except (EOFError, OSError) as err:
            raise AgentError(self._gone(err)) from err
        expect = self._expected.popleft()
        if reply.get("error"):
            raise AgentError(f"agent failed {expect[0]} on table {expect[1]}: {reply['error']}")
        if expect[0] == "observe":
            self._unacked[expect[1]] -= 1
        elif expect[0] == "serve":
            # one serve per table is outstanding at a time, so the region holds this one's rows
            table = expect[1]
            self._results[expect[1:]] = (self.endpoint.region(table, "served").copy(),
                                         self.endpoint.region(table, "weight").copy())
        return expect, reply

    def _wait_for(self, key):
        while True:
            expect, reply = self._drain_one()
            if expect == key:
                return reply

    # -------------------------------------------------------------- operations
    def add_table(self, table, num_rows, dim, sampled, kind, **params):
        regions = self.endpoint.new_table(table, num_rows, dim)
        self._unacked[table] = 0
        self._send(dict(op="add_table", table=table, num_rows=num_rows, dim=dim, regions=regions,
                        sampled=np.asarray(sampled, dtype=bool), kind=kind, params=params),
                   ("add_table", table, None, None))
        self._wait_for(("add_table", table, None, None))

    def observe(self, table, step, rows, row_ids=None):
        while self._unacked[table]:  # the agent still reads the previous rows
            self._drain_one()
        count = rows.shape[0]
        self.endpoint.region(table, "fresh")[:count] = rows
        if row_ids is not None:
            self.endpoint.region(table, "ids")[:count] = row_ids
        self._unacked[table] += 1
        self._send(dict(op="observe", table=table, step=step, count=count,
                        partial=row_ids is not None), ("observe", table, step, None))

    def request(self, table, step, preview=False):
        key = ("serve", table, step, preview)
        if key in self._expected or key[1:] in self._results:
            return
        while any(e[0] == "serve" and e[1] == table for e in self._expected):
            self._drain_one()
        self._send(dict(op="serve", table=table, step=step, preview=preview), key)

    def result(self, table, step, preview=False):
        self.request(table, step, preview)
        while (table, step, preview) not in self._results:
            self._drain_one()
        return self._results.pop((table, step, preview))

    def drift(self, table, step):
        self._send(dict(op="drift", table=table, step=step), ("drift", table, step, None))
        self._wait_for(("drift", table, step, None))
        return self.endpoint.region(table, "drift").copy()

    def stats(self):
        self._send(dict(op="stats"), ("stats", None, None, None))
        return self._wait_for(("stats", None, None, None))["stats"]

    def close(self):
        if self._closed:
            return
        self._closed = True
        try:
            while self._expected:
                self._drain_one()
            self.endpoint.send(dict(op="close"))
        except (AgentError, OSError):
            pass
        if self.process is not None:
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.endpoint.close()


def spawn_agent() -> RemoteAgentClient:
    """Start ``python -m dpu_agent.agent`` beside this trainer (host emulation)."""
    parent, child = socket.socketpair()
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen([sys.executable, "-m", "dpu_agent.agent", "--fd", str(child.fileno())],
                            pass_fds=[child.fileno()], env=env)
    child.close()
    conn = Connection(parent.detach())
    return RemoteAgentClient(ShmHostEndpoint(conn), proc)


def connect_doca(pci: str, name: str, spawn: bool = False) -> RemoteAgentClient:
    """Reach the agent over DOCA (Comch + DMA) at device ``pci``, Comch service ``name``.

    On a BlueField the agent runs on the DPU (``sni-agent --doca --pci ... --name ...``)
    and this connects to it. ``spawn`` starts that agent process here instead (host
    emulation of the DPU path, as the tests do with the simulated SDK).
    """
    from .doca import DocaHostEndpoint
    proc = None
    if spawn:
        env = dict(os.environ)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        proc = subprocess.Popen([sys.executable, "-m", "dpu_agent.agent", "--doca", "--pci", pci,
                                 "--name", name], env=env)
    try:
        return RemoteAgentClient(DocaHostEndpoint(pci, name), proc)
    except BaseException:
        if proc is not None:
            proc.kill()
            proc.wait()
        raise


def start_agent(mode: str, doca_pci: str | None = None, doca_name: str | None = None) -> AgentClient:
    """``inline`` (thread), ``process`` (child process over shared memory), ``doca`` (the
    agent on the DPU) or ``doca-local`` (a DOCA agent process started here)."""
    if mode == "inline":
        return InlineAgentClient()
    if mode == "process":
        return spawn_agent()
    if mode in ("doca", "doca-local"):
        if not doca_pci:
            raise ValueError("agent mode 'doca' needs the device's PCI address (--doca-pci)")
        name = doca_name or f"sni-agent-{os.environ.get('RANK', '0')}-{os.getpid()}"
        return connect_doca(doca_pci, name, spawn=mode == "doca-local")
    raise ValueError(f"unknown agent mode '{mode}': use inline, process, doca or doca-local")
