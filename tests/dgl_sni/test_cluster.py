"""The emulated cluster: bad input, crashes, Ctrl-C, shaping, and stock DistDGL scripts."""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from dgl_sni.cluster import ClusterError, LocalCluster
from dgl_sni.data import load_npz
from dgl_sni.partition import load_orig_nids, partition

from tests.helpers import ROOT, leftover_namespaces, needs_netns, read_metrics, run_cli


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[-1].split()[0] != "Z"


def _start_long_run(tmp_path, npz):
    run_dir = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "dgl_sni.cli", "train", "--dataset", npz, "--workers", "2",
         "--epochs", "100000", "--quiet", "--run-dir", str(run_dir)],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
        # as from a terminal: a suite started in the background (``make test &``) inherits
        # SIGINT ignored, and the launcher would rightly keep ignoring it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    progress = run_dir / "progress.jsonl"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if progress.exists() and '"event": "epoch"' in progress.read_text():
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    else:
        proc.kill()
        pytest.fail("the run never reached its first epoch")
    pids = json.loads((run_dir / "pids.json").read_text())
    return proc, pids


def _assert_cleaned_up(proc, pids):
    assert not [n for n in leftover_namespaces() if n.startswith(f"sni{proc.pid}")]
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids.values()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [name for name, p in pids.items() if _alive(p)]


@needs_netns
def test_killed_worker_ends_the_run_and_cleans_up(tmp_path, small_graph_npz):
    proc, pids = _start_long_run(tmp_path, small_graph_npz)
    os.kill(pids["trainer 1"], signal.SIGKILL)
    try:
        _, err = proc.communicate(timeout=60)  # bounded: no hang on the dead peer
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("the run hung after a worker died")
    assert proc.returncode != 0
    assert "trainer 1 was killed by signal 9" in err
    _assert_cleaned_up(proc, pids)


@needs_netns
def test_ctrl_c_tears_everything_down(tmp_path, small_graph_npz):
    proc, pids = _start_long_run(tmp_path, small_graph_npz)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=90)  # bounded, also on a loaded machine
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        alive = [name for name, p in pids.items() if _alive(p)]
        for pid in pids.values():  # the launcher is gone: do not leave its cluster running
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        run_cli("cleanup", check=False)
        pytest.fail(f"no exit within 90 s of Ctrl-C; still alive: {alive}; launcher said: {err[-2000:]}")
    assert proc.returncode == 130 and "interrupted" in err
    _assert_cleaned_up(proc, pids)


def test_port_in_use_is_reported(small_graph_npz):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = run_cli("train", "--dataset", small_graph_npz, "--workers", 1, "--cluster", "loopback",
                       "--port", port, "--epochs", 1, "--quiet", check=False)
    assert proc.returncode == 2
    assert f"DGL server port {port} on 127.0.0.1 is already in use" in proc.stderr


@pytest.mark.parametrize("args, message", [
    (("--dataset", "nosuchgraph"), "unknown dataset 'nosuchgraph'"),
    (("--workers", 0), "--workers must be at least 1"),
    (("--bandwidth", "fast"), "--bandwidth 'fast' is not a tc rate"),
    (("--port", 4000, "--master-port", 4000), "--port and --master-port are both 4000"),
    (("--dropout", 1.0), "--dropout must lie in [0, 1)"),
])
def test_bad_arguments(args, message):
    proc = run_cli("train", "--quiet", "--epochs", 1, *args, check=False)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_outputs_a_run_could_not_write_are_refused_before_it_starts(tmp_path):
    """A bad --metrics, --checkpoint-dir or --storage-tier fails at once, naming the flag: not
    after training (when the metrics are written) nor in a worker; the kept run folder shows
    that nothing started. ``partition --out`` likewise, before the graph is partitioned."""
    a_file = tmp_path / "a_file"
    a_file.write_text("kept")
    sweep = tmp_path / "sweep.json"
    sweep.write_text('[{"lr": 0.02}]')
    cases = [(("--metrics", a_file / "m.json"), f"--metrics {a_file}/m.json: {a_file} is a file"),
             (("--metrics", tmp_path), f"--metrics {tmp_path} is a folder; give a file name"),
             (("--checkpoint-dir", a_file), f"--checkpoint-dir {a_file} is a file; give a folder"),
             (("--storage-tier", "/proc/dgl-sni-tier"), "--storage-tier /proc/dgl-sni-tier: cannot write under /proc"),
             (("--sweep", sweep, "--metrics", a_file), f"--metrics {a_file} is a file; give a folder")]
    for args, message in cases:
        run_dir = tmp_path / "run"
        proc = run_cli("train", "--quiet", "--epochs", 1, "--run-dir", run_dir, *args, check=False)
        assert proc.returncode == 2 and message in proc.stderr, (args, proc.stderr)
        assert not run_dir.exists()
    proc = run_cli("partition", "--parts", 2, "--out", a_file / "parts", check=False)
    assert proc.returncode == 2 and f"--out {a_file}/parts: {a_file} is a file" in proc.stderr, proc.stderr
    assert a_file.read_text() == "kept" and sorted(p.name for p in tmp_path.iterdir()) == ["a_file", "sweep.json"]


