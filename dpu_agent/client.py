"""The trainer's handle on its agent.

All clients have one declared interface, :class:`AgentClient`: ``add_table``; ``observe``
and ``request`` return at once (the agent works while the trainer computes); ``result``
waits for a requested step's rows; ``drift`` and ``stats`` wait for their answer.
Operations on one agent execute in the order they were issued.

* :class:`InlineAgentClient` -- the agent as a thread of the trainer (the compiled
  predictor releases the GIL); no copies through shared memory.
* :class:`RemoteAgentClient` -- the agent as another process, over a transport's
  host endpoint: the ``sni-agent`` binary on this host over a Unix socket and shared memory
  (:func:`spawn_agent`), or an agent on a DPU over DOCA.
"""
from __future__ import annotations

import os
import secrets
import shlex
import shutil
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .binary import agent_command
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

    # health (a plain client is alive until it fails; see dpu_agent.supervisor.SupervisedAgent)
    generation = 0  # agents this client has had (a new one needs its tables re-created)

    @property
    def alive(self) -> bool:
        """False while the agent is known to be gone."""
        return True

    def revive(self) -> bool:
        """Start or reconnect a lost agent; True when a new generation is up."""
        return False

    def abort(self) -> None:
        """Stop at once without waiting for outstanding work (the agent is lost)."""
        self.close()


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
            self._requests[key] = self._pool.submit(lambda: self.agent.table(table).serve(step, preview))

    def result(self, table, step, preview=False):
        self.request(table, step, preview)
        try:
            return self._requests.pop((table, step, preview)).result()
        except Exception as err:
            raise AgentError(str(err)) from err

    def drift(self, table, step):
        return self._pool.submit(lambda: self.agent.table(table).drift(step)).result()

    def stats(self):
        return self._pool.submit(self.agent.stats).result()

    def close(self):
        self._pool.shutdown(wait=True)


class RemoteAgentClient(AgentClient):
    """Agent in another process or on a DPU, reached through a host endpoint: owns the
    endpoint, the agent process (when it started one) and the replies the agent owes.
    Made by :func:`spawn_agent` and :func:`connect_doca`."""

    def __init__(self, endpoint: HostEndpoint, process: subprocess.Popen | None = None,
                 workdir: str | None = None, timeout: float | None = None):
        self.endpoint, self.process, self.workdir = endpoint, process, workdir
        self.timeout = timeout  # seconds a reply may take (None: wait for ever)
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
            reply = self.endpoint.recv() if self.timeout is None else self.endpoint.recv(self.timeout)
        except TimeoutError as err:
            raise AgentError(f"the agent did not answer within {self.timeout} s") from err
        except (EOFError, OSError, ValueError) as err:  # ValueError: ProtocolError
            raise AgentError(self._gone(err)) from err
        expect = self._expected.popleft()
        if reply.get("error"):
            raise AgentError(f"agent failed {expect[0]} on table {expect[1]}: {reply['error']}")
        if expect[0] == "observe":
            self._unacked[expect[1]] -= 1
        elif expect[0] == "serve":
            # one serve per table is outstanding at a time, so the region holds this one's rows;
            # copied: views would dangle once the endpoint unmaps the segments (NumPy's view of
            # a SharedMemory buffer does not keep the mapping alive)
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
        unknown = set(params) - {"window", "beta", "lam"}
        if unknown:
            raise ValueError(f"unknown table parameter(s) {sorted(unknown)}: use window, beta, lam")
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
        try:
            if self.process is not None:
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        finally:
            self._release()


    def abort(self):
        """Kill an agent process this client started, drop the connection."""
        self._closed = True
        try:
            if self.process is not None and self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        finally:
            self._release()

    def _release(self):
        """Close the endpoint and remove the folder of the agent's socket and token."""
        self.endpoint.close()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def write_token(path: str) -> bytes:
    """Create ``path`` (mode 0600, never over an existing file: ``FileExistsError``) holding a
    new random 32-byte token in hex, which an agent started with ``--token-file path`` checks
    at connect; returns the token."""
    token = secrets.token_bytes(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token.hex())
    return token


def spawn_agent(command: list | None = None, start_timeout: float = 30.0,
                timeout: float | None = None) -> RemoteAgentClient:
    """Start the ``sni-agent`` binary beside this trainer (host emulation) and connect to it.

    The agent listens on a socket in a fresh 0700 directory and accepts only a peer that
    presents the random token written there (0600). ``command`` runs the agent another way
    (default :func:`dpu_agent.binary.agent_command`: ``$SNI_AGENT_COMMAND`` or the installed
    binary; e.g. ``["qemu-aarch64", "sni-agent-aarch64"]``). ``timeout``: see
    :class:`RemoteAgentClient`.
    """
    command = list(command or agent_command())
    workdir = tempfile.mkdtemp(prefix="sni-agent-")  # mode 0700
    try:
        token_file = os.path.join(workdir, "token")
        token = write_token(token_file)
        path = os.path.join(workdir, "agent.sock")
        proc = subprocess.Popen([*command, "--socket", path, "--token-file", token_file, "--once"],
                                stdin=subprocess.DEVNULL)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    try:
        endpoint = _connect(path, token, proc, start_timeout, command)
    except BaseException:
        proc.kill()
        proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return RemoteAgentClient(endpoint, proc, workdir, timeout)


