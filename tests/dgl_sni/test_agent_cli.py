"""``dgl-sni agent``: start/status/stop of standalone agents (the real binary) and deploy (its
dry run, and its real code path against fake ssh/scp that record what they were given)."""
import json
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.helpers import run_cli
from dgl_sni.agent_deploy import (DRY_RUN_STAGE, AgentCliError, DpuHost, deploy_commands, parse_hosts, unit_path,
                                  unit_text)
from dpu_agent.binary import agent_command
from dpu_agent.client import connect_socket

@pytest.fixture
def built_agent():
    """The tests that start real agents fail, saying how to build it, when it is missing."""
    agent_command()


needs_binary = pytest.mark.usefixtures("built_agent")


def _pid(agent_dir, rank):
    return int((agent_dir / f"agent-{rank}.pid").read_text())


def _gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not _gone(pid):
        assert time.monotonic() < deadline, f"pid {pid} still runs"
        time.sleep(0.02)


@pytest.fixture
def agent_dir(tmp_path):
    """DIR for the agents; whatever agent is left in it at the end is killed."""
    path = tmp_path / "agents"
    yield path
    for pid_file in path.glob("agent-*.pid") if path.exists() else ():
        try:
            pid = int(pid_file.read_text())
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if str(path).encode() in fh.read():  # only an agent of this test
                    os.kill(pid, signal.SIGKILL)
        except (OSError, ValueError):
            pass


@needs_binary
def test_start_status_stop_two_agents(agent_dir):
    start = run_cli("agent", "start", "--dir", agent_dir, "--ranks", 2)
    lines = start.stdout.splitlines()
    assert lines[0] == f"wrote a new token {agent_dir}/token (mode 0600)"
    assert [ln.split(" (pid")[0] for ln in lines[1:]] == ["agent 0: started", "agent 1: started"]
    assert stat.S_IMODE(agent_dir.stat().st_mode) == 0o700
    token = agent_dir / "token"
    assert stat.S_IMODE(token.stat().st_mode) == 0o600 and len(bytes.fromhex(token.read_text())) == 32
    secret = token.read_text()
    pids = [_pid(agent_dir, r) for r in (0, 1)]
    for rank in (0, 1):
        assert stat.S_ISSOCK((agent_dir / f"agent-{rank}.sock").stat().st_mode)
        assert os.getsid(pids[rank]) == pids[rank]  # detached: a session of its own

    status = run_cli("agent", "status", "--dir", agent_dir)
    assert status.stdout.splitlines() == [f"agent {r}: running (pid {pids[r]}); socket accepts the token"
                                          for r in (0, 1)]

    # not --once: the agent serves one trainer after another
    for _ in range(2):
        client = connect_socket(str(agent_dir), 1, timeout=5)
        client.add_table(0, 4, 3, np.zeros(4, bool), "cache")
        client.observe(0, 1.0, np.ones((4, 3), np.float32))
        rows, _ = client.result(0, 2.0)
        assert np.array_equal(rows, np.ones((4, 3), np.float32))
        client.close()

    again = run_cli("agent", "start", "--dir", agent_dir, "--ranks", 2)
    assert again.stdout.splitlines() == [
        f"agent {r}: already running (pid {pids[r]}) on {agent_dir}/agent-{r}.sock; left as it is" for r in (0, 1)]
    assert token.read_text() == secret  # kept

    os.kill(pids[0], signal.SIGKILL)
    _wait_gone(pids[0])
    status = run_cli("agent", "status", "--dir", agent_dir, check=False)
    assert status.returncode == 1
    assert status.stdout.splitlines()[0].startswith(
        f"agent 0: dead (stale pid file: pid {pids[0]} is not running this agent); socket down")
    restart = run_cli("agent", "start", "--dir", agent_dir, "--ranks", 2)
    assert f"(replaced the stale pid file of pid {pids[0]})" in restart.stdout.splitlines()[0]
    assert "agent 1: already running" in restart.stdout
    assert _pid(agent_dir, 0) != pids[0] and _pid(agent_dir, 1) == pids[1]
    assert run_cli("agent", "status", "--dir", agent_dir).returncode == 0
    more = run_cli("agent", "status", "--dir", agent_dir, "--ranks", 3, check=False)
    assert more.returncode == 1 and "agent 2: absent (no pid file); socket down" in more.stdout

    new_pids = [_pid(agent_dir, r) for r in (0, 1)]
    stop = run_cli("agent", "stop", "--dir", agent_dir)
    assert stop.stdout.splitlines()[0].startswith(f"agent 0: stopped (pid {new_pids[0]})")
    for pid in new_pids:
        _wait_gone(pid)
    assert sorted(p.name for p in agent_dir.iterdir()) == ["agent-0.log", "agent-1.log", "token"]
    assert (agent_dir / "agent-0.log").read_text().count("--- dgl-sni agent start") == 2  # kept, appended
    status = run_cli("agent", "status", "--dir", agent_dir, check=False)
    assert status.returncode == 1 and status.stdout.count("absent (no pid file)") == 2
    assert run_cli("agent", "stop", "--dir", agent_dir).stdout == f"no agents in {agent_dir}\n"


