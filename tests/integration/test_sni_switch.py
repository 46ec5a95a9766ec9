"""The one-flag switch: a stock DistDGL script (no dgl_sni import) with and without DGL_SNI.

Each test reproduces a way a stock script uses DistDGL, with the project's own scripts
(tests/scripts/): standalone mode, custom pull handlers, index forms, int32 ids, buffers
rewritten and read in other patterns, writes this machine made, no agent where nothing can
be stale, and the feature cache.
"""
import json
import os
import subprocess
import sys

import pytest

from dgl_sni.data import load_npz
from dgl_sni.partition import partition

from tests.helpers import ROOT, needs_netns, run_cli

SCRIPT = os.path.join(ROOT, "tests", "scripts", "stock_dist_script.py")
STANDALONE = os.path.join(ROOT, "tests", "scripts", "standalone_script.py")
EPOCHS = 8
EXACT_KEYS = ("feature_sum", "eval_sums", "reused_sums", "custom_sums", "shapes", "batch_sums")


@pytest.fixture(scope="module")
def parts(tmp_path_factory, small_graph_npz):
    out = tmp_path_factory.mktemp("parts")
    return partition(load_npz(small_graph_npz), 2, str(out), method="metis", graph_name="graph")


def _launch(tmp_path, parts, tag, config=None, *extra):
    out = tmp_path / tag
    out.mkdir()
    env = {}
    if config is not None:
        cfg_path = tmp_path / f"{tag}.json"
        cfg_path.write_text(json.dumps(config))
        env = dict(DGL_SNI_CONFIG=str(cfg_path), DGL_SNI_STATS=str(out / "sni{rank}.json"))
    run_cli("launch", "--workers", 2, "--part-config", parts, "--", sys.executable, SCRIPT,
            "--ip_config", "{ip_config}", "--part_config", "{part_config}", "--out", out,
            "--epochs", EPOCHS, *extra, env=env)
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    stats = [json.loads((out / f"sni{r}.json").read_text()) for r in (0, 1)] if config else None
    return results, stats


@pytest.fixture(scope="module")
def plain(tmp_path_factory, parts):
    return _launch(tmp_path_factory.mktemp("plain"), parts, "plain", None, "--write-static")[0]


def _assert_exact_paths(sni, plain):
    for key in EXACT_KEYS:
        assert [r[key] for r in sni] == [r[key] for r in plain], key
    for r, p in zip(sni, plain):
        assert r["index_sums"]["slice"] == p["index_sums"]["slice"]
        assert r["index_sums"]["dup"] == p["index_sums"]["dup"]
        assert r["shapes"] == dict(slice=[7, 4], empty=[0, 4])
        if "int32" in r["index_sums"]:  # DGL 2.1 alone cannot pull int32 ids; the switch converts them
            assert r["index_sums"]["int32"] == r["index_sums"]["int64"]


@needs_netns
def test_stock_script_same_results_when_every_pull_syncs(tmp_path, parts, plain):
    sni, stats = _launch(tmp_path, parts, "sync1", dict(sync_interval=1, warmup=0, predictor="gated"),
                         "--int32")
    assert [r["epoch_sums"] for r in sni] == [r["epoch_sums"] for r in plain]
    _assert_exact_paths(sni, plain)
    for r, s in zip(sni, stats):
        halo = len(r["halo"])
        assert s["stock_emb"]["pulled_rows"] >= EPOCHS * halo  # every pull went to DGL
        assert s["stock_emb"].get("served_rows", 0) == 0 and s["stock_emb"]["role"] == "plain"
        assert s["__switch__"]["agent_started"] is False  # nothing can be stale: no agent
        assert s["features"]["role"] == "static" and s["features"]["served_rows"] > 0  # exact cache


