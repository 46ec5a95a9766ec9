"""A trainer survives its agent: SIGKILL and SIGSTOP mid-run (2 workers, sync interval 5).

Training is stepped epoch by epoch through the epoch gate (FIFOs), so the agent is hit at a
known epoch; the agent command is wrapped to record every agent's pid (the test signals
only those). The run must finish, log the fallback once per lost agent, bring a new agent
up at a later sync (re-seeded there) and reach the test accuracy of an undisturbed run
within 0.01. The same holds for a standalone agent (``dgl-sni agent start`` on the host, then
``--agent-dir``: it maps each trainer's memory through the trainer's own /dev/shm) that is
SIGKILLed and started again with ``dgl-sni agent start``: the trainer re-seeds it at the next
sync. Host-started agents train exactly as the agents a trainer starts itself.
"""
import os
import select
import shlex
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers import ROOT, needs_netns, read_metrics, run_cli
from dpu_agent.binary import agent_command

EPOCHS, KILL_AT = 16, 11  # warm-up 4, interval 5: syncs at 4, 9, 14; the agent is hit before stale epoch 11
COMMON = ("train", "--workers", 2, "--layers", 2, "--epochs", EPOCHS, "--warmup", 4, "--sync-interval", 5,
          "--predictor", "linear-trend", "--sampling-ratio", 0.3, "--agent", "process", "--agent-timeout", 2,
          "--quiet")


def _agent_wrapper(pid_file) -> str:
    """SNI_AGENT_COMMAND: record the agent's pid, then become the agent."""
    binary = shlex.join(agent_command())
    return shlex.join(["sh", "-c", f'echo $$ >> {shlex.quote(str(pid_file))}; exec {binary} "$@"', "sni-agent"])


def _pids(pid_file):
    return [int(x) for x in pid_file.read_text().split()] if pid_file.exists() else []


def _open_gate(gate, proc, deadline):
    """Open the gate's FIFOs once rank 0 has (fails, not hangs, if training dies first)."""
    while True:
        try:
            fd = os.open(gate / "go", os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            assert proc.poll() is None, "training exited before it opened the epoch gate"
            assert time.monotonic() < deadline, "training did not reach the epoch gate"
            time.sleep(0.05)
    os.set_blocking(fd, True)
    return fd, os.open(gate / "done", os.O_RDONLY | os.O_NONBLOCK)


def _gated_run(tmp_path, dataset, name, hit=None, victim=None, after_hit=None, extra=(), wrap=True):
    """Train epoch by epoch; before epoch KILL_AT send ``hit`` to ``victim()`` (default: the first
    agent the wrapper recorded), then call ``after_hit()``. ``extra``: more arguments of ``train``;
    ``wrap``: start agents through the wrapper that records (and at the end kills) them."""
    gate = tmp_path / f"gate-{name}"
    gate.mkdir()
    for fifo in ("go", "done"):
        os.mkfifo(gate / fifo)
    pid_file, log_file = tmp_path / f"{name}.pids", tmp_path / f"{name}.log"
    run_dir = tmp_path / f"run-{name}"
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONWARNINGS="ignore")
    if wrap:
        env["SNI_AGENT_COMMAND"] = _agent_wrapper(pid_file)
    argv = [sys.executable, "-m", "dgl_sni.cli", *map(str, COMMON), "--dataset", str(dataset),
            "--metrics", str(tmp_path / f"{name}.json"), "--epoch-gate", str(gate),
            "--run-dir", str(run_dir), *map(str, extra)]
    with open(log_file, "w") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    hit_pid = None
    try:
        deadline = time.monotonic() + 120
        go, done = _open_gate(gate, proc, deadline)
        for epoch in range(EPOCHS):
            if epoch == KILL_AT and hit is not None:
                hit_pid = victim() if victim is not None else _pids(pid_file)[0]
                os.kill(hit_pid, hit)
                if after_hit is not None:
                    after_hit()
            os.write(go, b".")
            while True:
                ready = select.select([done], [], [], 1.0)[0]
                if ready and os.read(done, 1):
                    break
                assert proc.poll() is None, f"training died at epoch {epoch}:\n{log_file.read_text()[-3000:]}"
                assert time.monotonic() < deadline + 60, f"epoch {epoch} hung:\n{log_file.read_text()[-3000:]}"
        assert proc.wait(timeout=120) == 0, log_file.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _pids(pid_file):  # only agents this test started
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    trainers = "".join(p.read_text() for p in sorted(run_dir.glob("trainer*.log")))
    return read_metrics(tmp_path / f"{name}.json"), trainers, _pids(pid_file), hit_pid


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory, small_graph_npz):
    return _gated_run(tmp_path_factory.mktemp("undisturbed"), small_graph_npz, "undisturbed")[0]


def _check_survived(metrics, log, undisturbed):
    assert log.count("sni agent lost") == 1, log[-3000:]
    assert "sni agent back (generation 1)" in log, log[-3000:]
    modes = [e["mode"] for e in metrics["epochs"]]
    want = [e["mode"] for e in undisturbed["epochs"]]
    assert modes[:KILL_AT] == want[:KILL_AT]
    assert "stale" in modes[KILL_AT + 1:] and modes != want  # forced syncs, then stale again (re-seeded)
    got, ref = ([e["test_acc"] for e in m["epochs"] if "test_acc" in e][-1] for m in (metrics, undisturbed))
    assert abs(got - ref) <= 0.01, (got, ref)


