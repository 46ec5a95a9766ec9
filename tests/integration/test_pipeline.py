"""Pipelined steps (``--sync-policy pipeline``): halo rows and gradients one step old, on the
wire while the trainer computes.

* With the weights frozen (``--lr 1e-30``: steps below float32 resolution; dropout off) every step's rows and gradients equal
  the previous step's, so a pipelined run must give the exact run's losses (to the float
  rounding of summing the halo rows apart or with the owned ones), and
  Adam's moment estimates (which still accumulate every gradient) must match too: a halo
  row put in the wrong place, or a gradient contribution lost or counted twice, shows.
* With training on, the warm-up steps are exact (bit-identical to interval 1), the steps
  after it really are one step stale (their losses differ), and the run still learns to
  the exact run's accuracy.
"""
import pytest
import torch

from tests.helpers import needs_netns, train_sweep

COMMON = ("--workers", 2, "--model", "gcn", "--layers", 3, "--hidden", 16, "--seed", 0)


@needs_netns
@pytest.mark.parametrize("quantize", [0, pytest.param(8, marks=pytest.mark.slow)])
def test_frozen_weights_pipelined_equals_exact(tmp_path, small_graph_npz, quantize):
    frozen = ("--epochs", 5, "--lr", 1e-30, "--dropout", 0, "--weight-decay", 0, "--quantize", quantize)
    # the third run smooths the one-step-old rows and gradients over steps (PipeGCN's
    # smoothing): an average of equal rows is those rows, so it too must give the exact losses
    (exact, exact_ckpt), *pipelined = train_sweep(  # all on one cluster
        tmp_path, [dict(sync_interval=1), dict(sync_policy="pipeline", warmup=1),
                   dict(sync_policy="pipeline", warmup=1, smooth=0.9)],
        "--dataset", small_graph_npz, *COMMON, *frozen, checkpoints=True)
    exact = exact["epochs"]
    assert [run["in_effect"]["smooth"] for run, _ in pipelined] == [0.0, 0.9]
    for piped, piped_ckpt in pipelined:
        piped = piped["epochs"]
        assert [e["mode"] for e in piped] == ["sync"] + ["pipelined"] * 4
        assert all(e["pipelined_rows"] > 0 for e in piped[1:])
        if quantize:  # stochastic rounding is keyed by step: rows one step old were rounded differently
            for a, b in zip(exact, piped):
                assert abs(a["loss"] - b["loss"]) < 2e-3
            continue
        # equal to float rounding: an exact step takes the halo rows apart (owned sum, then the
        # halo sum) where a pipelined one sums the whole block's in-edges in one pass; a misplaced
        # row or a lost gradient moves the loss by orders of magnitude more
        for a, b in zip(piped, exact):
            assert a["loss"] == pytest.approx(b["loss"], rel=1e-6, abs=0), (a["loss"], b["loss"])
        last = len(exact) - 1
        a = torch.load(exact_ckpt / f"epoch_{last}.pt")["optimizer"]["state"]
        b = torch.load(piped_ckpt / f"epoch_{last}.pt")["optimizer"]["state"]
        assert a.keys() == b.keys()
        for key in a:
            for moment in ("exp_avg", "exp_avg_sq"):
                assert torch.allclose(a[key][moment], b[key][moment], rtol=1e-5, atol=1e-9), (key, moment)


@needs_netns
def test_pipelined_training_is_one_step_stale_and_learns(tmp_path):
    (exact, _), (piped, _) = train_sweep(  # both on one cluster
        tmp_path, [dict(sync_interval=1), dict(sync_policy="pipeline", warmup=3)],
        "--dataset", "synthetic", *COMMON, "--epochs", 40, "--dropout", 0.5, "--eval-every", 40)
    exact, piped = exact["epochs"], piped["epochs"]
    assert [e["mode"] for e in piped[:4]] == ["sync"] * 3 + ["pipelined"]
    assert [e["loss"] for e in piped[:3]] == [e["loss"] for e in exact[:3]]  # warm-up: exact
    assert piped[3]["loss"] != exact[3]["loss"]  # the rows it used were a step old
    assert piped[-1]["loss"] < piped[3]["loss"] - 0.3
    assert abs(piped[-1]["test_acc"] - exact[-1]["test_acc"]) < 0.03, (piped[-1]["test_acc"], exact[-1]["test_acc"])


def test_pipeline_refuses_the_storage_tier():
    from dgl_sni.config import TrainConfig
    cfg = TrainConfig.from_dict(dict(sync_policy="pipeline", storage_tier="/tmp/x"))
    with pytest.raises(ValueError, match="pipeline is not supported with --storage-tier"):
        cfg.validate()