@needs_netns
def test_stock_script_pulls_less_when_stale(tmp_path, parts, plain):
    sni, stats = _launch(tmp_path, parts, "stale", dict(sync_interval=3, warmup=2, predictor="cache",
                                                          agent="process"), "--int32")
    sync_steps = [s for s in range(EPOCHS) if s < 2 or (s - 2) % 3 == 0]  # 0 1 2 5
    for r, s in zip(sni, stats):
        halo = len(r["halo"])
        emb = s["stock_emb"]
        assert s["__switch__"]["agent_started"] is True
        # epochs: 8 exchange pulls; then the index forms (a slice, duplicates, int32, int64) are
        # further pulls of the same step, which end the pattern: those are exact
        assert emb["served_rows"] == (EPOCHS - len(sync_steps)) * halo
        assert emb["cached_rows"] == (EPOCHS - len(sync_steps)) * halo
        assert emb["role"] == "plain" and emb["exact_because"] == "two pulls in one step"
        # the evaluation buffer (written in two chunks, read in two) is never served
        assert s["stock_eval"]["role"] == "plain" and s["stock_eval"].get("served_rows", 0) == 0
        assert s["stock_eval"]["exact_because"] == "two pushes in one step"
        assert s["stock_eval1"]["exact_because"] == "created again (a reused buffer)"
        assert s["stock_eval1"].get("served_rows", 0) == 0
        assert s["stock_custom"].get("served_rows", 0) == 0  # its own pull handler sees every row
    # sync epochs saw the true rows; stale epochs the rows of the last sync (cache)
    exact = plain[0]["epoch_sums"]
    got = sni[0]["epoch_sums"]
    last = None
    for step in range(EPOCHS):
        if step in sync_steps:
            assert got[step] == pytest.approx(exact[step], rel=1e-6)
            last = exact[step]
        else:
            assert got[step] == pytest.approx(last, rel=1e-6)
    _assert_exact_paths(sni, plain)


@needs_netns
def test_rows_this_machine_wrote_are_never_served_stale(tmp_path, parts):
    """A named tensor is served stale, except rows this machine wrote since the last sync;
    a detected one stops being served at all once a push writes another machine's rows."""
    cfg = dict(sync_interval=3, warmup=2, predictor="cache", agent="inline")
    named, nstats = _launch(tmp_path, parts, "named_wr", dict(cfg, tensors=["stock_emb"]), "--write-remote")
    assert named[0]["remote_marks"] == [[1000.0 + e] * 4 for e in range(EPOCHS)]  # always fresh
    assert nstats[0]["stock_emb"]["role"] == "named" and nstats[0]["stock_emb"]["served_rows"] > 0
    assert nstats[1]["stock_emb"]["served_rows"] > 0
    detected, dstats = _launch(tmp_path, parts, "detected_wr", cfg, "--write-remote")
    assert detected[0]["remote_marks"] == [[1000.0 + e] * 4 for e in range(EPOCHS)]
    assert dstats[0]["stock_emb"]["exact_because"] == "a push wrote rows of other machines"
    assert dstats[0]["stock_emb"].get("served_rows", 0) == 0


@needs_netns
@pytest.mark.parametrize("static", [[], ["features"]], ids=["detected", "named"])
def test_rows_another_machine_wrote_are_never_served_from_the_cache(tmp_path, parts, plain, static):
    """Rank 1 caches input features of rank 0; rank 0 rewrites them; rank 1 reads DGL's new rows."""
    sni, stats = _launch(tmp_path, parts, "static_wr", dict(sync_interval=1, static=static), "--write-static")
    before, after, again = sni[1]["static_rewrite"]
    assert after == again * 4 == 7777.0 * 20 * 24  # 20 rows of the small graph's 24 features
    assert before != after  # the first read saw the rows before the write
    assert sni[1]["static_rewrite"] == plain[1]["static_rewrite"]
    assert stats[1]["features"]["served_rows"] >= 20  # the first read came from the cache
    if static:  # named: the written rows leave the cache, the tensor stays cached
        assert stats[1]["features"]["role"] == "static"
        assert stats[0]["features"]["role"] == "static"
    else:  # detected read-only data, written: exact from then on, on both machines
        assert stats[0]["features"]["exact_because"] == "written by this machine"
        assert stats[1]["features"]["exact_because"] == "written by another machine"


@pytest.mark.parametrize("flag", [None, "1"])
def test_standalone_mode_runs_with_and_without_the_flag(tmp_path, small_graph_npz, flag):
    part_config = partition(load_npz(small_graph_npz), 1, str(tmp_path / "parts"), method="random",
                            graph_name="graph")
    (tmp_path / "ip.txt").write_text("127.0.0.1 30050\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DGL", "PYTHONPATH"))}
    env["DGL_DIST_MODE"] = "standalone"
    if flag:
        env["DGL_SNI"] = flag
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, STANDALONE, "--part_config", part_config, "--ip_config",
                           str(tmp_path / "ip.txt"), "--out", str(out)], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    data = load_npz(small_graph_npz)
    assert got["standalone"] == "dgl.distributed.standalone_kvstore"
    assert len(got["sums"]) == 4 and got["sums"][1] == pytest.approx(2 * got["sums"][0], rel=1e-5)
    assert got["feats"][0] == got["feats"][2] and len(got["feats"][0]) == data.features.shape[1]
