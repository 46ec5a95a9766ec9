"""The one-flag switch: a stock DistDGL script with and without DGL_SNI."""
import json
import os
import sys

import numpy as np
import pytest

from dgl_sni.data import load_npz
from dgl_sni.partition import partition

from conftest import ROOT, needs_netns, run_cli

SCRIPT = os.path.join(ROOT, "tests", "scripts", "stock_dist_script.py")
EPOCHS = 8


@pytest.fixture(scope="module")
def parts(tmp_path_factory, small_graph_npz):
    out = tmp_path_factory.mktemp("parts")
    return partition(load_npz(small_graph_npz), 2, str(out), method="metis", graph_name="graph")


def _launch(tmp_path, parts, tag, config=None):
    out = tmp_path / tag
    out.mkdir()
    env = {}
    if config is not None:
        cfg_path = tmp_path / f"{tag}.json"
        cfg_path.write_text(json.dumps(config))
        env = dict(DGL_SNI_CONFIG=str(cfg_path), DGL_SNI_STATS=str(out / "sni{rank}.json"))
    run_cli("launch", "--workers", 2, "--part-config", parts, "--", sys.executable, SCRIPT,
            "--ip_config", "{ip_config}", "--part_config", "{part_config}", "--out", out,
            "--epochs", EPOCHS, env=env)
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    stats = [json.loads((out / f"sni{r}.json").read_text()) for r in (0, 1)] if config else None
    return results, stats


@needs_netns
def test_stock_script_same_results_when_every_pull_syncs(tmp_path, parts):
    plain, _ = _launch(tmp_path, parts, "plain")
    sni, stats = _launch(tmp_path, parts, "sync1", dict(sync_interval=1, warmup=0, predictor="gated"))
    assert [r["epoch_sums"] for r in sni] == [r["epoch_sums"] for r in plain]
    for r, s in zip(sni, stats):
        halo = len(r["halo"])
        assert s["stock_emb"]["pulled_rows"] == EPOCHS * halo  # every pull went to DGL
        assert s["stock_emb"].get("served_rows", 0) == 0


@needs_netns
def test_stock_script_pulls_less_when_stale(tmp_path, parts):
    plain, _ = _launch(tmp_path, parts, "plain")
    sni, stats = _launch(tmp_path, parts, "stale", dict(sync_interval=3, warmup=2, predictor="cache",
                                                          agent="process"))
    sync_steps = [s for s in range(EPOCHS) if s < 2 or (s - 2) % 3 == 0]  # 0 1 2 5
    for r, s, p in zip(sni, stats, plain):
        halo = len(r["halo"])
        assert s["stock_emb"]["pulled_rows"] == len(sync_steps) * halo
        assert s["stock_emb"]["served_rows"] == (EPOCHS - len(sync_steps)) * halo
        assert s["stock_emb"]["cached_rows"] == (EPOCHS - len(sync_steps)) * halo
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
    # local reads and graph features are untouched by the switch
    assert [r["feature_sum"] for r in sni] == [r["feature_sum"] for r in plain]
