"""dgl-sni train with stale epochs: what crosses the network, what the agent serves.

The runs of this module (2 workers, 3 layers, the fast preset synced every 4th epoch after a
warm-up of 2, unless a run says otherwise) train one after another on one emulated cluster (a sweep:
one start-up); each test reads its own runs.
"""
import pytest

from tests.helpers import needs_netns, train_sweep

BASE = dict(preset="fast", epochs=10, warmup=2, sync_interval=4)
RUNS = {
    "pull-nothing": dict(predictor="gated", sampling_ratio=0.3, stale_grad="skip", measure_staleness=True,
                         dropout=0.0),
    "defaults": dict(),  # the fast preset's stale settings
    "bit-choice": dict(bit_choice="adaptive"),  # the same with a width per row (AdaQP's choice)
    "bit-choice-measured": dict(bit_choice="adaptive", measure_staleness=True, stale_halo="rows"),
    # boundary node sampling of the sync steps (BNS-GCN in fast's setting): every row, in float32
    # beside the same run unsampled; half the rows at 8 bits beside "defaults"
    "float32": dict(quantize=0),
    "sampled-every-row": dict(quantize=0, halo_sample=1.0),
    "sampled-half": dict(halo_sample=0.5),
    "exchange": dict(predictor="cache", stale_grad="exchange"),
    "skip": dict(predictor="cache", stale_grad="skip", dropout=0.0),
    "last": dict(predictor="cache", stale_grad="last", dropout=0.0),
    **{f"adaptive-{bound:g}": dict(predictor="gated", sync_policy="adaptive", drift_bound=bound)
       for bound in (1e9, 1e-9)},
    **{name: dict(predictor="gated", sampling_ratio=1.0, dropout=0.0, measure_staleness=True, epochs=30,
                  transfer=name == "transfer") for name in ("transfer", "plain")},
    **{f"eval-{stale}": dict(epochs=8, predictor="cache", dropout=0.0, lr=0.05, stale_eval=stale)
       for stale in (False, True)},
    "guarded": dict(predictor="cache", sync_policy="guarded", sync_loss_gap=0.0, epochs=16),
    # weights frozen (steps below float32 resolution, dropout off): every step's true rows and
    # gradients are the same, so served, summed and reused ones must give the exact gradients
    **{f"frozen-{name}": dict(predictor="cache", lr=1e-30, dropout=0.0, weight_decay=0.0, quantize=0, **extra)
       for name, extra in (("rows", dict(stale_halo="rows", stale_grad="exchange")),
                           ("summed", dict(stale_halo="summed", stale_grad="exchange", sync_halo="rows")),
                           ("last", dict(stale_halo="summed", stale_grad="last", sync_halo="inputs")),
                           ("sync-summed", dict(stale_halo="summed", stale_grad="last", sync_halo="summed")))},
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, small_graph_npz):
    """Per run name: (metrics, checkpoint folder); every run of ``RUNS`` on one cluster."""
    names = list(RUNS)
    out = train_sweep(tmp_path_factory.mktemp("sni-train"), [dict(BASE, **RUNS[n]) for n in names],
                      "--dataset", small_graph_npz, "--workers", 2, "--layers", 3, checkpoints=True)
    return dict(zip(names, out))


def _epochs(runs, name):
    metrics, _ = runs[name]
    halo = sum(w["halo_nodes"] for w in metrics["summary"]["workers"])
    return metrics["epochs"], halo


