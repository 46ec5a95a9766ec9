"""A DistDGL cluster of emulated machines on one host.

DistDGL finds a machine's id by its IP address and names shared memory without the
partition id, so two "machines" on one host need their own address and their own
``/dev/shm``. :class:`LocalCluster` gives each machine a network namespace (veth into
a bridge that lives in a namespace of its own; the host's network is never touched), a
private tmpfs ``/dev/shm`` (a mount namespace held by a small holder process), and runs
one DGL server and one trainer inside with the environment DGL's launch tool would
set. It watches every process: one that dies ends the run with an error naming it
and the tail of its log, and everything (processes, namespaces, mounts, temporary
files) is removed on exit, Ctrl-C or error.

With ``mode="loopback"`` (one machine, no root needed) the single server and trainer
run on 127.0.0.1 in the host's namespaces.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

from .allocator import preload_env

SUBNET = "10.77.0"
RATE_RE = re.compile(r"^\d+(\.\d+)?(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps|tbps)$")
NS_PREFIX = "sni"


class ClusterError(RuntimeError):
    """The local cluster could not start, or a process in it failed."""


def _run(cmd: list, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and proc.returncode != 0:
        raise ClusterError(f"command failed ({' '.join(cmd)}): {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def validate_rate(rate: str) -> str:
    """Check a ``tc`` rate such as ``1gbit`` or ``100mbit``."""
    if not RATE_RE.match(rate.strip().lower()):
        raise ValueError(f"--bandwidth '{rate}' is not a tc rate: use e.g. 1gbit, 100mbit, 500kbit")
    return rate.strip().lower()


def rate_bits(rate: str) -> float:
    """A ``tc`` rate in bits per second (``1gbit``, ``100mbit``; ``bps`` units are bytes, as in tc)."""
    rate = validate_rate(rate)
    per_byte = rate.endswith("bps")
    number = rate[: -3]
    scale = {"k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
    unit = number[-1] if number[-1] in scale else ""
    value = float(number[: len(number) - len(unit)]) * scale.get(unit, 1.0)
    return value * 8 if per_byte else value


def check_port_free(ip: str, port: int, what: str) -> None:
    """Raise :class:`ClusterError` if ``ip:port`` cannot be bound (something listens there)."""
    if not 1 <= port <= 65535:
        raise ClusterError(f"{what} port {port} is not a valid TCP port")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.bind((ip, port))
    except OSError as err:
        raise ClusterError(f"{what} port {port} on {ip} is already in use ({err.strerror}); "
                           f"choose another with --port/--master-port") from err
    finally:
        sock.close()


def netns_available() -> tuple:
    """(True, "") if this process may create network namespaces, else (False, reason)."""
    if os.geteuid() != 0:
        return False, "emulating several machines needs root (network and mount namespaces)"
    for tool in ("ip", "unshare", "nsenter", "mount"):
        if shutil.which(tool) is None:
            return False, f"the '{tool}' command is missing (iproute2/util-linux)"
    return True, ""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def cleanup_stale_namespaces() -> list:
    """Delete namespaces left by runs whose owning process is gone (e.g. after SIGKILL)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return []
    removed = []
    out = _run(["ip", "netns", "list"], check=False).stdout
    for line in out.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.match(rf"^{NS_PREFIX}(\d+)(b|m\d+)$", name)
        if m and not _pid_alive(int(m.group(1))):
            _run(["ip", "netns", "del", name], check=False)
            removed.append(name)
    return removed


SERVERS_READY_ENV = "DGL_SNI_SERVERS_READY"  # a file that exists once every DGL server listens


def listening(pid: int, port: int) -> bool | None:
    """Whether a socket in the network namespace of process ``pid`` listens on TCP ``port``
    (``/proc/PID/net/tcp*``: no connection is made, so a DGL server's accept count is
    untouched); ``None`` where that cannot be read (no ``/proc``, the process is gone)."""
    readable = False
    for name in ("tcp", "tcp6"):
        try:
            with open(f"/proc/{pid}/net/{name}") as fh:
                readable = True
                next(fh, None)  # header
                for line in fh:
                    fields = line.split()
                    if len(fields) > 3 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:
                        return True
        except (OSError, ValueError):
            continue
    return False if readable else None


@dataclass
class Proc:
    """One process of the cluster and where its output goes."""

    name: str
    popen: subprocess.Popen
    log: str
    critical: bool = True  # a non-zero exit fails the run

    def tail(self, lines: int = 25) -> str:
        try:
            with open(self.log, errors="replace") as fh:
                return "".join(fh.readlines()[-lines:])
        except OSError:
            return ""