def _connect(path, token, proc, start_timeout, command) -> ShmHostEndpoint:
    """Connect to a starting agent's socket, retrying until it listens."""
    deadline = time.monotonic() + start_timeout
    while True:
        if proc.poll() is not None:
            raise AgentError(f"the agent ({shlex.join(command)}) exited with code {proc.returncode} "
                             "before it listened")
        if os.path.exists(path):
            try:
                return ShmHostEndpoint(path, token)
            except (ConnectionRefusedError, FileNotFoundError):
                pass
        if time.monotonic() > deadline:
            raise AgentError(f"the agent did not listen on {path} within {start_timeout} s")
        time.sleep(0.005)


def connect_doca(pci: str, name: str, spawn: bool = False, timeout: float | None = None) -> RemoteAgentClient:
    """Reach the agent over DOCA (Comch + DMA) at device ``pci``, Comch service ``name``.

    On a BlueField the agent runs on the DPU (``sni-agent --doca --pci ... --name ...``)
    and this connects to it. ``spawn`` starts the ``sni-agent`` binary with ``--doca`` here
    instead (host emulation of the DPU path, as the tests do with the simulated SDK).
    """
    from .doca import DocaHostEndpoint
    proc = None
    if spawn:  # the binary's DOCA transport; DOCA_LIB_DIR (the simulated SDK in tests) is inherited
        proc = subprocess.Popen([*agent_command(), "--doca", "--pci", pci, "--name", name],
                                stdin=subprocess.DEVNULL)
    try:
        return RemoteAgentClient(DocaHostEndpoint(pci, name), proc, timeout=timeout)
    except BaseException:
        if proc is not None:
            proc.kill()
            proc.wait()
        raise


def socket_paths(agent_dir: str, rank: int) -> tuple:
    """(socket, token file, pid file, log file) of the standalone agent of trainer ``rank``
    in ``agent_dir`` (``dgl-sni agent start`` makes them; one agent per trainer)."""
    base = os.path.join(agent_dir, f"agent-{rank}")
    return base + ".sock", os.path.join(agent_dir, "token"), base + ".pid", base + ".log"


def connect_socket(agent_dir: str, rank: int, timeout: float | None = None) -> RemoteAgentClient:
    """Connect to the standalone agent of trainer ``rank`` in ``agent_dir`` (one attempt;
    raises AgentError when it is not there)."""
    path, token_file, _, _ = socket_paths(agent_dir, rank)
    try:
        with open(token_file) as fh:
            token = bytes.fromhex(fh.read().strip())
        return RemoteAgentClient(ShmHostEndpoint(path, token), timeout=timeout)
    except (OSError, ValueError) as err:
        raise AgentError(f"no standalone agent at {path} ({err}): start it with `dgl-sni agent start`") from err


def probe_socket(agent_dir: str, rank: int, timeout: float = 2.0) -> tuple:
    """Check the standalone agent of trainer ``rank`` in ``agent_dir`` with a real connection
    (hello with the token, then close): ``(state, detail)`` with state ``accepts``, ``busy``
    (it listens but does not answer within ``timeout``: it serves one trainer at a time),
    ``refused`` (it answered with an error, e.g. a wrong token) or ``down`` (nothing listens)."""
    path, token_file, _, _ = socket_paths(agent_dir, rank)
    try:
        with open(token_file) as fh:
            token = bytes.fromhex(fh.read().strip())
    except (OSError, ValueError) as err:
        return "down", f"no usable token file {token_file} ({err})"
    try:
        endpoint = ShmHostEndpoint(path, token, timeout=timeout)
    except AgentError as err:
        return "refused", str(err)
    except TimeoutError:
        return "busy", f"it listens but did not answer within {timeout:g} s (serving a trainer?)"
    except (OSError, EOFError, ValueError) as err:
        return "down", f"{path}: {err}"
    try:
        endpoint.send(dict(op="close"))
    except OSError:
        pass
    endpoint.close()
    return "accepts", f"{path} accepts the token"


def start_agent(mode: str, doca_pci: str | None = None, doca_name: str | None = None,
                timeout: float | None = None, agent_dir: str | None = None) -> AgentClient:
    """``inline`` (thread), ``process`` (child process over shared memory; with ``agent_dir``
    the standalone agent ``dgl-sni agent start`` runs there for this rank), ``doca`` (the
    agent on the DPU) or ``doca-local`` (a DOCA agent process started here). ``timeout``:
    seconds a reply may take (remote agents)."""
    if mode == "inline":
        return InlineAgentClient()
    if mode == "process" and agent_dir:
        return connect_socket(agent_dir, int(os.environ.get("RANK", "0")), timeout)
    if mode == "process":
        return spawn_agent(timeout=timeout)
    if mode in ("doca", "doca-local"):
        if not doca_pci:
            raise ValueError("agent mode 'doca' needs the device's PCI address (--doca-pci)")
        name = doca_name or f"sni-agent-{os.environ.get('RANK', '0')}-{os.getpid()}"
        return connect_doca(doca_pci, name, spawn=mode == "doca-local", timeout=timeout)
    raise ValueError(f"unknown agent mode '{mode}': use inline, process, doca or doca-local")
