"""The ``sni-agent`` binary: a plain ELF executable, a hardened socket, the same losses as aarch64 under qemu.

The aarch64 test needs Debian's g++-aarch64-linux-gnu and qemu-user (``make agent-test-deps``
installs them as root); without them it fails saying what to install.
"""
import os
import pwd
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import ROOT, needs_netns, read_metrics, run_cli
from dpu_agent import protocol
from dpu_agent.binary import BINARY
from dpu_agent.client import spawn_agent
from dpu_agent.shm import ShmHostEndpoint
from dpu_agent.transport import AgentError

AARCH64 = os.path.join(ROOT, "dpu_agent", "bin", "sni-agent-aarch64")


def test_the_agent_is_an_elf_executable_without_python():
    out = subprocess.run(["file", BINARY], capture_output=True, text=True, check=True).stdout
    assert "ELF" in out and "executable" in out, out
    libs = subprocess.run(["ldd", BINARY], capture_output=True, text=True).stdout
    assert "libpython" not in libs and "python" not in libs.lower(), libs


@pytest.fixture
def standalone(tmp_path):
    """The binary serving connections one after another (no --once) in a 0700 directory."""
    sock_dir = tmp_path / "sock"
    sock_dir.mkdir(mode=0o700)
    token = os.urandom(32)
    (sock_dir / "token").write_text(token.hex())
    path = str(sock_dir / "agent.sock")
    log = open(tmp_path / "agent.log", "w+")
    proc = subprocess.Popen([BINARY, "--socket", path, "--token-file", str(sock_dir / "token")],
                            stderr=log)
    for _ in range(500):
        if os.path.exists(path):
            break
        time.sleep(0.01)
    yield path, token, proc, log
    proc.terminate()
    proc.wait(10)


def _log(log):
    log.flush()
    log.seek(0)
    return log.read()


def test_socket_is_private_and_a_wrong_token_is_refused(standalone):
    path, token, proc, log = standalone
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    with pytest.raises(AgentError, match="wrong token"):
        ShmHostEndpoint(path, bytes(32))
    assert "wrong token" in _log(log)
    good = ShmHostEndpoint(path, token)  # still serving
    good.send(dict(op="stats"))
    assert good.recv(5.0)["stats"]["tables"] == 0
    good.close()


@pytest.mark.parametrize("bad", [
    b"GARBAGE!" * 4,  # bad magic
    protocol.HEADER.pack(protocol.MAGIC, 9, 6, 0, 0, 0.0, 0, 0),  # future version
    protocol.HEADER.pack(protocol.MAGIC, 1, 2, 0, 0, 0.0, 2 ** 31, 0),  # oversized add_table
    protocol.HEADER.pack(protocol.MAGIC, 1, 3, 0, 0, float("nan"), 8, 0) + (2 ** 40).to_bytes(8, "little"),
    protocol.HEADER.pack(protocol.MAGIC, 1, 2, 0, 0, 0.0, 40, 0)
    + protocol.ADD_FIXED.pack(2 ** 40, 4, 0, 4, 5, 0.2, 0.2),  # rows over the limit
])
def test_a_malformed_message_closes_that_connection_only(standalone, bad):
    path, token, proc, log = standalone
    ep = ShmHostEndpoint(path, token)
    ep.sock.sendall(bad)
    ep.sock.settimeout(10)
    try:  # the agent closed the connection (a reset when our bytes were still unread)
        assert ep.sock.recv(64) == b""
    except ConnectionResetError:
        pass
    ep.close()
    assert "malformed" in _log(log) and proc.poll() is None
    again = ShmHostEndpoint(path, token)
    again.send(dict(op="stats"))
    assert "stats" in again.recv(5.0)
    again.close()


def test_another_user_cannot_reach_the_socket_or_the_rows(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("the permissions test creates a user: run it as root")
    user = "sni-agent-other"
    try:
        pwd.getpwnam(user)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", user],
                       check=True)
    client = spawn_agent()
    try:
        client.add_table(1, 10, 4, np.ones(10, bool), "gated")
        path = client.endpoint.path
        segment = client.endpoint.tables[1].segments["fresh"].name
        probe = ("import socket, sys\n"
                 "from multiprocessing import shared_memory\n"
                 "s = socket.socket(socket.AF_UNIX)\n"
                 "try:\n    s.connect(sys.argv[1]); print('socket: connected')\n"
                 "except PermissionError: print('socket: denied')\n"
                 "try:\n    shared_memory.SharedMemory(name=sys.argv[2]); print('shm: opened')\n"
                 "except PermissionError: print('shm: denied')\n")
        out = subprocess.run(["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", sys.executable,
                              "-c", probe, path, segment], capture_output=True, text=True, cwd="/")
        assert out.stdout.split("\n")[:2] == ["socket: denied", "shm: denied"], out.stdout + out.stderr
        client.observe(1, 0, np.ones((10, 4), np.float32))  # the agent itself was not disturbed
        assert client.stats()["tables"] == 1
    finally:
        client.close()


def _aarch64_command():
    if not shutil.which("qemu-aarch64"):
        pytest.fail("running the aarch64 agent needs qemu-aarch64: install Debian's qemu-user "
                    "(make agent-test-deps)")
    proc = subprocess.run(["make", "-C", ROOT, "agent-aarch64"], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail("building the aarch64 agent failed (install Debian's g++-aarch64-linux-gnu):\n"
                    + proc.stdout + proc.stderr)
    out = subprocess.run(["file", AARCH64], capture_output=True, text=True).stdout
    assert "ARM aarch64" in out and "statically linked" in out, out
    return f"qemu-aarch64 {AARCH64}"


@needs_netns
def test_aarch64_agent_under_qemu_trains_to_the_x86_losses(tmp_path, small_graph_npz):
    command = _aarch64_command()
    common = ("train", "--dataset", small_graph_npz, "--workers", 2, "--layers", 3, "--epochs", 8,
              "--warmup", 2, "--sync-interval", 3, "--predictor", "linear-trend", "--sampling-ratio", 0.3,
              "--dropout", 0, "--quiet", "--agent", "process")
    run_cli(*common, "--metrics", tmp_path / "x86.json")
    run_cli(*common, "--metrics", tmp_path / "arm.json", env=dict(SNI_AGENT_COMMAND=command))
    x86, arm = read_metrics(tmp_path / "x86.json"), read_metrics(tmp_path / "arm.json")
    stale = [e for e in arm["epochs"] if e["mode"] == "stale"]
    assert stale and any(e["predicted_rows"] > 0 for e in stale)
    for a, b in zip(x86["epochs"], arm["epochs"]):
        assert abs(a["loss"] - b["loss"]) <= 1e-6, (a["loss"], b["loss"])
    assert len(x86["epochs"]) == len(arm["epochs"]) == 8