@needs_binary
def test_stale_pid_file_of_another_process_and_stale_socket(agent_dir, tmp_path):
    agent_dir.mkdir(mode=0o700)
    other = subprocess.Popen(["sleep", "60"])  # alive, but not the agent: never signalled
    try:
        (agent_dir / "agent-0.pid").write_text(f"{other.pid}\n")
        stale = socket.socket(socket.AF_UNIX)
        stale.bind(str(agent_dir / "agent-0.sock"))  # a socket file nobody listens on
        stale.close()
        status = run_cli("agent", "status", "--dir", agent_dir, check=False)
        assert status.returncode == 1
        assert status.stdout.startswith(f"agent 0: dead (stale pid file: pid {other.pid} is not running this agent); "
                                        "socket down:"), status.stdout
        start = run_cli("agent", "start", "--dir", agent_dir, "--ranks", 1)
        assert f"agent 0: started (pid {_pid(agent_dir, 0)})" in start.stdout
        assert f"(replaced the stale pid file of pid {other.pid})" in start.stdout
        assert run_cli("agent", "status", "--dir", agent_dir).returncode == 0
        (agent_dir / "agent-1.pid").write_text(f"{other.pid}\n")
        stop = run_cli("agent", "stop", "--dir", agent_dir)
        assert f"agent 1: was not running (stale pid file of pid {other.pid}); removed agent-1.pid" in stop.stdout
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()


@needs_binary
def test_status_of_a_busy_agent_and_of_a_wrong_token(agent_dir):
    run_cli("agent", "start", "--dir", agent_dir, "--ranks", 1)
    pid = _pid(agent_dir, 0)
    trainer = connect_socket(str(agent_dir), 0, timeout=5)  # the agent serves one trainer at a time
    try:
        status = run_cli("agent", "status", "--dir", agent_dir, "--timeout", 0.5)
        assert status.stdout == (f"agent 0: running (pid {pid}); socket busy: it listens but did not answer "
                                 "within 0.5 s (serving a trainer?)\n")
    finally:
        trainer.close()
    token = agent_dir / "token"
    token.write_text("cd" * 32)  # not the token the agent read at its start
    status = run_cli("agent", "status", "--dir", agent_dir, check=False)
    assert status.returncode == 1 and "socket refused:" in status.stdout and "wrong token" in status.stdout
    run_cli("agent", "stop", "--dir", agent_dir)


@needs_binary
def test_stop_kills_an_agent_that_ignores_sigterm(agent_dir):
    run_cli("agent", "start", "--dir", agent_dir, "--ranks", 1)
    pid = _pid(agent_dir, 0)
    os.kill(pid, signal.SIGSTOP)  # SIGTERM stays pending
    stop = run_cli("agent", "stop", "--dir", agent_dir, "--grace", 0.3)
    assert stop.stdout.startswith(f"agent 0: killed (no exit within 0.3 s of SIGTERM) (pid {pid})"), stop.stdout
    _wait_gone(pid)
    assert sorted(p.name for p in agent_dir.iterdir()) == ["agent-0.log", "token"]


@needs_binary
def test_start_refuses_a_folder_open_to_others(agent_dir):
    agent_dir.mkdir()
    os.chmod(agent_dir, 0o755)
    proc = run_cli("agent", "start", "--dir", agent_dir, "--ranks", 2, check=False)
    assert proc.returncode == 2
    assert f"agent folder {agent_dir} has mode 0755, open to group or others" in proc.stderr
    assert "it must be 0700" in proc.stderr
    assert list(agent_dir.iterdir()) == []  # no token written, nothing started


def test_start_refuses_another_users_folder(agent_dir):
    if os.geteuid() != 0:  # as the permissions test of the agent binary: no silent skip
        pytest.fail("this test gives a folder to another user: run it as root")
    agent_dir.mkdir(mode=0o700)
    os.chown(agent_dir, 65534, 65534)
    proc = run_cli("agent", "start", "--dir", agent_dir, "--ranks", 1, check=False)
    assert proc.returncode == 2 and "belongs to uid 65534, not to you" in proc.stderr