@needs_netns
def test_sigkilled_agent(tmp_path, small_graph_npz, undisturbed):
    metrics, log, pids, _ = _gated_run(tmp_path, small_graph_npz, "kill", signal.SIGKILL)
    _check_survived(metrics, log, undisturbed)
    assert len(pids) == 3  # two agents, and the one that replaced the lost agent


@needs_netns
def test_sigstopped_agent_times_out(tmp_path, small_graph_npz, undisturbed):
    metrics, log, pids, _ = _gated_run(tmp_path, small_graph_npz, "stop", signal.SIGSTOP)
    _check_survived(metrics, log, undisturbed)
    assert len(pids) == 3  # two agents, and the one that replaced the lost agent
    assert "did not answer within 2" in log, log[-3000:]


def _agent_pid(agent_dir, rank):
    return int((agent_dir / f"agent-{rank}.pid").read_text())


def _wait_dead(pid, seconds=10.0):
    """Until ``pid`` has exited (a zombie counts: nobody may have reaped it yet)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except FileNotFoundError:
            return
        assert time.monotonic() < deadline, f"agent {pid} did not die"
        time.sleep(0.02)


@needs_netns
def test_restarted_standalone_agent_is_reseeded(tmp_path, small_graph_npz, undisturbed):
    agent_dir = tmp_path / "agents"
    restarts = []

    def restart():  # `dgl-sni agent start` again, on the host, as a user would
        victim = _agent_pid(agent_dir, 0)
        _wait_dead(victim)
        restarts.append(run_cli("agent", "start", "--dir", agent_dir, "--ranks", 2, timeout=60, check=False))
        assert restarts[-1].returncode == 0, restarts[-1].stdout + restarts[-1].stderr

    try:
        # the agents run on the host; each trainer runs on its emulated machine (its own /dev/shm)
        started = run_cli("agent", "start", "--dir", agent_dir, "--ranks", 2, timeout=60)
        assert started.stdout.count(": started (pid") == 2, started.stdout
        metrics, log, _, hit_pid = _gated_run(
            tmp_path, small_graph_npz, "standalone", signal.SIGKILL, victim=lambda: _agent_pid(agent_dir, 0),
            after_hit=restart, extra=("--agent-dir", agent_dir), wrap=False)
        out = restarts[0].stdout
        assert "agent 0: started" in out and f"replaced the stale pid file of pid {hit_pid}" in out, out
        assert "agent 1: already running" in out, out
        _check_survived(metrics, log, undisturbed)
        # the trainers agreed on stale epoch KILL_AT at the end of the epoch before (the agent was alive):
        # the trainer serves the rows of the last sync there; the epoch after is a forced sync, which
        # re-seeds the new agent, and it serves the stale epoch after that
        assert [e["mode"] for e in metrics["epochs"]][KILL_AT:KILL_AT + 3] == ["stale", "sync", "stale"]
        assert metrics["epochs"][KILL_AT]["workers"][0]["predicted_rows"] == 0
        assert metrics["epochs"][KILL_AT + 2]["workers"][0]["predicted_rows"] > 0
        assert _agent_pid(agent_dir, 0) != hit_pid
        for rank in (0, 1):  # the trainer ended its connection; the agents serve on
            assert (agent_dir / f"agent-{rank}.log").read_text().count("--- dgl-sni agent start") == 2 - rank
        status = run_cli("agent", "status", "--dir", agent_dir)
        assert status.stdout.count("socket accepts the token") == 2, status.stdout
    finally:
        stop = run_cli("agent", "stop", "--dir", agent_dir, check=False)
    assert stop.returncode == 0 and stop.stdout.count(": stopped (pid") == 2, stop.stdout + stop.stderr
    assert sorted(p.name for p in agent_dir.iterdir()) == ["agent-0.log", "agent-1.log", "token"]


@needs_netns
def test_host_started_agents_train_as_child_agents(tmp_path, small_graph_npz):
    """`dgl-sni agent start` on the host, then `train --agent-dir`: the same losses, to the bit, as
    the agents each trainer starts itself (default `--agent process`)."""
    agent_dir = tmp_path / "agents"
    args = ("train", "--workers", 2, "--epochs", 8, "--warmup", 2, "--sync-interval", 3, "--predictor", "cache",
            "--dataset", small_graph_npz, "--quiet")
    child = run_cli(*args, "--metrics", tmp_path / "child.json")
    try:
        run_cli("agent", "start", "--dir", agent_dir, "--ranks", 2, timeout=60)
        run_cli(*args, "--metrics", tmp_path / "host.json", "--agent-dir", agent_dir, "--run-dir", tmp_path / "run")
        trainers = "".join(p.read_text() for p in sorted((tmp_path / "run").glob("trainer*.log")))
        assert "sni agent lost" not in trainers, trainers[-3000:]
    finally:
        stop = run_cli("agent", "stop", "--dir", agent_dir, check=False)
    assert stop.returncode == 0 and stop.stdout.count(": stopped (pid") == 2, stop.stdout + stop.stderr
    ref, got = (read_metrics(tmp_path / f"{name}.json")["epochs"] for name in ("child", "host"))
    assert [e["mode"] for e in got] == [e["mode"] for e in ref] and "stale" in [e["mode"] for e in got]
    assert [e["loss"] for e in got] == [e["loss"] for e in ref], child.stdout


def test_agent_timeout_must_be_positive():
    proc = run_cli("train", "--agent-timeout", 0, "--quiet", "--epochs", 1, check=False)
    assert proc.returncode == 2 and "--agent-timeout must be positive" in proc.stderr