@needs_netns
def test_stale_epochs_pull_nothing_and_serve_every_halo_row(runs):
    epochs, halo = _epochs(runs, "pull-nothing")
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
def test_stale_epochs_move_nothing_by_default_and_push_gradients_when_asked(runs):
    """By default a stale epoch serves the cache (never a prediction) and sums no halo row: the
    sync epochs sum their fresh rows (the owners' averages over steps) and update the sums of the
    cache's rows, which change only there (2 hidden layers, every worker its own halo); it pushes
    no halo gradient (it adds them to their average, pushed at the next sync);
    ``--stale-grad exchange`` pushes them."""
    (metrics, _), (epochs, halo) = runs["defaults"], _epochs(runs, "defaults")
    # --sync-halo auto: this graph's partitions have few halo rows beside the owned rows they reach
    assert {k: metrics["in_effect"][k] for k in ("quantize", "smooth", "stale_halo", "sync_halo")} == \
        dict(quantize=8, smooth=0.0, stale_halo="summed", sync_halo="rows")
    assert (metrics["config"]["row_average"], metrics["config"]["grad_average"]) == (0.9, 0.9)
    assert (metrics["config"]["predictor"], metrics["config"]["stale_grad"]) == ("cache", "last")
    assert all(e.get("predicted_rows", 0) == 0 for e in epochs)
    assert [e.get("summed_rows", 0) for e in epochs] == [2 * halo] * 3 + [0] * 3 + [2 * halo] + [0] * 3
    assert all(e["cached_rows"] == 2 * halo for e in epochs if e["mode"] == "stale")
    assert all(e["bytes_sent"] == e["bytes_recv"] == 0 for e in epochs if e["mode"] == "stale")
    assert all(e["bytes_sent"] > 0 and e["bytes_recv"] > 0 for e in epochs if e["mode"] == "sync")
    exchanged, _ = _epochs(runs, "exchange")
    assert all(e["bytes_sent"] > 0 for e in exchanged)
    assert all(e["bytes_recv"] == 0 for e in exchanged if e["mode"] == "stale")


@needs_netns
def test_a_width_per_row_moves_fewer_bytes_than_8_bits_and_trains_alike(runs):
    """``--bit-choice adaptive``: the sync epochs' rows arrive at several widths (the owners'
    servers chose them) and the sync epochs move fewer bytes than the same run at 8 bits each
    way; the rounding leaves the losses near the 8-bit run's."""
    fixed, _ = runs["defaults"]
    chosen, _ = runs["bit-choice"]
    effect = chosen["in_effect"]
    assert effect["bit_choice"] == "adaptive" and fixed["in_effect"]["bit_choice"] == "fixed"
    widths = {int(b): n for b, n in effect["pulled_bits"].items() if n}
    assert len(widths) >= 2 and set(widths) <= {2, 4, 8}
    for a, b in zip(chosen["epochs"], fixed["epochs"]):
        assert a["mode"] == b["mode"]
        if a["mode"] == "sync":
            assert 0 < a["bytes_recv"] < b["bytes_recv"] and 0 < a["bytes_sent"] < b["bytes_sent"]
        assert abs(a["loss"] - b["loss"]) < 0.05 * b["loss"]
    # the widths count the rows training pulled: a stale epoch's measurement pulls add none
    measured, _ = runs["bit-choice-measured"]
    assert any(e.get("measure_bytes", 0) > 0 for e in measured["epochs"])
    assert sum(measured["in_effect"]["pulled_bits"].values()) == sum(widths.values())


@needs_netns
def test_sampled_syncs_feed_the_stale_epochs_what_they_pulled(runs):
    """``--halo-sample`` with stale epochs: sampling every row pulls every row through the
    sampled requests, observed as a sync's rows, so the stale epochs serve and sum the same rows
    as the unsampled run: the same losses to float order. Sampling half at 8 bits moves about
    half the rows each way at the syncs (decoded, the run trains) and nothing on stale epochs,
    which serve every halo row from the cache."""
    (plain, _), (every, _) = runs["float32"], runs["sampled-every-row"]
    for a, b in zip(plain["epochs"], every["epochs"]):
        assert a["mode"] == b["mode"] and abs(a["loss"] - b["loss"]) < 1e-5 * abs(a["loss"]), (a, b)
    assert every["config"]["halo_sample"] == 1.0 and every["in_effect"]["quantize"] == 0
    (full, halo), (half, _) = _epochs(runs, "defaults"), _epochs(runs, "sampled-half")
    assert runs["sampled-half"][0]["in_effect"]["quantize"] == 8
    for f, h in zip(full, half):
        assert f["mode"] == h["mode"]
        if h["mode"] == "sync":
            for key in ("pulled_rows", "pushed_rows", "bytes_recv", "bytes_sent"):
                assert 0.3 < h[key] / f[key] < 0.7, (key, h[key], f[key])
        else:
            assert h["bytes_sent"] == h["bytes_recv"] == 0 and h["cached_rows"] == 2 * halo
    losses = [e["loss"] for e in half]
    assert all(0 < x < 10 for x in losses) and losses != [e["loss"] for e in full]


