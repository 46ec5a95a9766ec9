"""``dgl-sni agent``: standalone agents, run apart from the trainers.

* ``start --dir DIR --ranks N`` -- one ``sni-agent --socket DIR/agent-R.sock --token-file
  DIR/token`` per trainer rank R, detached (its own session; log ``agent-R.log``, pid
  ``agent-R.pid``); it serves trainer after trainer, so a trainer that lost it (or a new
  run) reconnects. ``dgl-sni train --agent process --agent-dir DIR`` connects to them. An
  agent already running is left alone; the files of a killed one are replaced.
* ``status --dir DIR`` -- per rank: running / dead / absent, and whether its socket accepts
  the token (a real connection); exit code 0 when every agent runs.
* ``stop --dir DIR`` -- SIGTERM (then SIGKILL) every agent; the token and logs stay.
* ``deploy --hosts FILE [--dry-run]`` -- copy the aarch64 binary and a systemd unit to each
  BlueField DPU over scp and start it there with ssh (:mod:`dgl_sni.agent_deploy`).

DIR holds the token the trainers present, so it must be this user's and closed to others
(mode 0700); the agent refuses any other directory as well. The paths in DIR are
:func:`dpu_agent.client.socket_paths`. These flags are the command line's own (not settings
of a run), so they are declared here with argparse.
"""
from __future__ import annotations

import argparse
import datetime
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from dataclasses import dataclass

from .agent_deploy import DEFAULT_REMOTE_DIR, AgentCliError, _fail, deploy

# dpu_agent (numpy, shared memory) is imported by the subcommands, so `dgl-sni --help` stays fast.

AGENT_FILE = re.compile(r"^agent-(\d+)\.(pid|sock|log)$")
SUN_PATH_MAX = 107  # bytes of a Unix socket path (sockaddr_un.sun_path less its NUL)
STOP_GRACE_S = 5.0




# ----------------------------------------------------------------------------- the agent folder

def check_agent_dir(path: str, create: bool = False) -> str:
    """The absolute agent folder, made 0700 if ``create`` and missing; raises
    :class:`AgentCliError` when it is another user's or open to group or others."""
    path = os.path.abspath(path)
    if not os.path.exists(path):
        if not create:
            raise AgentCliError(f"no agent folder {path} (dgl-sni agent start makes it)")
        os.makedirs(path, mode=0o700)
        os.chmod(path, 0o700)  # whatever the umask
    st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise AgentCliError(f"{path} is not a folder")
    if st.st_uid != os.geteuid():
        raise AgentCliError(f"agent folder {path} belongs to uid {st.st_uid}, not to you (uid {os.geteuid()}): "
                            "it holds the token that lets a trainer in, so use a folder of your own")
    if st.st_mode & 0o077:
        raise AgentCliError(f"agent folder {path} has mode {stat.S_IMODE(st.st_mode):04o}, open to group or "
                            f"others: it holds the agents' token, so it must be 0700 (chmod 700 {shlex.quote(path)}, "
                            "or choose a new folder)")
    return path


def ensure_token(token_file: str) -> bool:
    """Write a random 32-byte token (hex, mode 0600) unless the file exists; True when written.
    An existing token must be this user's, 0600 or stricter, and hold 64 hex digits."""
    from dpu_agent.client import write_token
    try:
        write_token(token_file)
        return True
    except FileExistsError:
        st = os.stat(token_file)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise AgentCliError(f"token file {token_file} must be yours with mode 0600 (it has "
                                f"{stat.S_IMODE(st.st_mode):04o}, uid {st.st_uid}): remove it to get a new one")
        with open(token_file) as fh:
            text = fh.read().strip()
        if not re.fullmatch(r"[0-9a-fA-F]{64}", text):
            raise AgentCliError(f"token file {token_file} does not hold 64 hex digits: remove it to get a new one")
        return False


