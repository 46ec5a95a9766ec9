"""The cost model: fitted to runs it generated, it gives their epochs back; it covers only
the runs it models; a projection states its assumptions."""
import json

import pytest

from dgl_sni import estimate as est
from dgl_sni.cli import main
from dgl_sni.config import TrainConfig

TRUE = est.Costs(c_agg=2e-9, c_proj=4e-10, c_0=0.002, k_link=1.8, k_veth=1e-9, c_row=8e-8, c_msg=2e-4, c_x=0.03,
                 overlap=0.9, w_sync=0.01, stale_share=0.7, w_stale=0.015)


def metrics(nodes, degree, feat, bandwidth, preset, interval=None, bits=None, workers=4, extra=None):
    """A metrics file whose steps the model with ``TRUE`` gives exactly."""
    cfg = TrainConfig.from_dict(dict(preset=preset, workers=workers, bandwidth=bandwidth, layers=3, hidden=16,
                                     **({} if interval is None else dict(sync_interval=interval)),
                                     **({} if bits is None else dict(quantize=bits)), **(extra or {}))).as_dict()
    owned = nodes // workers
    workers_setup = [dict(owned_nodes=owned, halo_nodes=int(owned * 2.2), local_edges=owned * (degree + 1))] * workers
    m = dict(config=cfg, partition=dict(num_nodes=nodes, num_edges=nodes * degree, feat_dim=feat, num_classes=8),
             summary=dict(workers=workers_setup), epochs=[])
    cl, _ = est.from_metrics(dict(m, epochs=[dict(time_s=1, mode="sync")]), cores=2)
    steps = TRUE.steps(cl)
    for epoch in range(40):
        mode = "sync" if epoch < 5 or cl.interval == 1 or epoch % cl.interval == 0 else "stale"
        comp = steps["compute_s"] * (1 if mode == "sync" else TRUE.stale_share)
        m["epochs"].append(dict(epoch=epoch, mode=mode, time_s=steps[f"{mode}_s"], comp_s=comp,
                                comm_s=steps["comm_s"] if mode == "sync" else 0.0,
                                sync_s=TRUE.w_sync if mode == "sync" else TRUE.w_stale))
    return m


def write_runs(tmp_path, runs):
    folder = tmp_path / "runs"
    folder.mkdir()
    for i, m in enumerate(runs):
        (folder / f"run{i:03d}.json").write_text(json.dumps(m))
    return str(folder)


RUNS = [metrics(n, d, f, bw, preset, **kw)
        for n, d, f in ((200_000, 20, 64), (50_000, 8, 500), (500_000, 12, 100), (100_000, 30, 300))
        for bw, preset, kw in ((None, "exact", {}), ("1gbit", "exact", {}), ("1gbit", "fast", {}),
                               ("1gbit", "fast", dict(interval=4, bits=4)), (None, "fast", {}),
                               ("1gbit", "exact", dict(workers=2)), ("1gbit", "fast", dict(workers=8)))]


def test_fitted_on_its_own_runs_the_model_gives_their_epochs_back(tmp_path):
    runs = est.load([write_runs(tmp_path, RUNS)], cores=2)
    assert len(runs) == len(RUNS)
    rows = est.check(est.fit(runs), runs)
    assert max(abs(r["error"]) for r in rows) < 0.02, est.format_check(rows)
    assert max(abs(r["error"]) for r in est.holdout(runs)) < 0.05


def test_only_modelled_runs_are_read(tmp_path):
    other = [metrics(200_000, 20, 64, "1gbit", "fast", extra=dict(predictor="gated")),
             metrics(200_000, 20, 64, "1gbit", "exact", extra=dict(model="sage"))]
    assert est.load([write_runs(tmp_path, other)], cores=2) == []
    with pytest.raises(ValueError, match="at least 4 runs"):
        est.fit([])
    with pytest.raises(ValueError, match="no such metrics file"):
        est.load([str(tmp_path / "absent")])