@needs_netns
def test_stale_epochs_can_reuse_the_last_sync_gradients_without_traffic(runs):
    (skip, _), (last, _) = _epochs(runs, "skip"), _epochs(runs, "last")
    assert all(e["bytes_sent"] == 0 and e["bytes_recv"] == 0 for e in last if e["mode"] == "stale")
    first = next(i for i, e in enumerate(last) if e["mode"] == "stale")
    assert [e["loss"] for e in last[: first + 1]] == [e["loss"] for e in skip[: first + 1]]
    assert last[first + 1]["loss"] != skip[first + 1]["loss"]  # the reused gradients moved the weights


@needs_netns
@pytest.mark.parametrize("bound, expect_pull", [(1e9, False), (1e-9, True)])
def test_adaptive_policy_pulls_only_drifting_rows(runs, bound, expect_pull):
    epochs, halo = _epochs(runs, f"adaptive-{bound:g}")
    stale = [e for e in epochs if e["mode"] == "stale"]
    pulled = [e["adaptive_rows"] for e in stale]
    if expect_pull:  # every row that moved at all is pulled (dead all-zero rows need not be)
        assert all(p > 0.5 * 2 * halo for p in pulled)
        assert all(e["bytes_recv"] > 0 for e in stale)
    else:
        assert pulled == [0] * len(stale) and all(e["bytes_recv"] == 0 for e in stale)


@needs_netns
def test_prediction_and_storage_tier_together(tmp_path, small_graph_npz):
    (metrics, _), = train_sweep(tmp_path, [dict(BASE, predictor="gated")], "--dataset", small_graph_npz,
                                "--workers", 2, "--layers", 3, "--storage-tier", tmp_path / "tier",
                                "--subparts", 3, "--host-cache-budget", "128K")
    epochs, halo = metrics["epochs"], sum(w["halo_nodes"] for w in metrics["summary"]["workers"])
    assert all(e["storage_bytes"] > 0 and 0 <= e["cache_hit_rate"] <= 1 for e in epochs)
    stale = [e for e in epochs if e["mode"] == "stale"]
    assert stale and all(e["bytes_recv"] == 0 for e in stale)
    assert all(e["predicted_rows"] + e["cached_rows"] == 2 * halo for e in stale)
    assert not any((tmp_path / "tier").rglob("*.bin"))  # the tier removed its files


@needs_netns
def test_gated_drift_transfer_serves_rows_closer_than_without_it(runs):
    stale, halos = {}, {}
    for name in ("transfer", "plain"):
        epochs, halos[name] = _epochs(runs, name)
        stale[name] = [e for e in epochs if e["mode"] == "stale"]
    moved = [e.get("transfer_rows", 0) for e in stale["transfer"]]
    assert sum(moved) > 0 and all(e.get("transfer_rows", 0) == 0 for e in stale["plain"])
    assert all(e["predicted_rows"] + e["cached_rows"] == 2 * halos["transfer"] for e in stale["transfer"])
    assert all(m <= e["predicted_rows"] for m, e in zip(moved, stale["transfer"]))

    def error(stale):
        return sum(e["pred_rows_l2"] for e in stale) / sum(e["pred_rows_cache_l2"] for e in stale)
    assert error(stale["transfer"]) < error(stale["plain"]) <= 1.0