def test_metrics_that_cannot_be_written_at_the_end_are_kept_elsewhere(tmp_path):
    from dgl_sni.metrics import write_metrics
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    with pytest.raises(OSError, match=f"cannot write the metrics to {blocked}/m.json") as err:
        write_metrics(str(blocked / "m.json"), {"lr": 0.01}, [{"epoch": 0, "loss": 1.5}], {"epochs": 1})
    kept = str(err.value).rsplit("written to ", 1)[1]
    try:
        assert read_metrics(kept) == dict(config={"lr": 0.01}, epochs=[{"epoch": 0, "loss": 1.5}],
                                          summary={"epochs": 1})
    finally:
        os.remove(kept)


def test_more_workers_than_nodes(tmp_path):
    path = tmp_path / "tiny.npz"
    np.savez(path, src=np.array([0, 1]), dst=np.array([1, 0]), features=np.ones((3, 2), np.float32),
             labels=np.array([0, 1, 0]), train_idx=np.array([0]), val_idx=np.array([1]),
             test_idx=np.array([2]))
    proc = run_cli("train", "--dataset", path, "--workers", 4, "--quiet", check=False)
    assert proc.returncode == 2 and "--workers 4 exceeds the 3 nodes" in proc.stderr


def test_malformed_npz_through_the_cli(tmp_path):
    path = tmp_path / "m.npz"
    np.savez(path, src=np.array([0]), dst=np.array([1]))
    proc = run_cli("train", "--dataset", path, "--quiet", check=False)
    assert proc.returncode == 2 and "lacks required array(s) features, labels" in proc.stderr


@needs_netns
def test_links_are_shaped_and_namespaces_private(tmp_path):
    with LocalCluster(2, str(tmp_path), bandwidth="10mbit") as cluster:
        for m in cluster.machines:
            out = subprocess.run(["ip", "netns", "exec", m.netns, "tc", "qdisc", "show", "dev", "eth0"],
                                 capture_output=True, text=True).stdout
            assert "tbf" in out and "10Mbit" in out
            addr = subprocess.run(["ip", "-n", m.netns, "-4", "addr", "show", "eth0"],
                                  capture_output=True, text=True).stdout
            assert m.ip in addr
        # each machine has its own /dev/shm: a file made in one is invisible in the other
        marker = "sni-test-marker"
        a, b = cluster.machines
        subprocess.run(["nsenter", "-t", str(a.holder.pid), "-m", "touch", f"/dev/shm/{marker}"], check=True)
        seen_b = subprocess.run(["nsenter", "-t", str(b.holder.pid), "-m", "ls", "/dev/shm"],
                                capture_output=True, text=True).stdout
        assert marker not in seen_b and not os.path.exists(f"/dev/shm/{marker}")
        names = [m.netns for m in cluster.machines]
    assert not set(names) & set(leftover_namespaces())


def test_loopback_refuses_several_machines(tmp_path):
    with pytest.raises(ClusterError, match="loopback mode runs one machine only"):
        LocalCluster(2, str(tmp_path), mode="loopback")


