"""The script that runs the peers' own code: its port of a commit, how it times an epoch over the
ranks and how it judges a run (no cluster, no copy of a peer: a repository made up here)."""
import json
import os
import subprocess

import pytest
import torch

from benchmarks import peer_code as pc


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


def _repo(tmp_path, peer=pc.BNS_GCN, counts=None):
    """A repository with the files the port touches, each holding its texts as often as the pinned commit."""
    repo = tmp_path / "repo"
    repo.mkdir()
    texts = {}
    for rel, old, _, count in peer.port:
        n = (counts or {}).get((rel, old), count)
        texts[rel] = texts.get(rel, "") + "".join(f"x{i} = {old}\n" for i in range(n))
    for rel, text in texts.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    return repo, _git(repo, "rev-parse", "HEAD").strip()


@pytest.mark.parametrize("peer", [pc.BNS_GCN, pc.PIPEGCN], ids=["bns-gcn", "pipegcn"])
def test_the_port_replaces_every_counted_text(tmp_path, peer):
    repo, commit = _repo(tmp_path, peer)
    src = pc.extract(peer, str(repo), str(tmp_path / "scratch"), commit)
    for rel, old, new, count in peer.port:
        text = open(os.path.join(src, rel)).read()
        assert text.count(new) >= count
        assert "'cuda'" not in text and "pin_memory=True" not in text and "copy_src" not in text
    assert open(os.path.join(src, ".ported")).read().startswith(commit)


def test_a_changed_port_table_extracts_the_commit_again(tmp_path):
    repo, commit = _repo(tmp_path)
    scratch = str(tmp_path / "scratch")
    src = pc.extract(pc.BNS_GCN, str(repo), scratch, commit)
    rel = pc.BNS_GCN.port[0][0]
    with open(os.path.join(src, rel), "a") as fh:
        fh.write("edited = 1\n")
    assert "edited" in open(os.path.join(pc.extract(pc.BNS_GCN, str(repo), scratch, commit), rel)).read()  # kept
    other = pc.Peer(**{**pc.BNS_GCN.__dict__, "port": pc.BNS_GCN.port[:-1]})
    assert "edited" not in open(os.path.join(pc.extract(other, str(repo), scratch, commit), rel)).read()


def test_a_commit_whose_texts_differ_is_refused_by_file_and_text(tmp_path):
    rel, old, _, count = pc.BNS_GCN.port[0]
    repo, commit = _repo(tmp_path, counts={(rel, old): count + 1})
    with pytest.raises(pc.PortError, match=f"{rel} holds {count + 1} of"):
        pc.extract(pc.BNS_GCN, str(repo), str(tmp_path / "scratch"), commit)


def test_a_repository_without_the_commit_names_it_and_where_to_clone(tmp_path):
    repo, _ = _repo(tmp_path)
    with pytest.raises(pc.PortError, match=f"cannot read commit {pc.BNS_GCN.commit}.*{pc.BNS_GCN.url}"):
        pc.extract(pc.BNS_GCN, str(repo), str(tmp_path / "scratch"))


def _record(run_dir, rank, starts, ends, losses, part_train, snapshots=()):
    torch.save(dict(starts=starts, ends=ends, losses=losses, part_train=part_train, tx_bytes=100 * (rank + 1),
                    snapshots=list(snapshots)), os.path.join(run_dir, f"rank{rank}.pt"))


class _Args:
    lr, dropout, hidden, layers, link = 0.01, 0.5, 16, 3, "1gbit"


def test_an_epoch_runs_from_the_last_rank_starting_it_to_the_last_rank_ending_it(tmp_path, monkeypatch):
    monkeypatch.setattr(pc, "WORKERS", 2)
    # rank 1 starts epoch 0 late (its set-up); epoch 1 ends late on rank 0 (descheduled)
    _record(tmp_path, 0, [0.0, 1.0], [1.0, 2.5], [4.0, 2.0], 2)
    _record(tmp_path, 1, [0.4, 1.1], [1.1, 2.0], [2.0, 1.0], 2)
    (tmp_path / "evaluation.json").write_text(json.dumps(dict(val=[0.5, 0.7], test=[0.4, 0.6])))
    run = pc.summarise(pc.BNS_GCN, str(tmp_path), "0.1", 3, _Args())
    times = [p["train_time_s"] for p in run["curve"]]
    assert times == pytest.approx([1.1 - 0.4, 1.1 - 0.4 + 2.5 - 1.1])
    assert [p["loss"] for p in run["curve"]] == pytest.approx([6.0 / 4, 3.0 / 4])  # summed over ranks' rows
    assert run["best_epoch"] == 1 and run["final_test_acc"] == 0.6 and run["bytes_per_epoch"] == 150
    assert run["name"] == "bns-code-0.1" and run["config"]["flags"] == ["--sampling-rate", "0.1"]
    assert run["commit"] == pc.BNS_GCN.commit and {p["mode"] for p in run["curve"]} == {"stale"}