def agent_ranks(agent_dir: str) -> list:
    """Ranks that have any file (pid, socket, log) in ``agent_dir``, ascending."""
    ranks = set()
    for name in os.listdir(agent_dir):
        m = AGENT_FILE.match(name)
        if m:
            ranks.add(int(m.group(1)))
    return sorted(ranks)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _reap(pid: int) -> None:
    """Collect ``pid`` if it is a child of this process (an in-process caller's agent)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def _serves(pid: int, socket_path: str) -> bool:
    """True when ``pid`` is alive and is the agent of ``socket_path`` (its command line says so)."""
    if _is_zombie(pid):  # or gone
        _reap(pid)
        return False
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            argv = fh.read().split(b"\0")
    except OSError:
        return False
    want = os.fsencode(socket_path)
    return any(a == b"--socket" and b == want for a, b in zip(argv, argv[1:]))


@dataclass
class AgentState:
    """What is known of the agent of one rank: its files and whether its pid is the agent."""

    rank: int
    socket: str
    token: str
    pid_file: str
    log: str
    pid: int | None = None  # from the pid file
    running: bool = False  # the pid is alive and is this rank's agent

    @property
    def status(self) -> str:
        if self.running:
            return f"running (pid {self.pid})"
        if self.pid is not None:
            return f"dead (stale pid file: pid {self.pid} is not running this agent)"
        return "absent (no pid file)"


def agent_state(agent_dir: str, rank: int) -> AgentState:
    from dpu_agent.client import socket_paths
    st = AgentState(rank, *socket_paths(agent_dir, rank))
    try:
        with open(st.pid_file) as fh:
            st.pid = int(fh.read().strip())
    except (OSError, ValueError):
        st.pid = None
    st.running = st.pid is not None and _serves(st.pid, st.socket)
    return st


def _remove(path: str) -> bool:
    try:
        os.remove(path)
        return True
    except FileNotFoundError:
        return False


def _log_tail(path: str, lines: int = 8) -> str:
    try:
        with open(path, errors="replace") as fh:
            return "".join(fh.readlines()[-lines:]).rstrip()
    except OSError:
        return ""


# ----------------------------------------------------------------------------- start / status / stop

def _wait_listening(agent_dir: str, st: AgentState, proc: subprocess.Popen, timeout: float) -> None:
    from dpu_agent.client import probe_socket
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            _remove(st.pid_file)
            tail = _log_tail(st.log)
            raise AgentCliError(f"agent {st.rank} exited with code {proc.returncode} before it listened on "
                                f"{st.socket}" + (f"; {st.log} ends:\n{tail}" if tail else ""))
        if os.path.exists(st.socket):
            state, detail = probe_socket(agent_dir, st.rank, timeout=max(0.5, min(2.0, timeout)))
            if state == "accepts":
                return
            if state == "refused":
                raise AgentCliError(f"agent {st.rank} refused its own token: {detail}")
        if time.monotonic() > deadline:
            proc.kill()
            _remove(st.pid_file)
            raise AgentCliError(f"agent {st.rank} did not accept connections on {st.socket} within "
                                f"{timeout:g} s (its log: {st.log})")
        time.sleep(0.02)


def _agent_command(binary: str | None) -> list:
    if binary is None:
        from dpu_agent.binary import agent_command
        try:
            return agent_command()
        except FileNotFoundError as err:
            raise AgentCliError(str(err)) from None
    if not os.access(binary, os.X_OK) or os.path.isdir(binary):
        raise AgentCliError(f"--binary {binary} is not an executable file")
    return [os.path.abspath(binary)]


def start_agents(agent_dir: str, ranks: list, binary: str | None = None, timeout: float = 30.0,
                 out=sys.stdout) -> int:
    """``dgl-sni agent start``; returns the exit code (1 when an agent could not start)."""
    from dpu_agent.client import probe_socket
    agent_dir = check_agent_dir(agent_dir, create=True)
    command = _agent_command(binary)
    st0 = agent_state(agent_dir, ranks[0])
    if len(os.fsencode(agent_state(agent_dir, max(ranks)).socket)) > SUN_PATH_MAX:
        raise AgentCliError(f"socket paths in {agent_dir} would exceed {SUN_PATH_MAX} bytes (a Unix socket "
                            "limit): choose a shorter folder")
    if ensure_token(st0.token):
        print(f"wrote a new token {st0.token} (mode 0600)", file=out)
    failed = 0
    for rank in ranks:
        st = agent_state(agent_dir, rank)
        if st.running:
            print(f"agent {rank}: already running (pid {st.pid}) on {st.socket}; left as it is", file=out)
            continue
        note = ""
        if st.pid is not None:
            note = f" (replaced the stale pid file of pid {st.pid})"
        elif os.path.exists(st.socket):
            state, _ = probe_socket(agent_dir, rank, timeout=1.0)
            if state in ("accepts", "busy"):
                print(f"agent {rank}: an agent without a pid file answers on {st.socket}; left as it is "
                      "(stop it yourself to restart it here)", file=out)
                continue
        if _remove(st.socket) and not note:
            note = " (removed a stale socket)"
        _remove(st.pid_file)
        argv = [*command, "--socket", st.socket, "--token-file", st.token]
        with open(st.log, "a") as log:
            log.write(f"--- dgl-sni agent start {datetime.datetime.now().isoformat(timespec='seconds')}: "
                      f"{shlex.join(argv)}\n")
            log.flush()
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True, cwd=agent_dir)
        tmp = f"{st.pid_file}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            fh.write(f"{proc.pid}\n")
        os.replace(tmp, st.pid_file)
        try:
            _wait_listening(agent_dir, st, proc, timeout)
        except AgentCliError as err:
            print(f"agent {rank}: failed: {err}", file=sys.stderr)
            failed += 1
            continue
        print(f"agent {rank}: started (pid {proc.pid}) on {st.socket}, log {st.log}{note}", file=out)
    return 1 if failed else 0


def agents_status(agent_dir: str, ranks: list | None = None, timeout: float = 2.0, out=sys.stdout) -> int:
    """``dgl-sni agent status``: 0 when every listed agent runs and its socket answers (or is busy
    serving a trainer), 1 otherwise."""
    from dpu_agent.client import probe_socket
    agent_dir = os.path.abspath(agent_dir)
    if not os.path.isdir(agent_dir):
        print(f"no agent folder {agent_dir}", file=out)
        return 1
    ranks = agent_ranks(agent_dir) if ranks is None else ranks
    if not ranks:
        print(f"no agents in {agent_dir}", file=out)
        return 1
    ok = True
    for rank in ranks:
        st = agent_state(agent_dir, rank)
        if os.path.exists(st.socket):
            state, detail = probe_socket(agent_dir, rank, timeout=timeout)
        else:
            state, detail = "down", f"no socket {st.socket}"
        if state == "accepts":
            sock = "socket accepts the token"
        elif state == "busy":
            sock = f"socket busy: {detail}"
        else:
            sock = f"socket {state}: {detail}"
        print(f"agent {rank}: {st.status}; {sock}", file=out)
        ok = ok and st.running and state in ("accepts", "busy")
    return 0 if ok else 1


def _wait_gone(pid: int, socket_path: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while _serves(pid, socket_path):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def stop_agents(agent_dir: str, grace_s: float = STOP_GRACE_S, out=sys.stdout) -> int:
    """``dgl-sni agent stop``: SIGTERM, SIGKILL after ``grace_s``; pid files and sockets go,
    the token and logs stay."""
    from dpu_agent.client import socket_paths
    agent_dir = os.path.abspath(agent_dir)
    if not os.path.isdir(agent_dir):
        print(f"no agent folder {agent_dir}: nothing to stop", file=out)
        return 0
    ranks = [r for r in agent_ranks(agent_dir)
             if any(os.path.exists(p) for p in socket_paths(agent_dir, r)[::2])]  # a socket or pid file
    if not ranks:
        print(f"no agents in {agent_dir}", file=out)
    for rank in ranks:
        st = agent_state(agent_dir, rank)
        if st.running:
            how = "stopped"
            try:
                os.kill(st.pid, signal.SIGTERM)
                if not _wait_gone(st.pid, st.socket, grace_s):
                    os.kill(st.pid, signal.SIGKILL)
                    _wait_gone(st.pid, st.socket, 5.0)
                    how = f"killed (no exit within {grace_s:g} s of SIGTERM)"
            except ProcessLookupError:  # it ended by itself meanwhile
                pass
            _reap(st.pid)
            msg = f"{how} (pid {st.pid})"
        elif st.pid is not None:
            msg = f"was not running (stale pid file of pid {st.pid})"
        else:
            msg = "was not running"
        removed = [os.path.basename(p) for p in (st.pid_file, st.socket) if _remove(p)]
        print(f"agent {rank}: {msg}" + (f"; removed {', '.join(removed)}" if removed else ""), file=out)
    return 0


# ----------------------------------------------------------------------------- parser

def _ranks(ns) -> list:
    if ns.ranks < 1:
        raise AgentCliError(f"--ranks must be at least 1, got {ns.ranks}")
    if ns.rank is None:
        return list(range(ns.ranks))
    bad = [r for r in ns.rank if not 0 <= r < ns.ranks]
    if bad:
        raise AgentCliError(f"--rank {bad[0]} is not one of the {ns.ranks} ranks (0..{ns.ranks - 1})")
    return sorted(set(ns.rank))


def _run(fn):
    def run(ns) -> int:
        try:
            return fn(ns)
        except AgentCliError as err:
            return _fail(str(err))
    return run


def _positive(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def add_agent_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``dgl-sni agent {start,status,stop,deploy}`` on the top-level ``subparsers``."""
    p = subparsers.add_parser("agent", help="standalone agents: start, status, stop; deploy to BlueField DPUs",
                              description="Standalone agents, run apart from the trainers, and their deployment.")
    sub = p.add_subparsers(dest="agent_cmd", required=True)

    s = sub.add_parser("start", help="start one detached sni-agent per trainer rank in DIR")
    s.add_argument("--dir", required=True, help="agent folder (made 0700; token, sockets, pids, logs)")
    s.add_argument("--ranks", type=int, required=True, help="trainer ranks: agents 0..N-1")
    s.add_argument("--rank", type=int, action="append", default=None,
                   help="only this rank (repeatable), e.g. to start each machine's agent on that machine")
    s.add_argument("--binary", default=None, help="the agent executable (default: $SNI_AGENT_COMMAND or the "
                                                 "built dpu_agent/bin/sni-agent)")
    s.add_argument("--timeout", type=_positive, default=30.0, help="seconds an agent may take to listen")
    s.set_defaults(func=_run(lambda ns: start_agents(ns.dir, _ranks(ns), ns.binary, ns.timeout)))

    s = sub.add_parser("status", help="per rank: running / dead / absent, and a real connection check")
    s.add_argument("--dir", required=True, help="agent folder")
    s.add_argument("--ranks", type=int, default=None, help="check ranks 0..N-1 (default: those with files in DIR)")
    s.add_argument("--timeout", type=_positive, default=2.0, help="seconds the connection check waits")
    s.set_defaults(func=_run(lambda ns: agents_status(
        ns.dir, None if ns.ranks is None else list(range(ns.ranks)), ns.timeout)))

    s = sub.add_parser("stop", help="stop the agents in DIR (SIGTERM, then SIGKILL); token and logs stay")
    s.add_argument("--dir", required=True, help="agent folder")
    s.add_argument("--grace", type=_positive, default=STOP_GRACE_S, help="seconds from SIGTERM to SIGKILL")
    s.set_defaults(func=_run(lambda ns: stop_agents(ns.dir, ns.grace)))

    s = sub.add_parser("deploy", help="copy the aarch64 agent and a systemd unit to each DPU (scp) and start "
                                      "it (ssh)")
    s.add_argument("--hosts", required=True, help="one DPU per line: HOST [PCI [NAME]] ('#' comments)")
    s.add_argument("--dry-run", action="store_true", help="print every command and the unit files; run nothing")
    s.add_argument("--binary", default=None, help="aarch64 agent (default dpu_agent/bin/sni-agent-aarch64, "
                                                 "from `make agent-aarch64`)")
    s.add_argument("--user", default=None, help="ssh login on the DPUs (default: ssh's)")
    s.add_argument("--ssh-port", type=int, default=None, help="ssh port of the DPUs (default: ssh's)")
    s.add_argument("--remote-dir", default=DEFAULT_REMOTE_DIR, help="where the binary goes on the DPU")
    s.add_argument("--pci", default=None, help="PCI address for hosts whose line gives none")
    s.set_defaults(func=_run(lambda ns: deploy(ns.hosts, ns.binary, ns.dry_run, ns.user, ns.ssh_port,
                                               ns.remote_dir, ns.pci)))
    return p