def test_start_refuses_an_open_token(agent_dir):
    agent_dir.mkdir(mode=0o700)
    (agent_dir / "token").write_text("ab" * 32)
    os.chmod(agent_dir / "token", 0o644)
    proc = run_cli("agent", "start", "--dir", agent_dir, "--ranks", 1, "--binary", "/bin/true", check=False)
    assert proc.returncode == 2 and "must be yours with mode 0600 (it has 0644" in proc.stderr


def test_start_reports_an_agent_that_exits(agent_dir, tmp_path):
    fake = tmp_path / "broken-agent"
    fake.write_text("#!/bin/sh\necho 'sni-agent: error: no luck' >&2\nexit 3\n")
    fake.chmod(0o755)
    proc = run_cli("agent", "start", "--dir", agent_dir, "--ranks", 1, "--binary", fake, check=False)
    assert proc.returncode == 1
    assert "agent 0: failed: agent 0 exited with code 3 before it listened" in proc.stderr
    assert "sni-agent: error: no luck" in proc.stderr  # the log's tail
    assert not (agent_dir / "agent-0.pid").exists()


def test_status_of_a_missing_folder(tmp_path):
    proc = run_cli("agent", "status", "--dir", tmp_path / "none", check=False)
    assert proc.returncode == 1 and proc.stdout == f"no agent folder {tmp_path / 'none'}\n"


# ----------------------------------------------------------------------------- deploy

HOSTS = """# two BlueFields
dpu-a 0000:03:00.0 sni-a    # PCI and name given
dpu-b                       # PCI from --pci, default name

"""
INSTALL = ("sudo install -D -m 0755 sni-agent.new /opt/sni/sni-agent && "
           "sudo install -D -m 0644 sni-agent.service.new /etc/systemd/system/sni-agent.service && "
           "rm -f sni-agent.new sni-agent.service.new")
START = "sudo systemctl daemon-reload && sudo systemctl enable sni-agent && sudo systemctl restart sni-agent"


def _aarch64_binary(path):
    """An ELF header that says aarch64 (EM_AARCH64 = 183), enough for deploy's check."""
    path.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(11) + (183).to_bytes(2, "little") + bytes(44))
    return path


def _fake_tools(tmp_path, fail_on=None):
    """A PATH folder with ``ssh`` and ``scp`` that append their argv (JSON) to calls.jsonl and
    copy what scp sends into sent/; the one whose argv holds ``fail_on`` exits 3."""
    bin_dir, sent = tmp_path / "fakebin", tmp_path / "sent"
    bin_dir.mkdir()
    sent.mkdir()
    script = f"""#!{sys.executable}
import json, os, shutil, sys
argv = [os.path.basename(sys.argv[0]), *sys.argv[1:]]
with open({str(tmp_path / 'calls.jsonl')!r}, "a") as fh:
    fh.write(json.dumps(argv) + "\\n")
if argv[0] == "scp":
    shutil.copy(argv[-2], os.path.join({str(sent)!r}, argv[-1].replace(":", "_")))
if {fail_on!r} is not None and {fail_on!r} in " ".join(argv):
    print("fake " + argv[0] + ": connection refused", file=sys.stderr)
    sys.exit(3)
"""
    for tool in ("ssh", "scp"):
        (bin_dir / tool).write_text(script)
        (bin_dir / tool).chmod(0o755)
    return dict(PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}")


def _calls(tmp_path):
    path = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _expected(binary, stage, user=None, port=None):
    a, b = DpuHost("dpu-a", "0000:03:00.0", "sni-a", 2), DpuHost("dpu-b", "03:00.1", "sni-agent", 3)
    return [argv for _, argv in deploy_commands([a, b], str(binary), stage, user, port, "/opt/sni")], (a, b)


def test_deploy_commands_exactly():
    dpu = DpuHost("dpu-a", "03:00.0", "sni-a", 1)
    assert [argv for _, argv in deploy_commands([dpu], "/b/sni-agent-aarch64", "/stage", "ubuntu", 2222,
                                                "/opt/sni")] == [
        ["scp", "-P", "2222", "/b/sni-agent-aarch64", "ubuntu@dpu-a:sni-agent.new"],
        ["scp", "-P", "2222", "/stage/sni-agent-dpu-a.service", "ubuntu@dpu-a:sni-agent.service.new"],
        ["ssh", "-p", "2222", "ubuntu@dpu-a", INSTALL],
        ["ssh", "-p", "2222", "ubuntu@dpu-a", START],
    ]
    unit = unit_text(dpu, "/opt/sni").splitlines()
    assert unit[:6] == ["[Unit]", "Description=dgl-sni agent (sni-agent) on the BlueField at 03:00.0",
                        "After=network-online.target", "Wants=network-online.target", "", "[Service]"]
    assert "ExecStart=/opt/sni/sni-agent --doca --pci 03:00.0 --name sni-a" in unit
    assert unit[-3:] == ["", "[Install]", "WantedBy=multi-user.target"]


