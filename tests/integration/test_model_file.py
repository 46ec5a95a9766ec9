"""Models of DGL's own layers (examples/) trained full-graph across machines.

At sync interval 1, each example on 2 and 4 workers gives the losses of the same module
trained in one process on the whole graph, dropout on; the fast preset runs such a model
with served rows and says so; ``--model-file`` refuses what it cannot build.
"""
import os

import pytest

import dgl_sni
from dgl_sni.data import load_npz
from dgl_sni.reference import train_reference
from dgl_sni.trainers import ModelConfig

from tests.helpers import ROOT, needs_netns, run_cli, train_sweep

TOL = 1e-4
EXAMPLES = {name: os.path.join(ROOT, "examples", f"{name}.py") for name in ("gcn_layernorm", "sage_layernorm", "gin", "gat")}
MODEL = dict(layers=3, hidden=16, heads=2, dropout=0.5, lr=0.01, seed=0, epochs=5)


@pytest.fixture(scope="module")
def references(small_graph_npz):
    data = load_npz(small_graph_npz)
    out = {}
    for name, path in EXAMPLES.items():
        cfg = ModelConfig(model_file=path, **{k: v for k, v in MODEL.items() if k != "epochs"})
        _, records = train_reference(data, cfg, MODEL["epochs"], evaluate=False)
        out[name] = [r["loss"] for r in records]
    return out


@needs_netns
@pytest.mark.parametrize("workers", [2, 4])
def test_each_example_equals_one_process(tmp_path, small_graph_npz, references, workers):
    names = list(EXAMPLES)
    runs = train_sweep(tmp_path, [dict(model_file=EXAMPLES[n], **MODEL) for n in names],
                       "--dataset", small_graph_npz, "--workers", workers)
    for name, (metrics, _) in zip(names, runs):
        losses = [e["loss"] for e in metrics["epochs"]]
        assert len(losses) == MODEL["epochs"]
        diff = max(abs(a - b) for a, b in zip(losses, references[name]))
        assert diff < TOL, (name, workers, losses, references[name])
        assert all(e["bytes_recv"] > 0 for e in metrics["epochs"])  # rows really crossed the cut
        assert metrics["config"]["model_file"] == EXAMPLES[name]


@needs_netns
def test_the_fast_preset_serves_rows_to_a_model_file_from_python(tmp_path, small_graph_npz):
    """``dgl_sni.train(build, config)``: the trainers load ``build`` from its file; stale epochs
    happen, and the metrics say how the layers took their rows: the model's SAGEConv (mean) is
    linear in its sources, so every stale epoch took its halo rows as their kept sum, and every
    sync epoch DGL's own forward over whole rows, averaged over steps."""
    from dgl_sni.config.presets import PRESETS
    from tests.integration.model_for_api import build
    metrics = dgl_sni.train(build, dict(dataset=small_graph_npz, workers=2, preset="fast", epochs=16,
                                        layers=2, hidden=8))
    modes = [e["mode"] for e in metrics["epochs"]]
    assert "stale" in modes and "sync" in modes
    forms = metrics["in_effect"]["halo_forms"]
    assert forms["stale"] == {"0": {"sum": modes.count("stale")}, "1": {"sum": modes.count("stale")}}
    assert forms["sync"]["1"] == {"rows": modes.count("sync")}
    assert metrics["in_effect"]["halo_paths"] == ["summed"]
    assert metrics["in_effect"]["averaged_rows"] == metrics["in_effect"]["averaged_grads"] == [1]
    assert metrics["config"]["model_file"].endswith("model_for_api.py:build")
    assert metrics["config"]["sync_interval"] == PRESETS["fast"].values["sync_interval"]


def test_the_cli_refuses_a_file_without_build_or_a_build_without_a_module(tmp_path, small_graph_npz):
    no_build = tmp_path / "no_build.py"
    no_build.write_text("def make(in_feats, num_classes, cfg):\n    return None\n")
    no_module = tmp_path / "no_module.py"
    no_module.write_text("def build(in_feats, num_classes, cfg):\n    return 42\n")
    for path, message in ((no_build, "defines no 'build'"), (no_module, "build(...) returned int, not a torch.nn.Module")):
        proc = run_cli("train", "--dataset", small_graph_npz, "--workers", 1, "--cluster", "loopback",
                       "--model-file", path, "--epochs", 1, "--quiet", check=False)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