@needs_netns
def test_launch_runs_a_stock_distdgl_script(tmp_path, small_graph_npz):
    data = load_npz(small_graph_npz)
    config = partition(data, 2, str(tmp_path / "parts"), method="metis", graph_name="graph")
    out = tmp_path / "out"
    out.mkdir()
    script = os.path.join(ROOT, "tests", "scripts", "stock_dist_script.py")
    run_cli("launch", "--workers", 2, "--part-config", config, "--", sys.executable, script,
            "--ip_config", "{ip_config}", "--part_config", "{part_config}", "--out", out)
    orig = load_orig_nids(config)
    total = 0.0
    for rank in (0, 1):
        seen = json.loads((out / f"rank{rank}.json").read_text())
        halo = np.array(seen["halo"], dtype=np.int64)
        assert halo.size > 0
        rows = data.features[orig[halo]]
        assert seen["feature_sum"] == pytest.approx(float(rows.sum()), rel=1e-5)
        total += float(rows[:, :4].sum())
    for epoch, value in enumerate(seen["epoch_sums"]):
        assert value == pytest.approx(total * (epoch + 1), rel=1e-5)


def test_launch_checks_its_arguments(tmp_path):
    proc = run_cli("launch", "--workers", 2, "--part-config", tmp_path / "none.json", "--",
                   "python3", "x.py", check=False)
    assert proc.returncode == 2 and "does not exist" in proc.stderr


def test_a_listening_port_is_seen_in_proc_without_connecting(tmp_path):
    """The gate trainers of ``dgl-sni train`` wait for reads each server's listening socket from
    ``/proc/PID/net/tcp``: a bound but not listening port, another port and a gone process do
    not count (the last is unknowable: ``None``)."""
    from dgl_sni.cluster import listening
    from dgl_sni.worker import _wait_for_servers

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        assert listening(os.getpid(), port) is False  # bound only
        sock.listen(1)
        assert listening(os.getpid(), port) is True
        assert listening(os.getpid(), port + 1 if port < 65535 else port - 1) is False
    assert listening(os.getpid(), port) is False
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert listening(gone.pid, port) is None
    ready = tmp_path / "servers-ready"
    assert _wait_for_servers(str(ready), poll_s=0.01, limit_s=0.05) is False  # gives up, connects anyway
    ready.write_text("")
    assert _wait_for_servers(str(ready), limit_s=0.05) is True and _wait_for_servers(None) is True


def test_records_gathered_in_batches_merge_epoch_by_epoch():
    from dgl_sni.progress import EPOCH_EVENT
    from dgl_sni.worker import WorkerSession

    class TwoWorkers:  # the other worker's records: twice the bytes, 10 ms slower
        def all_gather_object(self, records):
            other = [dict(r, bytes_sent=2 * r["bytes_sent"], time_s=r["time_s"] + 0.01) for r in records]
            return [records, other]

    session = WorkerSession.__new__(WorkerSession)
    session.collective = TwoWorkers()
    records = [dict(epoch=e, mode="sync", loss=1.0 / (e + 1), bytes_sent=100 * (e + 1), time_s=0.1 * (e + 1))
               for e in range(3)]
    merged = session._merge(records)
    assert [m["epoch"] for m in merged] == [0, 1, 2]
    assert [m["bytes_sent"] for m in merged] == [300, 600, 900]  # summed over workers, per epoch
    assert [round(m["time_s"], 6) for m in merged] == [0.11, 0.21, 0.31]  # the slowest worker's
    assert [m["loss"] for m in merged] == [1.0, 0.5, 1.0 / 3]
    assert session._merge([]) == []
    assert "bytes_sent" not in EPOCH_EVENT and {"loss", "mode", "val_acc"} <= set(EPOCH_EVENT)


def test_staleness_means_are_merged_over_workers_and_per_layer():
    from dgl_sni.metrics import merge_epoch
    workers = [dict(epoch=3, mode="stale", stale_l2_sum=2.0, stale_l2_n=4, l1_stale_l2_sum=2.0, l1_stale_l2_n=4,
                    l1_true_l2_sum=8.0, l2_grad_err_sum=1.0, l2_grad_true_sum=4.0, l2_grad_n=2),
               dict(epoch=3, mode="stale", stale_l2_sum=4.0, stale_l2_n=4, l1_stale_l2_sum=4.0, l1_stale_l2_n=4,
                    l1_true_l2_sum=8.0, l2_grad_err_sum=3.0, l2_grad_true_sum=4.0, l2_grad_n=2)]
    merged = merge_epoch(workers)
    assert merged["staleness_l2"] == merged["l1_staleness_l2"] == 0.75  # 6 over 8 rows
    assert merged["l1_true_l2"] == 2.0 and merged["l2_grad_err_l2"] == 1.0 and merged["l2_grad_true_l2"] == 2.0
    assert not any(k.endswith(("_sum", "_n")) for k in merged)
