"""A stopped run resumes from its last checkpoint (``--resume DIR``).

A run killed at epoch k and resumed must give the losses of an unbroken run (sync interval 1,
dropout 0.5: the dropout masks are keyed by the optimisation step, which the checkpoint
restores with the weights and Adam's state). The killed run is stepped through the epoch gate
(FIFOs), so the SIGKILL lands at a known point: after epoch 2's checkpoint, while rank 0 waits
to start epoch 3. With prediction on, the first resumed epoch must sync (the new agent's
tables are empty until a sync seeds them), also where the schedule says stale.

The unit tests (no cluster) call the loader directly: single-process resumes of both trainers,
and the error messages.
"""
import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest
import torch

from tests.helpers import ROOT, needs_netns, read_metrics, run_cli
from dgl_sni.config import TrainConfig
from dgl_sni.config.output import find_checkpoint
from dgl_sni.data import synthetic
from dgl_sni.reference import whole_graph_view
from dgl_sni.trainers import FullGraphTrainer, ModelConfig
from dgl_sni.config.output import resume_point
from dgl_sni.trainers.base import read_checkpoint

EXACT = 1e-6
EPOCHS, KILL_AFTER = 6, 2
COMMON = ("train", "--workers", 2, "--model", "gcn", "--layers", 3, "--hidden", 16, "--dropout", 0.5,
          "--lr", 0.01, "--seed", 0, "--sync-interval", 1, "--quiet")


# ----------------------------------------------------------------------------- unit level

@pytest.fixture(scope="module")
def graph():
    return synthetic(num_nodes=300, avg_degree=6, num_classes=4, feat_dim=10, seed=5)


def _cfg(**kw):
    return ModelConfig(**dict(dict(model="gcn", layers=3, hidden=16, dropout=0.5, seed=2), **kw))


def _trainer(graph, **kw):
    cfg = _cfg(**kw)
    return FullGraphTrainer(cfg, whole_graph_view(graph, cfg.model), graph.feat_dim, graph.num_classes)


def _train(trainer, epochs, ckpt_dir=None):
    losses = {}
    for epoch in epochs:
        losses[epoch] = trainer.train_epoch(epoch)["loss"]
        if ckpt_dir is not None:
            trainer.save_checkpoint(os.path.join(ckpt_dir, f"epoch_{epoch}.pt"), epoch)
    return losses


def _same_weights(a: dict, b: dict):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def test_single_process_resume_is_bit_identical(graph, tmp_path):
    unbroken = _trainer(graph)
    want = _train(unbroken, range(6), str(tmp_path))
    assert resume_point(str(tmp_path), 7) == (str(tmp_path / "epoch_5.pt"), 5)
    resumed = _trainer(graph)
    assert resumed.load_checkpoint(str(tmp_path / "epoch_2.pt")) == 2
    assert (resumed.step, resumed.epoch_step) == (3, 2)
    got = _train(resumed, range(3, 6))
    assert got == {e: want[e] for e in range(3, 6)}  # bit for bit: same masks, same Adam state
    _same_weights(resumed.state(), unbroken.state())
    assert resumed.evaluate() == unbroken.evaluate()


def test_resumed_run_keeps_its_own_optimiser_settings(graph, tmp_path):
    t = _trainer(graph)
    _train(t, range(2), str(tmp_path))
    other = _trainer(graph, lr=0.05)
    other.load_checkpoint(str(tmp_path / "epoch_1.pt"))
    assert other.optimizer.param_groups[0]["lr"] == 0.05
    assert other.optimizer.state_dict()["state"][0]["step"] == 2  # Adam's own step came back


def test_tier_trainer_resumes_too(graph, tmp_path):
    from dgl_sni.trainers.tier import TierTrainer
    cfg = _cfg(layers=2, hidden=8)
    kw = dict(num_subparts=4, storage_dir=str(tmp_path / "st"), host_cache_budget=3 * 4096)
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    with TierTrainer.from_graph(cfg, graph, **kw) as unbroken:
        want = _train(unbroken, range(4), str(ckpt))
        final = unbroken.state()
    with TierTrainer.from_graph(cfg, graph, **kw) as resumed:
        path, epoch = resume_point(str(ckpt), 5)
        assert epoch == 3
        resumed.load_checkpoint(str(ckpt / "epoch_1.pt"))
        assert resumed.step == 2
        got = _train(resumed, range(2, 4))
        for e in (2, 3):
            assert abs(got[e] - want[e]) <= EXACT, (e, got[e], want[e])
        for name, value in resumed.state().items():
            assert (value - final[name]).abs().max().item() <= EXACT, name


