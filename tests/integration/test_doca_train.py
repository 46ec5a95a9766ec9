"""Training with the agent reached over the DOCA path (simulated SDK).

The DOCA transport moves bit-identical rows (tests/test_doca_path.py); here a whole
training run uses it, and every agent mode must give the same losses to the bit: the
partitions are deterministic, and where the agent runs must not change what it serves.
"""
import importlib.util
import os

import pytest

from tests.helpers import ROOT, needs_netns, run_cli, train_sweep


@pytest.fixture(scope="module")
def doca_lib(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("doca_sim_build", os.path.join(ROOT, "tests", "doca_sim", "build.py"))
    builder = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(builder)
    if builder.compiler() is None:
        pytest.skip("gcc is not available to build the simulated DOCA SDK")
    return builder.build(str(tmp_path_factory.mktemp("doca_sim")))


@needs_netns
def test_every_agent_mode_trains_to_the_same_losses(tmp_path, small_graph_npz, doca_lib):
    modes = ("process", "inline", "doca-local")  # one after another on one cluster (a sweep)
    runs = train_sweep(tmp_path, [dict(agent=mode) for mode in modes], "--dataset", small_graph_npz,
                       "--workers", 2, "--layers", 3, "--epochs", 9, "--warmup", 2, "--sync-interval", 3,
                       "--predictor", "gated", "--sampling-ratio", 0.5, "--doca-pci", "03:00.0",
                       # rows smoothed over syncs, not averaged over steps: the gate then serves
                       # predictions on stale steps (on averaged rows it keeps the cache's)
                       "--smooth", 0.75, "--row-average", 0, "--grad-average", 0,
                       env=dict(DOCA_LIB_DIR=doca_lib))
    (shm, _), (inline, _), (doca, _) = runs
    assert [m["config"]["agent"] for m, _ in runs] == list(modes)
    halo = sum(w["halo_nodes"] for w in doca["summary"]["workers"])
    assert [e["mode"] for e in doca["epochs"]] == [e["mode"] for e in shm["epochs"]]
    stale = [e for e in doca["epochs"] if e["mode"] == "stale"]
    assert stale and all(e["bytes_recv"] == 0 for e in stale)  # rows came over DOCA, not DGL
    assert all(e["predicted_rows"] + e["cached_rows"] == 2 * halo for e in stale)
    assert any(e["predicted_rows"] > 0 for e in stale)
    losses = {name: [e["loss"] for e in m["epochs"]]
              for name, m in (("process", shm), ("inline", inline), ("doca-local", doca))}
    assert losses["process"] == losses["inline"] == losses["doca-local"], losses
    assert [e["predicted_rows"] for e in stale] == [e["predicted_rows"] for e in shm["epochs"]
                                                   if e["mode"] == "stale"]


def test_doca_agent_needs_a_device_address():
    proc = run_cli("train", "--agent", "doca", "--sync-interval", 5, "--quiet", "--epochs", 1, check=False)
    assert proc.returncode == 2 and "needs the device's PCI address" in proc.stderr
