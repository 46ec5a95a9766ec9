"""dgl-sni train with stale epochs: what crosses the network, what the agent serves."""
import pytest

from conftest import needs_netns, read_metrics, run_cli


def _train(tmp_path, small_graph_npz, *extra, epochs=10):
    out = tmp_path / "m.json"
    run_cli("train", "--dataset", small_graph_npz, "--workers", 2, "--layers", 3, "--epochs", epochs,
            "--warmup", 2, "--sync-interval", 4, "--quiet", "--metrics", out, *extra)
    m = read_metrics(out)
    halo = sum(w["halo_nodes"] for w in m["summary"]["workers"])
    return m["epochs"], halo


@needs_netns
def test_stale_epochs_pull_nothing_and_serve_every_halo_row(tmp_path, small_graph_npz):
    epochs, halo = _train(tmp_path, small_graph_npz, "--predictor", "gated", "--sampling-ratio", 0.3,
                          "--stale-grad", "skip", "--measure-staleness", "--dropout", 0)
    modes = [e["mode"] for e in epochs]
    assert modes == ["sync", "sync", "sync", "stale", "stale", "stale", "sync", "stale", "stale", "stale"]
    for e in epochs[1:]:
        if e["mode"] == "stale":
            assert e["bytes_recv"] == 0 and e["bytes_sent"] == 0  # no embeddings, no gradients
            assert e["predicted_rows"] + e["cached_rows"] == 2 * halo  # 2 hidden layers
            assert e["measure_bytes"] > 0 and e["staleness_l2"] > 0  # measured apart
        else:
            assert e["bytes_recv"] > 0 and e["bytes_sent"] > 0
    # without dropout the cache's error grows with staleness (1 then 3 steps old)
    stale = [e for e in epochs if e["mode"] == "stale"]
    assert stale[0]["cache_l2"] < stale[2]["cache_l2"]


@needs_netns
def test_stale_gradients_are_exchanged_by_default(tmp_path, small_graph_npz):
    epochs, _ = _train(tmp_path, small_graph_npz, "--predictor", "cache")
    assert all(e["bytes_sent"] > 0 for e in epochs)
    assert all(e["bytes_recv"] == 0 for e in epochs if e["mode"] == "stale")
    assert all(e.get("predicted_rows", 0) == 0 for e in epochs)  # cache never predicts


@needs_netns
def test_stale_epochs_can_reuse_the_last_sync_gradients_without_traffic(tmp_path, small_graph_npz):
    runs = {}
    for grad in ("skip", "last"):
        (tmp_path / grad).mkdir()
        runs[grad], _ = _train(tmp_path / grad, small_graph_npz, "--predictor", "cache", "--stale-grad", grad,
                               "--dropout", 0)
    skip, last = runs["skip"], runs["last"]
    assert all(e["bytes_sent"] == 0 and e["bytes_recv"] == 0 for e in last if e["mode"] == "stale")
    first = next(i for i, e in enumerate(last) if e["mode"] == "stale")
    assert [e["loss"] for e in last[: first + 1]] == [e["loss"] for e in skip[: first + 1]]
    assert last[first + 1]["loss"] != skip[first + 1]["loss"]  # the reused gradients moved the weights


@needs_netns
@pytest.mark.parametrize("bound, expect_pull", [(1e9, False), (1e-9, True)])
def test_adaptive_policy_pulls_only_drifting_rows(tmp_path, small_graph_npz, bound, expect_pull):
    epochs, halo = _train(tmp_path, small_graph_npz, "--predictor", "gated", "--sync-policy", "adaptive",
                          "--drift-bound", bound)
    stale = [e for e in epochs if e["mode"] == "stale"]
    pulled = [e["adaptive_rows"] for e in stale]
    if expect_pull:  # every row that moved at all is pulled (dead all-zero rows need not be)
        assert all(p > 0.5 * 2 * halo for p in pulled)
        assert all(e["bytes_recv"] > 0 for e in stale)
    else:
        assert pulled == [0] * len(stale) and all(e["bytes_recv"] == 0 for e in stale)


@needs_netns
def test_prediction_and_storage_tier_together(tmp_path, small_graph_npz):
    epochs, halo = _train(tmp_path, small_graph_npz, "--predictor", "gated", "--storage-tier",
                          tmp_path / "tier", "--subparts", 3, "--host-cache-budget", "128K")
    assert all(e["storage_bytes"] > 0 and 0 <= e["cache_hit_rate"] <= 1 for e in epochs)
    stale = [e for e in epochs if e["mode"] == "stale"]
    assert stale and all(e["bytes_recv"] == 0 for e in stale)
    assert all(e["predicted_rows"] + e["cached_rows"] == 2 * halo for e in stale)
    assert not any((tmp_path / "tier").rglob("*.bin"))  # the tier removed its files