def test_a_projection_prints_its_figures_and_assumptions(tmp_path, capsys):
    folder = write_runs(tmp_path, RUNS)
    costs = tmp_path / "costs.json"
    assert main(["estimate", "--fit", folder, "--cores", "2", "--save", str(costs)]) == 0
    assert main(["estimate", "--costs", str(costs), "--workers", "16", "--bandwidth", "10gbit", "--nodes", "2449029",
                 "--avg-degree", "50", "--feat-dim", "100", "--classes", "47", "--interval", "8", "--bits", "8"]) == 0
    out = capsys.readouterr().out
    assert "16 workers, 10gbit links" in out and "compute x1:" in out and "assumptions: a worker's compute" in out
    assert main(["estimate", "--costs", str(costs), "--workers", "16"]) == 2
    assert "needs --nodes, --avg-degree, --feat-dim, --classes" in capsys.readouterr().err


SMALL = est.Cluster(workers=2, rate_bits=1e9, owned=100, halo=50, edges=1000, feat_dim=10, hidden=4, classes=3,
                    layers=3, bits=32, interval=4)
UNIT = est.Costs(c_agg=1e-6, c_proj=1e-6, c_0=0.001, k_link=1.0, k_veth=0.0, c_row=1e-5, c_msg=1e-3, c_x=0.002,
                 overlap=0.5, w_sync=0.003, stale_share=0.5, w_stale=0.001)


def test_the_steps_of_a_small_cluster_as_computed_by_hand():
    # widths out 4, 4, 3 and in 10, 4, 4: aggregation 1000 edges x 11 = 11000; projection 150 rows x 10 x 4
    # + 100 owned x (4x4 + 4x3) = 8800; compute 0.011 + 0.0088 + 0.001 = 0.0208. Exchange: 2 layers x 50 halo
    # rows x 16 bytes = 1600 bytes each way = 1.28e-5 s at 1 Gbit/s; 200 rows moved; 4 messages:
    # 1.28e-5 + 0.002 + 0.004 + 0.002 = 0.0080128
    steps = UNIT.steps(SMALL)
    assert steps["compute_s"] == pytest.approx(0.0208)
    assert steps["comm_s"] == pytest.approx(0.0080128)
    assert steps["sync_s"] == pytest.approx(0.0208 + 0.5 * 0.0080128 + 0.003)
    assert steps["stale_s"] == pytest.approx(0.5 * 0.0208 + 0.001)
    assert steps["epoch_s"] == pytest.approx((0.0278064 + 3 * 0.0114) / 4)
    fast = UNIT.steps(est.Cluster(**{**SMALL.__dict__, "compute_speed": 2.0}))  # compute halves, nothing else
    assert fast["compute_s"] == pytest.approx(0.0104) and fast["comm_s"] == pytest.approx(0.0080128)


def test_a_stale_schedule_gains_more_on_slower_links_and_faster_compute():
    cl = est.Cluster(**{**SMALL.__dict__, "owned": 50_000, "halo": 100_000, "edges": 1e6, "hidden": 16, "bits": 8,
                        "interval": 8})
    curves = est.advantage(TRUE, cl, [1e8, 1e9, 1e10], [1, 10])
    assert curves[1][0] > curves[1][1] > curves[1][2] > 1.0  # the slower the link, the larger the gain
    assert all(f > s for f, s in zip(curves[10], curves[1]))  # faster compute: the exchange weighs more


def test_a_fresh_install_projects_from_the_shipped_costs(tmp_path, capsys):
    assert main(["estimate", "--workers", "16", "--bandwidth", "10gbit", "--nodes", "232965", "--avg-degree", "492",
                 "--feat-dim", "602", "--classes", "41", "--interval", "8", "--bits", "8", "--compute-speed", "20",
                 "--plot", str(tmp_path / "a.png")]) == 0
    out = capsys.readouterr().out
    assert "costs shipped with dgl-sni: benchmarks/record/" in out and "compute x20:" in out
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["estimate", "--workers", "16", "--nodes", "1", "--avg-degree", "1", "--feat-dim", "1", "--classes",
                 "2", "--compute-speed", "0"]) == 2
    assert "--compute-speed must be positive, got 0.0" in capsys.readouterr().err