def _service(unit: list) -> dict:
    out = {}
    for line in unit[unit.index("[Service]") + 1: unit.index("[Install]")]:
        if line:
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_the_unit_runs_the_agent_with_least_privilege():
    service = _service(unit_text(DpuHost("dpu-a", "03:00.0", "sni-a", 1), "/opt/sni").splitlines())
    for key, value in (("NoNewPrivileges", "yes"), ("ProtectSystem", "strict"), ("ProtectHome", "yes"),
                       ("PrivateTmp", "yes"), ("DynamicUser", "yes"), ("DevicePolicy", "closed")):
        assert service[key] == [value], key
    # one capability, bounded and ambient: pinning the DMA-registered tables' pages
    assert service["CapabilityBoundingSet"] == service["AmbientCapabilities"] == ["CAP_IPC_LOCK"]
    assert service["DeviceAllow"] == ["char-infiniband_verbs rw"]  # the RDMA verbs devices only
    assert "User" not in service and "ReadWritePaths" not in service  # no fixed user, nothing written


def test_systemd_accepts_the_unit_and_rates_its_exposure_low(tmp_path):
    assert shutil.which("systemd-analyze"), "systemd-analyze is missing: `make agent-test-deps` installs systemd"
    agent = tmp_path / "opt" / "sni-agent"
    agent.parent.mkdir()
    agent.write_text("#!/bin/sh\n")
    agent.chmod(0o755)
    unit = tmp_path / "sni-agent.service"
    unit.write_text(unit_text(DpuHost("dpu-a", "03:00.0", "sni-a", 1), str(agent.parent)))
    verify = subprocess.run(["systemd-analyze", "verify", str(unit)], capture_output=True, text=True)
    assert verify.returncode == 0 and not verify.stderr.strip(), verify.stderr
    security = subprocess.run(["systemd-analyze", "security", "--offline=true", str(unit)], capture_output=True,
                              text=True)
    found = re.search(r"Overall exposure level for \S+: ([0-9.]+)", security.stdout)
    assert security.returncode == 0 and found, security.stdout + security.stderr
    assert float(found.group(1)) <= 2.0  # "OK"; a unit without the hardening rates 9.6 ("UNSAFE")


def test_deploy_dry_run_prints_everything_and_runs_nothing(tmp_path):
    binary = _aarch64_binary(tmp_path / "sni-agent-aarch64")
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    env = _fake_tools(tmp_path)
    proc = run_cli("agent", "deploy", "--hosts", hosts, "--dry-run", "--binary", binary, "--pci", "03:00.1",
                   "--remote-dir", "/opt/sni", env=env)
    commands, (a, b) = _expected(binary, DRY_RUN_STAGE)
    out = proc.stdout.splitlines()
    assert [ln for ln in out if not ln.startswith("#")] == [shlex.join(argv) for argv in commands]
    assert out[0] == "# dry run: nothing is run; unit files are written to a temporary folder, STAGE below"
    for dpu in (a, b):
        header = out.index(f"# {unit_path(DRY_RUN_STAGE, dpu)} ({dpu.host}, line {dpu.line}):")
        unit = unit_text(dpu, "/opt/sni").splitlines()
        assert out[header + 1: header + 1 + len(unit)] == [f"#   {ln}".rstrip() for ln in unit]
    assert "ExecStart=/opt/sni/sni-agent --doca --pci 03:00.1 --name sni-agent" in proc.stdout
    assert "ExecStart=/opt/sni/sni-agent --doca --pci 0000:03:00.0 --name sni-a" in proc.stdout
    assert "Restart=on-failure" in proc.stdout
    assert _calls(tmp_path) == []  # the fake ssh/scp were never run