@needs_netns
def test_gated_drift_transfer_serves_rows_closer_than_without_it(tmp_path, small_graph_npz):
    args = ("--predictor", "gated", "--sampling-ratio", 1.0, "--dropout", 0, "--measure-staleness")
    runs, halos = {}, {}
    for name, extra in (("transfer", ()), ("plain", ("--no-transfer",))):
        out = tmp_path / name
        out.mkdir()
        epochs, halos[name] = _train(out, small_graph_npz, *args, *extra, epochs=30)
        runs[name] = [e for e in epochs if e["mode"] == "stale"]
    moved = [e.get("transfer_rows", 0) for e in runs["transfer"]]
    assert sum(moved) > 0 and all(e.get("transfer_rows", 0) == 0 for e in runs["plain"])
    assert all(e["predicted_rows"] + e["cached_rows"] == 2 * halos["transfer"] for e in runs["transfer"])
    assert all(m <= e["predicted_rows"] for m, e in zip(moved, runs["transfer"]))

    def error(stale):
        return sum(e["pred_rows_l2"] for e in stale) / sum(e["pred_rows_cache_l2"] for e in stale)
    assert error(runs["transfer"]) < error(runs["plain"]) <= 1.0


@needs_netns
@pytest.mark.parametrize("stale_eval", [False, True])
def test_evaluation_of_a_stale_epoch_is_exact_unless_asked(tmp_path, small_graph_npz, stale_eval):
    """The accuracy reported at a stale epoch is that of the model (a single-process forward
    with the weights checkpointed at that epoch), unless --stale-eval asks for the rows
    served to training. Training moves 8-bit rows here (a stale run's default); evaluation
    moves float32 ones."""
    import torch

    from dgl_sni.config import ModelConfig
    from dgl_sni.data import load_npz
    from dgl_sni.reference import whole_graph_view
    from dgl_sni.train import FullGraphTrainer

    out, ckpt = tmp_path / "m.json", tmp_path / "ckpt"
    run_cli("train", "--dataset", small_graph_npz, "--workers", 2, "--layers", 3, "--epochs", 8,
            "--warmup", 2, "--sync-interval", 4, "--predictor", "cache", "--dropout", 0, "--lr", 0.05,
            "--checkpoint-dir", ckpt, "--quiet", "--metrics", out, *(("--stale-eval",) if stale_eval else ()))
    metrics = read_metrics(out)
    epochs = metrics["epochs"]
    assert metrics["config"]["quantize"] is None and metrics["in_effect"]["quantize"] == 8  # a stale run's default
    assert metrics["in_effect"]["allocator"] == "tcmalloc"  # preloaded by default (libtcmalloc-minimal4 installed)
    assert all(e["cpu_s"] > 0 and e["cpu_s"] == sum(w["cpu_s"] for w in e["workers"]) for e in epochs)
    synced = [e for e in epochs[1:] if e["mode"] == "sync"]  # epoch 0 also pulls the input features
    assert synced and all(e["bytes_recv"] == e["pulled_rows"] * 24 for e in synced)  # 16 codes + offset, scale
    data = load_npz(small_graph_npz)
    ref = FullGraphTrainer(ModelConfig(model="gcn", layers=3, hidden=16, dropout=0.0), whole_graph_view(data, "gcn"),
                           data.feat_dim, data.num_classes)
    stale = [e for e in epochs if e["mode"] == "stale"]
    assert [e["epoch"] for e in stale] == [3, 4, 5, 7]
    exact = []
    for e in stale:
        ref.model.load_state_dict(torch.load(ckpt / f"epoch_{e['epoch']}.pt")["model"])
        acc = ref.evaluate()
        exact.append(all(abs(e[k] - acc[k]) < 1e-9 for k in ("eval_train_acc", "val_acc", "test_acc")))
        assert (e["eval_bytes"] > 0) != stale_eval  # exact evaluation pulls fresh rows
    if stale_eval:
        assert not all(exact)  # served rows three epochs old at lr 0.05 change some predictions
    else:
        assert all(exact)


@needs_netns
def test_guarded_policy_decides_from_the_recorded_losses(tmp_path, small_graph_npz):
    """Every worker fed the same all-reduced losses to its schedule: replaying the recorded
    losses through a fresh schedule gives the recorded modes and intervals."""
    from dgl_sni.sni.schedule import GuardedSchedule
    epochs, _ = _train(tmp_path, small_graph_npz, "--predictor", "cache", "--sync-policy", "guarded",
                       "--sync-loss-gap", 0.0, epochs=16)
    replay = GuardedSchedule(warmup=2, budget=4, tolerance=0.0)
    for e in epochs:
        assert replay.mode(e["epoch"]) == e["mode"]
        replay.observe(e["epoch"], e["mode"], e["loss"])
        assert e["sync_interval_now"] == replay.interval
    assert any(e["mode"] == "stale" for e in epochs)
    assert len({e["sync_interval_now"] for e in epochs}) > 1  # at gap 0 this seed's run halves and grows