@needs_netns
@pytest.mark.parametrize("stale_eval", [False, True])
def test_evaluation_of_a_stale_epoch_is_exact_unless_asked(runs, small_graph_npz, stale_eval):
    """The accuracy reported at a stale epoch is that of the model (a single-process forward
    with the weights checkpointed at that epoch), unless --stale-eval asks for the rows
    served to training. Training moves 8-bit rows here (a stale run's default); evaluation
    moves float32 ones."""
    import torch

    from dgl_sni.config import ModelConfig
    from dgl_sni.data import load_npz
    from dgl_sni.reference import whole_graph_view
    from dgl_sni.trainers import FullGraphTrainer

    metrics, ckpt = runs[f"eval-{stale_eval}"]
    epochs = metrics["epochs"]
    assert metrics["config"]["quantize"] == metrics["in_effect"]["quantize"] == 8  # the fast preset's
    assert metrics["in_effect"]["allocator"] == "tcmalloc"  # preloaded by default (libtcmalloc-minimal4 installed)
    assert metrics["config"]["stale_halo"] == metrics["in_effect"]["stale_halo"] == "summed"
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
def test_guarded_policy_decides_from_the_recorded_losses(runs):
    """Every worker fed the same all-reduced losses to its schedule: replaying the recorded
    losses through a fresh schedule gives the recorded modes and intervals."""
    from dgl_sni.sni.schedule import GuardedSchedule
    epochs, _ = _epochs(runs, "guarded")
    replay = GuardedSchedule(warmup=2, budget=4, tolerance=0.0)
    for e in epochs:
        assert replay.mode(e["epoch"]) == e["mode"]
        replay.observe(e["epoch"], e["mode"], e["loss"])
        assert e["sync_interval_now"] == replay.interval
    assert any(e["mode"] == "stale" for e in epochs)
    assert len({e["sync_interval_now"] for e in epochs}) > 1  # at gap 0 this seed's run halves and grows


@needs_netns
def test_with_frozen_weights_summed_rows_and_reused_gradients_give_the_exact_gradients(runs):
    """Stale epochs serve the cache's rows (their average over syncs) and, summed, feed each
    layer their sum; ``--stale-grad last`` gives owned rows the average of the gradients
    received at syncs. With the weights frozen all of these equal the true ones, so every
    epoch's loss and Adam's moments (which add up every step's gradient) must match the run
    whose stale epochs take the rows as fresh ones and push their halo gradients, whichever
    way the sync epochs take their halo rows (``--sync-halo rows``, ``inputs``, ``summed``)."""
    import torch

    (rows, rows_ckpt), (summed, summed_ckpt), (last, last_ckpt), (sync, sync_ckpt) = (
        runs[f"frozen-{name}"] for name in ("rows", "summed", "last", "sync-summed"))
    assert [e["mode"] for e in rows["epochs"]].count("stale") == 6
    assert all(e.get("summed_rows", 0) == 0 for e in rows["epochs"])
    assert all(e["bytes_sent"] == 0 for e in last["epochs"] if e["mode"] == "stale")  # nothing pushed
    # every --sync-halo (summed: sync, rows: summed, inputs: last): the syncs sum their fresh rows
    # (summed: to train on them; rows and inputs: for the stale epochs only), and the stale epochs
    # reuse the updated sums ...
    for run in (sync, summed, last):
        assert all((e.get("summed_rows", 0) > 0) == (e["mode"] == "sync") for e in run["epochs"])
        # ... without asking the agent for the rows they no longer need (still counted as the cache's)
        halo = sum(w["halo_nodes"] for w in run["summary"]["workers"])
        assert all(e["cached_rows"] == 2 * halo and e.get("agent_wait_s", 0) == 0
                   for e in run["epochs"] if e["mode"] == "stale")
    for other in (summed, last, sync):
        for a, b in zip(rows["epochs"], other["epochs"]):
            assert a["mode"] == b["mode"] and abs(a["loss"] - b["loss"]) < 1e-5 * abs(a["loss"]), (a, b)
    final = f"epoch_{BASE['epochs'] - 1}.pt"
    want = torch.load(rows_ckpt / final)["optimizer"]["state"]
    for ckpt in (summed_ckpt, last_ckpt, sync_ckpt):
        got = torch.load(ckpt / final)["optimizer"]["state"]
        for key in want:
            for moment in ("exp_avg", "exp_avg_sq"):
                assert torch.allclose(got[key][moment], want[key][moment], rtol=1e-3, atol=1e-9), (ckpt, key, moment)