def _run(vals, dt=1.0, final=0.8):
    return dict(curve=[dict(epoch=i, train_time_s=dt * (i + 1), val_acc=v) for i, v in enumerate(vals)],
                best_val_acc=max(vals), final_test_acc=final)


def test_a_run_is_judged_against_its_own_exact_code_and_this_projects_interval_1():
    own_exact = _run([0.5, 0.7, 0.9, 0.9], dt=2.0, final=0.85)
    sampled = _run([0.5, 0.6, 0.8, 0.89, 0.9], dt=1.0, final=0.84)
    ours = {"0": dict(target_val_acc=0.88, runs=[dict(name="interval1", **_run([0.6, 0.88, 0.89], dt=3.0, final=0.86)),
                                                 dict(name="fast", **_run([0.5, 0.7, 0.88], dt=0.5))])}
    j = pc.judge(sampled, ours, 0, own_exact)
    assert j["own"]["time_to_target_s"] == 4.0 and j["own"]["exact_time_to_target_s"] == 6.0
    assert j["own"]["time_to_target_speedup"] == pytest.approx(1.5)
    assert j["own"]["epochs_to_target_ratio"] == pytest.approx(4 / 3)
    assert j["own"]["final_test_delta"] == pytest.approx(-0.01)
    assert j["ours"]["time_to_target_speedup"] == pytest.approx(6.0 / 4.0)
    assert j["ours"]["epochs_to_target_ratio"] == pytest.approx(2.0) and j["ours"]["fast_time_to_target_s"] == 1.5
    assert j["ours"]["final_test_delta"] == pytest.approx(-0.02)
    never = pc.judge(_run([0.5, 0.6]), ours, 0, own_exact)
    assert never["own"]["time_to_target_speedup"] is None and never["ours"]["time_to_target_speedup"] is None
    assert "own" not in pc.judge(own_exact, None, 0, own_exact)


def test_each_peer_gets_its_own_command_line_for_a_variant():
    class A:
        epochs, layers, hidden, lr, dropout, graph = 150, 3, 16, 0.01, 0.5, "g"
    meta = dict(n_feat=64, n_class=8, n_train=100)
    bns = pc.their_flags(pc.BNS_GCN, A, "0.3", 2, "10.0.0.1", meta)
    pipe = pc.their_flags(pc.PIPEGCN, A, "gf", 2, "10.0.0.1", meta)
    assert bns[bns.index("--sampling-rate") + 1] == "0.3" and bns[bns.index("--part-path") + 1] == "partitions"
    assert "--n-feat" not in bns and "--enable-pipeline" not in bns
    assert {"--enable-pipeline", "--feat-corr", "--grad-corr"} <= set(pipe) and pipe[pipe.index("--n-train") + 1] == "100"
    for flags in (bns, pipe):
        assert flags[flags.index("--seed") + 1] == "2" and "--no-eval" in flags and "--use-pp" in flags


def test_a_clone_without_the_pinned_commit_stops_the_script_with_its_name(tmp_path):
    repo, _ = _repo(tmp_path)
    with pytest.raises(SystemExit, match=f"peer_code: cannot read commit {pc.PIPEGCN.commit}"):
        pc.main(["--peer", "pipegcn", "--repo", str(repo), "--scratch", str(tmp_path / "s")])


def test_modules_the_peers_import_but_these_graphs_do_not_use_stand_in_only_where_absent(monkeypatch):
    import importlib.util
    import sys
    import types
    for name in ("ogb", "ogb.nodeproppred", "sklearn", "sklearn.preprocessing", "sklearn.metrics"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    real = types.ModuleType("sklearn")  # an installed sklearn, already imported
    monkeypatch.setitem(sys.modules, "sklearn", real)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None)  # OGB is not installed
    try:
        pc._stub_imports()
        from ogb.nodeproppred import DglNodePropPredDataset
        with pytest.raises(NotImplementedError, match="ogb.nodeproppred.DglNodePropPredDataset is not installed"):
            DglNodePropPredDataset("ogbn-products")
        assert sys.modules["sklearn"] is real and "sklearn.metrics" not in sys.modules
    finally:
        for name in ("ogb", "ogb.nodeproppred"):  # the stand-ins go with the test
            sys.modules.pop(name, None)