def test_newest_checkpoint_is_by_epoch_not_by_file_time(graph, tmp_path):
    t = _trainer(graph)
    for epoch in (10, 2, 9):  # epoch_9 written last, epoch_2 sorts after epoch_10 as text
        t.save_checkpoint(str(tmp_path / f"epoch_{epoch}.pt"), epoch)
        time.sleep(0.01)
    (tmp_path / "epoch_11.pt.tmp").write_bytes(b"half")  # a write cut short: not a checkpoint
    (tmp_path / "notes.txt").write_text("x")
    assert find_checkpoint(str(tmp_path)) == (str(tmp_path / "epoch_10.pt"), 10)


def test_errors_name_the_problem(graph, tmp_path):
    with pytest.raises(ValueError, match="no such folder"):
        find_checkpoint(str(tmp_path / "nowhere"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a folder"):
        find_checkpoint(str(tmp_path / "file"))
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "epoch_3.pt.tmp").write_bytes(b"")
    with pytest.raises(ValueError, match=r"holds no checkpoint \(epoch_N.pt\)"):
        resume_point(str(empty), 10)

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    t = _trainer(graph)
    _train(t, range(3), str(ckpt))
    with pytest.raises(ValueError, match="newest checkpoint epoch_2.pt is of epoch 2, and --epochs 3 ends "
                                         "at epoch 2: nothing to resume"):
        resume_point(str(ckpt), 3)
    assert resume_point(str(ckpt), 4) == (str(ckpt / "epoch_2.pt"), 2)

    with pytest.raises(ValueError, match=r"different model: .*layers\.0\..* is \[10, 16\] in the checkpoint, "
                                         r"\[10, 8\] in this run.*--hidden 16 in the checkpoint, 8 in this run"):
        _trainer(graph, hidden=8).load_checkpoint(str(ckpt / "epoch_2.pt"))
    with pytest.raises(ValueError, match=r"different model: missing from the checkpoint: layers\.3\..*"
                                         r"--layers 3 in the checkpoint, 4 in this run"):
        _trainer(graph, layers=4).load_checkpoint(str(ckpt / "epoch_2.pt"))

    (tmp_path / "epoch_0.pt").write_bytes(b"not a torch file")
    with pytest.raises(ValueError, match="epoch_0.pt cannot be read"):
        read_checkpoint(str(tmp_path / "epoch_0.pt"))
    torch.save(dict(weights=1), tmp_path / "epoch_1.pt")
    with pytest.raises(ValueError, match="is not a dgl-sni checkpoint"):
        read_checkpoint(str(tmp_path / "epoch_1.pt"))
    torch.save(dict(format=99, epoch=0, model={}, optimizer={}), tmp_path / "epoch_2.pt")
    with pytest.raises(ValueError, match="format 99, newer than"):
        read_checkpoint(str(tmp_path / "epoch_2.pt"))


def test_checkpoints_of_the_old_format_still_load(graph, tmp_path):
    t = _trainer(graph)
    want = _train(t, range(4))
    old = _trainer(graph)
    _train(old, range(2))
    torch.save(dict(epoch=1, model=old.model.state_dict(), optimizer=old.optimizer.state_dict()),
               tmp_path / "epoch_1.pt")  # what save_checkpoint wrote before --resume existed
    resumed = _trainer(graph)
    assert resumed.load_checkpoint(str(tmp_path / "epoch_1.pt")) == 1
    assert resumed.step == 2  # one optimisation step per epoch
    assert _train(resumed, range(2, 4)) == {2: want[2], 3: want[3]}


def test_config_checks_resume_before_the_cluster_starts(tmp_path):
    with pytest.raises(ValueError, match="--resume .*no such folder"):
        TrainConfig.from_dict(dict(resume=str(tmp_path / "nowhere"))).validate()
    with pytest.raises(ValueError, match="holds no checkpoint"):
        TrainConfig.from_dict(dict(resume=str(tmp_path))).validate()
    torch.save(dict(epoch=0, model={}, optimizer={}), tmp_path / "epoch_0.pt")
    with pytest.raises(ValueError, match="--resume cannot be combined with --sweep"):
        TrainConfig.from_dict(dict(resume=str(tmp_path), sweep="s.json")).validate()
    cfg = TrainConfig.from_dict(dict(resume=str(tmp_path))).validate()
    assert cfg.output.checkpoints_to == str(tmp_path)  # new checkpoints go where the old ones are
    assert "--resume" in cfg.to_argv()
    assert TrainConfig.from_dict(dict(resume=str(tmp_path), checkpoint_dir="/c")).output.checkpoints_to == "/c"
    # the CLI says so before it partitions or starts anything
    proc = run_cli("train", "--dataset", "synthetic", "--resume", tmp_path / "nowhere", check=False, timeout=120)
    assert proc.returncode == 2
    assert f"dgl-sni: error: --resume {tmp_path / 'nowhere'}: no such folder" in proc.stderr


# ----------------------------------------------------------------------------- on the cluster

@pytest.fixture(scope="module")
def unbroken(tmp_path_factory, small_graph_npz):
    """The run that is never stopped: 6 epochs, a checkpoint after each."""
    tmp = tmp_path_factory.mktemp("unbroken")
    run_cli(*COMMON, "--dataset", small_graph_npz, "--epochs", EPOCHS, "--checkpoint-dir", tmp / "ckpt",
            "--metrics", tmp / "m.json")
    return read_metrics(tmp / "m.json"), tmp / "ckpt"


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead for our purposes
    except FileNotFoundError:
        return False


def _open_gate(gate, proc, log, deadline):
    while True:
        try:
            fd = os.open(gate / "go", os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            assert proc.poll() is None, \
                f"training exited before it opened the epoch gate:\n{log.read_text()[-3000:]}"
            assert time.monotonic() < deadline, "training did not reach the epoch gate"
            time.sleep(0.05)
    os.set_blocking(fd, True)
    return fd, os.open(gate / "done", os.O_RDONLY | os.O_NONBLOCK)


def _killed_run(tmp, npz, ckpt, epochs, kill_after, extra=()):
    """Start a run of ``epochs`` epochs, let epochs ``0..kill_after`` train, wait for the
    checkpoint of ``kill_after``, then SIGKILL the launcher and every process of its cluster
    (as a crash or an OOM killer would) and remove its namespaces with ``dgl-sni cleanup``."""
    gate, run_dir, log = tmp / "gate", tmp / "run-killed", tmp / "killed.log"
    gate.mkdir()
    for fifo in ("go", "done"):
        os.mkfifo(gate / fifo)
    argv = [sys.executable, "-m", "dgl_sni.cli", *map(str, COMMON), "--dataset", str(npz),
            "--epochs", str(epochs), "--checkpoint-dir", str(ckpt), "--epoch-gate", str(gate),
            "--run-dir", str(run_dir), *map(str, extra)]
    env = dict(os.environ, PYTHONPATH=ROOT, PYTHONWARNINGS="ignore")
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    go = done = None
    pids = {}
    try:
        deadline = time.monotonic() + 120
        go, done = _open_gate(gate, proc, log, deadline)
        for epoch in range(kill_after + 1):
            os.write(go, b".")
            while not (select.select([done], [], [], 1.0)[0] and os.read(done, 1)):
                assert proc.poll() is None, f"training died at epoch {epoch}:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, f"epoch {epoch} hung:\n{log.read_text()[-3000:]}"
        target = ckpt / f"epoch_{kill_after}.pt"
        while not target.exists():  # rank 0 writes it after the epoch's evaluation
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, f"{target} never appeared"
            time.sleep(0.02)
        pids = json.loads((run_dir / "pids.json").read_text())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the launcher: no teardown runs
        for pid in pids.values():  # the cluster it started (each in a session of its own)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.wait(timeout=30)
        for fd in (go, done):
            if fd is not None:
                os.close(fd)
        stop = time.monotonic() + 20
        while any(_alive(p) for p in pids.values()) and time.monotonic() < stop:
            time.sleep(0.1)
        run_cli("cleanup", check=False)
    assert proc.returncode == -signal.SIGKILL
    assert not [name for name, p in pids.items() if _alive(p)]
    return proc


@needs_netns
def test_killed_run_resumes_with_the_losses_of_an_unbroken_run(tmp_path, small_graph_npz, unbroken):
    want, want_ckpt = unbroken
    ckpt = tmp_path / "ckpt"
    _killed_run(tmp_path, small_graph_npz, ckpt, EPOCHS, KILL_AFTER)
    assert sorted(os.listdir(ckpt)) == [f"epoch_{e}.pt" for e in range(KILL_AFTER + 1)]  # stopped part-way
    # resumed twice, without --checkpoint-dir: each writes its checkpoints into the folder it resumed
    first, second = tmp_path / "m1.json", tmp_path / "m2.json"
    run_cli(*COMMON, "--dataset", small_graph_npz, "--epochs", 4, "--resume", ckpt, "--metrics", first)
    assert (ckpt / "epoch_3.pt").exists()
    run_cli(*COMMON, "--dataset", small_graph_npz, "--epochs", EPOCHS, "--resume", ckpt, "--metrics", second)
    first, second = read_metrics(first), read_metrics(second)
    assert [e["epoch"] for e in first["epochs"]] == [3] and first["summary"]["resumed_from"] == 2
    assert [e["epoch"] for e in second["epochs"]] == [4, 5] and second["summary"]["resumed_from"] == 3
    assert second["config"]["resume"] == str(ckpt) and second["summary"]["epochs"] == 2
    got = first["epochs"] + second["epochs"]
    for rec in got:
        ref = want["epochs"][rec["epoch"]]
        assert rec["mode"] == ref["mode"] == "sync"
        for key in ("loss", "train_acc", "val_acc", "test_acc"):
            assert abs(rec[key] - ref[key]) <= EXACT, (rec["epoch"], key, rec[key], ref[key])
    for epoch in range(EPOCHS):  # every checkpoint, before the kill and after, as in the unbroken run
        mine = read_checkpoint(str(ckpt / f"epoch_{epoch}.pt"))
        ref = read_checkpoint(str(want_ckpt / f"epoch_{epoch}.pt"))
        assert mine["step"] == ref["step"] == epoch + 1
        for name, value in ref["model"].items():
            assert (mine["model"][name] - value).abs().max().item() <= EXACT, (epoch, name)


@needs_netns
def test_nothing_to_resume_is_an_error(tmp_path, small_graph_npz, unbroken):
    _, want_ckpt = unbroken  # its newest checkpoint is of the last epoch
    proc = run_cli(*COMMON, "--dataset", small_graph_npz, "--epochs", EPOCHS, "--resume", want_ckpt,
                   "--metrics", tmp_path / "m.json", check=False)
    assert proc.returncode == 2, proc.stderr[-3000:]  # refused by the CLI, before the cluster starts
    assert "nothing to resume" in proc.stderr, proc.stderr[-3000:]
    assert not (tmp_path / "m.json").exists()


@needs_netns
def test_resume_at_a_stale_epoch_syncs_first_with_prediction_on(tmp_path, small_graph_npz):
    """Warm-up 2, interval 3: steps 0, 1, 2, 5 sync. Stopped after epoch 2, resumed at 3 (stale
    in the schedule): 3 syncs, seeding the new agent's tables, then 4 is served by the agent."""
    sni = ("--sync-interval", 3, "--warmup", 2, "--predictor", "cache")
    ckpt = tmp_path / "ckpt"
    run_cli(*COMMON, *sni, "--dataset", small_graph_npz, "--epochs", 3, "--checkpoint-dir", ckpt,
            "--metrics", tmp_path / "m0.json")
    assert [e["mode"] for e in read_metrics(tmp_path / "m0.json")["epochs"]] == ["sync"] * 3
    run_cli(*COMMON, *sni, "--dataset", small_graph_npz, "--epochs", 8, "--resume", ckpt,
            "--metrics", tmp_path / "m1.json")
    got = read_metrics(tmp_path / "m1.json")
    assert [e["epoch"] for e in got["epochs"]] == [3, 4, 5, 6, 7]
    assert [e["mode"] for e in got["epochs"]] == ["sync", "stale", "sync", "stale", "stale"]
    stale = [e for e in got["epochs"] if e["mode"] == "stale"]
    assert all(e["cached_rows"] > 0 for e in stale)  # the agent served them from the seeded tables
    assert all(e["loss"] == e["loss"] and e["loss"] < 5 for e in got["epochs"])
    assert got["summary"]["resumed_from"] == 2 and sorted(os.listdir(ckpt))[-1] == "epoch_7.pt"