@dataclass
class Machine:
    """An emulated machine: its address, namespace and holder process."""

    rank: int
    ip: str
    netns: str | None = None
    holder: subprocess.Popen | None = None
    procs: list = field(default_factory=list)


class LocalCluster:
    """Owns the emulated machines of one run and everything running on them.

    Used as a context manager by ``dgl-sni train`` and ``dgl-sni launch``:
    ``start_servers`` then ``start_trainers``, then ``wait``; ``__exit__`` tears down.
    """

    def __init__(self, num_machines: int, run_dir: str, mode: str = "netns",
                 bandwidth: str | None = None, port: int | None = None, master_port: int | None = None,
                 omp_threads: int | None = None, trainers: int = 1, samplers: int = 0, servers: int = 1,
                 cwd: str | None = None, preload: str | None = None):
        if num_machines < 1:
            raise ValueError(f"--workers must be at least 1, got {num_machines}")
        for value, flag in ((trainers, "--num_trainers"), (servers, "--num_servers")):
            if value < 1:
                raise ValueError(f"{flag} must be at least 1, got {value}")
        if samplers < 0:
            raise ValueError(f"--num_samplers must be >= 0, got {samplers}")
        if mode not in ("netns", "loopback"):
            raise ValueError(f"unknown cluster mode '{mode}'")
        if mode == "loopback" and num_machines > 1:
            raise ClusterError("loopback mode runs one machine only: DistDGL cannot tell two "
                               "machines on one address apart; use netns mode (root) for more")
        if mode == "netns":
            ok, why = netns_available()
            if not ok:
                raise ClusterError(why)
        if port is None or master_port is None:  # the configuration's defaults (it imports this module)
            from .config import ClusterConfig
            port = ClusterConfig().port if port is None else port
            master_port = ClusterConfig().master_port if master_port is None else master_port
        if port == master_port:
            raise ClusterError(f"--port and --master-port are both {port}: the DGL server and the "
                               "torch.distributed store would collide on machine 0")
        self.num_machines, self.mode = num_machines, mode
        # per machine, as DGL's launch tool: trainers (torch ranks), sampler processes per
        # trainer, servers (the first is the main server, the others its backups)
        self.trainers, self.samplers, self.servers = trainers, samplers, servers
        self.cwd = os.path.abspath(cwd or os.getcwd())  # every process starts here (the caller's folder)
        self.bandwidth = validate_rate(bandwidth) if bandwidth else None
        self.port, self.master_port = port, master_port
        self.run_dir = os.path.abspath(run_dir)
        self.run_id = os.getpid()
        self.preload = preload  # a malloc library put into every process's LD_PRELOAD (dgl_sni.allocator)
        self.omp_threads = omp_threads or max(1, (os.cpu_count() or 1) // (num_machines * trainers))
        self.machines = [Machine(k, f"{SUBNET}.{k + 1}" if mode == "netns" else "127.0.0.1")
                         for k in range(num_machines)]
        self.ip_config = os.path.join(self.run_dir, "ip_config.txt")
        self._servers_ready = None  # the gate file of start_trainers(gate=True)
        self._bridge_ns = f"{NS_PREFIX}{self.run_id}b"
        self._entered = False

    # ------------------------------------------------------------------ set-up
    def __enter__(self):
        os.makedirs(self.run_dir, exist_ok=True)
        self._entered = True
        self._old_handlers = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            if self.mode == "netns":
                cleanup_stale_namespaces()
                self._make_network()
                self._start_holders()
            else:  # the host's own ports: check them before anything starts
                check_port_free("127.0.0.1", self.port, "DGL server")
                check_port_free("127.0.0.1", self.master_port, "torch.distributed master")
            with open(self.ip_config, "w") as fh:
                for m in self.machines:
                    fh.write(f"{m.ip} {self.port}\n")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def _make_network(self) -> None:
        br = self._bridge_ns
        _run(["ip", "netns", "add", br])
        _run(["ip", "-n", br, "link", "set", "lo", "up"])
        _run(["ip", "-n", br, "link", "add", "br0", "type", "bridge"])
        _run(["ip", "-n", br, "link", "set", "br0", "up"])
        for m in self.machines:
            m.netns = f"{NS_PREFIX}{self.run_id}m{m.rank}"
            _run(["ip", "netns", "add", m.netns])
            _run(["ip", "-n", br, "link", "add", f"v{m.rank}", "type", "veth",
                  "peer", "name", "eth0", "netns", m.netns])
            _run(["ip", "-n", br, "link", "set", f"v{m.rank}", "master", "br0"])
            _run(["ip", "-n", br, "link", "set", f"v{m.rank}", "up"])
            _run(["ip", "-n", m.netns, "addr", "add", f"{m.ip}/24", "dev", "eth0"])
            _run(["ip", "-n", m.netns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", m.netns, "link", "set", "lo", "up"])
            if self.bandwidth:
                self.shape(m.rank, self.bandwidth)

    def shape(self, rank: int, rate: str | None) -> None:
        """Limit what machine ``rank`` sends to ``rate`` (tc tbf); ``None`` removes the limit."""
        ns = self.machines[rank].netns
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", "eth0", "root"], check=False)
        if rate:
            _run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
                  "rate", validate_rate(rate), "burst", "256kb", "latency", "50ms"])

    def _start_holders(self) -> None:
        script = "mount -t tmpfs -o mode=1777 tmpfs /dev/shm && echo ready && exec sleep 2147483647"
        for m in self.machines:
            m.holder = subprocess.Popen(
                ["ip", "netns", "exec", m.netns, "unshare", "-m", "--propagation", "private",
                 "sh", "-c", script],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
            line = m.holder.stdout.readline().strip()
            if line != "ready":
                err = m.holder.stderr.read() if m.holder.poll() is not None else ""
                raise ClusterError(f"could not give machine {m.rank} a private /dev/shm: {err.strip() or line}")

    # ------------------------------------------------------------------ processes
    def _base_env(self, m: Machine, part_config: str) -> dict:
        env = preload_env(dict(os.environ), self.preload)
        tmp = os.path.join(self.run_dir, f"tmp{m.rank}")
        os.makedirs(tmp, exist_ok=True)
        env.update(
            DGL_NUM_SAMPLER=str(self.samplers),
            DGL_NUM_CLIENT=str(self.num_machines * self.trainers * (1 + self.samplers)),
            DGL_NUM_SERVER=str(self.servers),
            DGL_CONF_PATH=os.path.abspath(part_config), DGL_IP_CONFIG=self.ip_config,
            DGL_GRAPH_FORMAT="csc", DGL_KEEP_ALIVE="0", TMPDIR=tmp, PYTHONUNBUFFERED="1",
            SNI_MACHINE_IP=m.ip)
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def _spawn(self, m: Machine, name: str, cmd: list, env: dict, log: str | None,
               critical: bool = True) -> Proc:
        if self.mode == "netns":  # entering the mount namespace resets the working directory: set it again
            cmd = ["nsenter", "-t", str(m.holder.pid), "-m", "-n", f"--wd={self.cwd}", "--"] + cmd
        if log is None:
            out = None
            log_path = ""
        else:
            log_path = os.path.join(self.run_dir, log)
            out = open(log_path, "w")
        popen = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT if out else None,
                                 start_new_session=True, cwd=self.cwd)
        if out is not None:
            out.close()
        proc = Proc(name, popen, log_path, critical)
        m.procs.append(proc)
        self._write_pids()
        return proc

    def _write_pids(self) -> None:
        """``run_dir/pids.json``: every process of the run by name (for operators and tests)."""
        pids = {p.name: p.popen.pid for p in self.processes()}
        pids.update({f"holder {m.rank}": m.holder.pid for m in self.machines if m.holder})
        tmp = os.path.join(self.run_dir, "pids.json.tmp")
        with open(tmp, "w") as fh:
            json.dump(pids, fh)
        os.replace(tmp, os.path.join(self.run_dir, "pids.json"))

    def start_servers(self, cmd: list, part_config: str) -> None:
        """``servers`` DGL servers per machine running ``cmd`` (which calls ``dgl.distributed.initialize``);
        server ids count machine by machine, as DGL's launch tool numbers them."""
        for m in self.machines:
            for s in range(self.servers):
                sid = m.rank * self.servers + s
                env = self._base_env(m, part_config)
                env.update(DGL_ROLE="server", DGL_SERVER_ID=str(sid), OMP_NUM_THREADS="1")
                self._spawn(m, f"server {sid}", cmd, env, f"server{sid}.log")

    def start_trainers(self, cmd: list, part_config: str, log: bool = True, gate: bool = False) -> None:
        """``trainers`` trainers per machine with DGL's client variables and torch.distributed's env://
        (ranks count machine by machine, as ``torch.distributed.run`` numbers them).

        ``gate``: the trainers may wait, before they connect, until every server listens
        (``$SERVERS_READY_ENV`` names a file :meth:`wait` creates then; ``dgl_sni.worker``
        waits for it). DGL's client sleeps 3 s after each try to reach a server that does not
        listen yet (in C++, ``SocketSender::ConnectReceiverFinalize``), and servers load
        their partitions first: the gate lets trainers import and set up meanwhile and
        connect at once."""
        if gate:
            self._servers_ready = os.path.join(self.run_dir, "servers-ready")
        for m in self.machines:
            for t in range(self.trainers):
                rank = m.rank * self.trainers + t
                env = self._base_env(m, part_config)
                env.update(
                    DGL_DIST_MODE="distributed", DGL_ROLE="client", DGL_GROUP_ID="0",
                    OMP_NUM_THREADS=str(self.omp_threads), RANK=str(rank), LOCAL_RANK=str(t),
                    WORLD_SIZE=str(self.num_machines * self.trainers), LOCAL_WORLD_SIZE=str(self.trainers),
                    GROUP_RANK=str(m.rank), MASTER_ADDR=self.machines[0].ip, MASTER_PORT=str(self.master_port))
                env["GLOO_SOCKET_IFNAME"] = "eth0" if self.mode == "netns" else "lo"
                if gate:
                    env[SERVERS_READY_ENV] = self._servers_ready
                self._spawn(m, f"trainer {rank}", cmd, env, f"trainer{rank}.log" if log else None)

    def processes(self) -> list:
        return [p for m in self.machines for p in m.procs]

    def wait(self, poll_s: float = 0.2, on_poll=None, timeout: float | None = None) -> None:
        """Block until every trainer has exited 0 and the servers have stopped.

        Raises :class:`ClusterError` as soon as any process exits non-zero (or the
        timeout passes); ``on_poll()`` runs every ``poll_s`` seconds (progress display).
        """
        start = time.monotonic()
        trainers_done_at = None
        while True:
            self._open_gate()
            if on_poll is not None:
                on_poll()
            procs = self.processes()
            failed = [(p, p.popen.poll()) for p in procs if p.critical and p.popen.poll() not in (None, 0)]
            if failed:
                # a process killed by a signal is the cause; peers that then lost it exit with errors
                failed.sort(key=lambda pc: pc[1] >= 0)
                raise ClusterError(self._failure_message(*failed[0], others=failed[1:]))
            trainers = [p for p in procs if p.name.startswith("trainer")]
            if all(p.popen.poll() == 0 for p in trainers):
                if trainers_done_at is None:
                    trainers_done_at = time.monotonic()
                if all(p.popen.poll() is not None for p in procs):
                    return
                if time.monotonic() - trainers_done_at > 30:
                    return  # servers linger; close() ends them
            if timeout is not None and time.monotonic() - start > timeout:
                raise ClusterError(f"the run did not finish within --timeout {timeout:.0f} s")
            time.sleep(poll_s)

    def _open_gate(self) -> None:
        """Create the servers-ready file once every server listens (see :meth:`start_trainers`)."""
        path = self._servers_ready
        if path is None or os.path.exists(path):
            return
        servers = [p for p in self.processes() if p.name.startswith("server ")]
        # server sid listens on the machine's port plus its index on the machine, as DGL numbers
        # them; where it cannot be seen, the trainers go ahead (DGL's own retries then apply)
        if all(listening(p.popen.pid, self.port + int(p.name.split()[1]) % self.servers) is not False
               for p in servers):
            with open(path, "w"):
                pass

    @staticmethod
    def _failure_message(p: Proc, code: int, others=()) -> str:
        def how(c):
            return f"was killed by signal {-c}" if c < 0 else f"exited with code {c}"
        msg = f"{p.name} {how(code)}; the run was stopped"
        if others:
            msg += " (also " + ", ".join(f"{o.name} {how(c)}" for o, c in others) + ")"
        tail = p.tail()
        if tail:
            msg += f". Last lines of {p.log}:\n{tail}"
        return msg

    # ------------------------------------------------------------------ teardown
    def close(self) -> None:
        """Stop every process, then remove namespaces, mounts and temporary folders."""
        if not self._entered:
            return
        self._entered = False
        procs = [p.popen for p in self.processes()] + [m.holder for m in self.machines if m.holder]
        for sig in (signal.SIGTERM, signal.SIGKILL):
            alive = [p for p in procs if p.poll() is None]
            for p in alive:
                try:
                    os.killpg(p.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + 5
            while any(p.poll() is None for p in alive) and time.monotonic() < deadline:
                time.sleep(0.05)
        for m in self.machines:
            if m.holder is not None:
                for stream in (m.holder.stdout, m.holder.stderr):
                    if stream:
                        stream.close()
            if m.netns:
                _run(["ip", "netns", "del", m.netns], check=False)
                m.netns = None
        if self.mode == "netns":
            _run(["ip", "netns", "del", self._bridge_ns], check=False)
        for m in self.machines:
            shutil.rmtree(os.path.join(self.run_dir, f"tmp{m.rank}"), ignore_errors=True)
        for s, h in getattr(self, "_old_handlers", {}).items():
            signal.signal(s, h)


def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def python_cmd(module: str, *args) -> list:
    """Command line that runs ``python -m module args`` with this interpreter."""
    return [sys.executable, "-m", module, *map(str, args)]