def test_deploy_runs_ssh_and_scp(tmp_path):
    binary = _aarch64_binary(tmp_path / "sni-agent-aarch64")
    hosts = tmp_path / "hosts"
    hosts.write_text(HOSTS)
    proc = run_cli("agent", "deploy", "--hosts", hosts, "--binary", binary, "--pci", "03:00.1",
                   "--remote-dir", "/opt/sni", "--user", "ubuntu", "--ssh-port", 2222, env=_fake_tools(tmp_path))
    calls = _calls(tmp_path)
    stage = os.path.dirname(calls[1][-2])  # the temporary folder of the unit files
    commands, (a, b) = _expected(binary, stage, "ubuntu", 2222)
    assert calls == commands
    assert not os.path.exists(stage)  # removed after
    sent = tmp_path / "sent"
    assert (sent / "ubuntu@dpu-a_sni-agent.service.new").read_text() == unit_text(a, "/opt/sni")
    assert (sent / "ubuntu@dpu-b_sni-agent.service.new").read_text() == unit_text(b, "/opt/sni")
    assert (sent / "ubuntu@dpu-b_sni-agent.new").read_bytes() == binary.read_bytes()
    assert [ln for ln in proc.stdout.splitlines() if ln.startswith("+ ")] == [
        "+ " + shlex.join(argv) for argv in commands]
    assert "dpu-b: sni-agent installed in /opt/sni and started (--doca --pci 03:00.1 --name sni-agent)" in proc.stdout


def test_deploy_stops_at_the_first_failure(tmp_path):
    binary = _aarch64_binary(tmp_path / "sni-agent-aarch64")
    hosts = tmp_path / "hosts"
    hosts.write_text("dpu-a 03:00.0\ndpu-b 03:00.0\ndpu-c 03:00.0\n")
    proc = run_cli("agent", "deploy", "--hosts", hosts, "--binary", binary,
                   env=_fake_tools(tmp_path, fail_on="dpu-b:sni-agent.service.new"), check=False)
    assert proc.returncode == 1
    calls = _calls(tmp_path)
    assert len(calls) == 4 + 2 and calls[-1][-1] == "dpu-b:sni-agent.service.new"  # nothing after it ran
    assert (f"deploy to dpu-b (hosts file line 2) failed: `scp {calls[-1][1]} dpu-b:sni-agent.service.new` "
            "exited with code 3; deployed: dpu-a; not touched: dpu-c") in proc.stderr
    assert "fake scp: connection refused" in proc.stderr


@pytest.mark.parametrize("text, message", [
    ("dpu-a 03:00.0 name extra\n", "line 1: expected 'HOST [PCI [NAME]]', got 4 fields"),
    ("# c\n\ndpu-a 3:0.0\n", "line 3: '3:0.0' is not a PCI address"),
    ("dpu-a 03:00.0\ndpu-b\n", "line 2: no PCI address for dpu-b: give it on the line (HOST PCI) or with --pci"),
    ("dpu-a 03:00.0\ndpu-a 04:00.0\n", "line 2: dpu-a is listed already on line 1"),
    ("dpu;rm 03:00.0\n", "line 1: 'dpu;rm' is not a host name or address"),
    ("dpu-a 03:00.0 na$me\n", "line 1: agent name 'na$me' may hold only"),
    ("# nothing\n", "lists no host"),
])
def test_deploy_hosts_file_errors(tmp_path, text, message):
    with pytest.raises(AgentCliError, match=re.escape(message)):
        parse_hosts(text, "hosts")
    hosts = tmp_path / "hosts"
    hosts.write_text(text)
    proc = run_cli("agent", "deploy", "--hosts", hosts, "--dry-run", check=False)
    assert proc.returncode == 2 and f"{hosts}" in proc.stderr and message in proc.stderr, proc.stderr


def test_deploy_binary_errors(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text("dpu-a 03:00.0\n")
    proc = run_cli("agent", "deploy", "--hosts", hosts, "--binary", tmp_path / "missing", check=False)
    assert proc.returncode == 2 and "build it with `make agent-aarch64`" in proc.stderr
    host_binary = tmp_path / "x86"
    host_binary.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(11) + (62).to_bytes(2, "little") + bytes(44))
    proc = run_cli("agent", "deploy", "--hosts", hosts, "--binary", host_binary, check=False)
    assert proc.returncode == 2 and "is not an aarch64 ELF executable" in proc.stderr
    dry = run_cli("agent", "deploy", "--hosts", hosts, "--binary", tmp_path / "missing", "--dry-run")
    assert dry.stdout.startswith("# warning: no aarch64 agent binary")  # a dry run still shows the plan
    proc = run_cli("agent", "deploy", "--hosts", tmp_path / "nohosts", check=False)
    assert proc.returncode == 2 and "cannot read the hosts file" in proc.stderr
    proc = run_cli("agent", "deploy", "--hosts", hosts, "--remote-dir", "opt/x y", "--dry-run", check=False)
    assert proc.returncode == 2 and "--remote-dir 'opt/x y' must be an absolute path" in proc.stderr
