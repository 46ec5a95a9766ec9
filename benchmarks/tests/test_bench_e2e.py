"""The end-to-end benchmark's judging: time to target, speed-ups and the figures over seeds."""
import json
import os

import pytest

from benchmarks import bench_e2e


def _run(name, epoch_s, val, test, interval=1):
    curve = [dict(epoch=i, mode="sync", train_time_s=(i + 1) * epoch_s, loss=1.0, val_acc=v, test_acc=test)
             for i, v in enumerate(val)]
    breakdown = {"sync": dict(time_s=epoch_s, comp_s=epoch_s / 2, comm_s=epoch_s / 2, bytes=8e6)}
    return dict(name=name, config=dict(sync_interval=interval), epoch_s=epoch_s, breakdown=breakdown,
                best_val_acc=max(val), final_test_acc=test, curve=curve)


def _seed(stale_val, stale_test):
    runs = [_run("interval1", 1.0, [0.5, 0.8, 0.9], 0.88), _run("stale", 0.5, stale_val, stale_test, 5)]
    return dict(bench_e2e.compare(runs, "1gbit", 4), runs=runs)


def test_time_to_target_is_judged_against_the_same_seeds_interval_1():
    judged = _seed([0.5, 0.89, 0.9], 0.87)
    base, stale = judged["runs"]
    assert judged["target_val_acc"] == 0.9 - 0.01 and judged["interval1_time_to_target_s"] == 3.0
    assert stale["time_to_target_s"] == 1.0 and stale["time_to_target_speedup"] == 3.0
    assert stale["epoch_speedup"] == 2.0 and abs(stale["final_test_delta"] + 0.01) < 1e-12


def test_over_seeds_reports_the_worst_seed_and_counts_a_miss_as_zero():
    summary = bench_e2e.over_seeds({0: _seed([0.5, 0.89, 0.9], 0.87), 1: _seed([0.5, 0.6, 0.7], 0.80),
                                    2: _seed([0.89, 0.9, 0.9], 0.90)})
    stale = summary["stale"]
    assert stale["seeds"] == 3 and stale["time_to_target_speedup_min"] == 0.0  # seed 1 never got there
    assert stale["time_to_target_speedup_median"] == 3.0
    assert abs(stale["final_test_delta_min"] + 0.08) < 1e-12
    assert abs(stale["final_test_delta_mean"] - (-0.01 - 0.08 + 0.02) / 3) < 1e-12
    mean = (-0.01 - 0.08 + 0.02) / 3
    sd = (sum((d - mean) ** 2 for d in (-0.01, -0.08, 0.02)) / 2) ** 0.5
    assert abs(stale["final_test_delta_sd"] - sd) < 1e-12
    assert summary["interval1"]["final_test_delta_sd"] == 0.0


def test_the_full_preset_runs_the_null_beside_interval_1():
    """Exact training with other dropout masks, from the same weights: the null that the
    paired final-test differences are read against."""
    from dgl_sni.config import TrainConfig
    assert bench_e2e.CONFIGS[0] == dict(name="interval1", preset="exact")
    null = bench_e2e.CONFIGS[1]
    assert null["preset"] == "exact" and null["dropout_stream"] > 0
    expanded = TrainConfig.from_dict({k: v for k, v in null.items() if k != "name"}).sni
    assert expanded.sync_interval == 1 and expanded.quantize == 0


def test_a_run_is_judged_by_the_settings_in_effect_not_the_unset_flags():
    epochs = [dict(epoch=i, mode="sync" if i % 5 == 0 else "stale", time_s=0.5, comp_s=0.2, comm_s=0.2,
                   sync_s=0.0, bytes_sent=1, bytes_recv=1, loss=1.0, val_acc=0.5, test_acc=0.5) for i in range(30)]
    metrics = dict(config=dict(sync_interval=5, quantize=None, smooth=None, warmup=0), epochs=epochs,
                   in_effect=dict(quantize=8, smooth=0.75))
    run = bench_e2e.summarize_run(metrics, "defaults")
    assert run["config"]["quantize"] == 8 and run["config"]["smooth"] == 0.75
    base = _run("interval1", 1.0, [0.5, 0.8, 0.9], 0.88)
    bench_e2e.compare([base, run], "1gbit", 4)
    floor = 0.5 + 0.5 / (5 * 4)  # interval 1's compute plus its communication over interval x compression
    assert abs(run["epoch_over_floor"] - 0.5 / floor) < 1e-12


def test_the_cpu_floor_is_the_trainers_cpu_time_over_the_hosts_cores():
    epochs = [dict(epoch=i, mode="stale", time_s=0.5, comp_s=0.3, comm_s=0.1, sync_s=0.1, cpu_s=0.8,
                   bytes_sent=1, bytes_recv=1, loss=1.0, val_acc=0.5, test_acc=0.5) for i in range(30)]
    run = bench_e2e.summarize_run(dict(config=dict(sync_interval=5, warmup=0), epochs=epochs), "stale")
    cores = os.cpu_count() or 1
    assert run["host_cores"] == cores and abs(run["cpu_floor_s"] - 0.8 / cores) < 1e-12
    assert run["breakdown"]["stale"]["cpu_s"] == 0.8
    bench_e2e.compare([_run("interval1", 1.0, [0.5, 0.8, 0.9], 0.88), run], "1gbit", 4)
    assert abs(run["epoch_over_cpu_floor"] - 0.5 / (0.8 / cores)) < 1e-12
    assert abs(run["cpu_bound_speedup"] - 1.0 / (0.8 / cores)) < 1e-12


def test_the_hosts_stolen_time_is_read_from_proc_stat_and_reported_per_run(tmp_path):
    from dgl_sni.metrics import host_steal_s, merge_epoch
    stat = tmp_path / "stat"
    ticks = os.sysconf("SC_CLK_TCK")
    stat.write_text(f"cpu  4419554 0 829543 8861321 23214 0 206734 {3 * ticks} 0 0\ncpu0 1 2 3 4 5 6 7 8 9 10\n")
    assert host_steal_s(str(stat)) == 3.0
    stat.write_text("cpu  1 2 3\n")  # an old kernel without the column
    assert host_steal_s(str(stat)) is None
    assert host_steal_s(str(tmp_path / "absent")) is None
    # every trainer reads the same host counter: the epoch keeps one reading, not their sum
    merged = merge_epoch([dict(epoch=0, mode="sync", steal_s=0.2, cpu_s=1.0), dict(epoch=0, mode="sync", steal_s=0.3, cpu_s=1.0)])
    assert merged["steal_s"] == 0.3 and merged["cpu_s"] == 2.0
    epochs = [dict(epoch=i, mode="sync", time_s=0.5, comp_s=0.3, comm_s=0.1, sync_s=0.1, cpu_s=0.8,
                   steal_s=0.05 if i % 2 else 0.15, bytes_sent=1, bytes_recv=1, loss=1.0, val_acc=0.5,
                   test_acc=0.5) for i in range(30)]
    run = bench_e2e.summarize_run(dict(config=dict(sync_interval=1), epochs=epochs), "interval1")
    cores = os.cpu_count() or 1
    measured = epochs[bench_e2e.SKIP:]
    want = sum(e["steal_s"] for e in measured) / (0.5 * len(measured) * cores)
    assert abs(run["steal_share"] - want) < 1e-12
    assert run["breakdown"]["sync"]["steal_s"] in (0.05, 0.15, 0.1)
    without = [{k: v for k, v in e.items() if k != "steal_s"} for e in epochs]
    assert bench_e2e.summarize_run(dict(config=dict(sync_interval=1), epochs=without), "i1")["steal_share"] is None


def test_each_seed_runs_its_configurations_in_a_rotated_order_and_judges_them_by_name(monkeypatch):
    """Over the seeds every configuration runs in every place of the sweep; the figures still
    go to the configuration that trained them, and the null gets its epoch over interval 1's."""
    configs = [dict(name="interval1", sync_interval=1), dict(name="null", sync_interval=1, dropout_stream=1),
               dict(name="stale", sync_interval=2)]
    swept = []

    def fake_sweep(dataset_args, workers, entries, out_dir, base_args=()):
        swept.extend(entries)
        out = []
        for e in entries:  # each run's epoch time says which configuration and seed trained it
            t = 0.1 * e["sync_interval"] + 0.01 * e.get("dropout_stream", 0) + 0.001 * e["seed"]
            modes = ["sync" if e["sync_interval"] == 1 or i % 2 == 0 else "stale" for i in range(e["epochs"])]
            out.append(dict(config=dict(e, warmup=0), epochs=[
                dict(epoch=i, mode=m, time_s=t if m == "sync" else t / 4, comp_s=t / 2, comm_s=t / 4, sync_s=0.0,
                     bytes_sent=1, bytes_recv=1, loss=1.0, val_acc=0.5, test_acc=0.5) for i, m in enumerate(modes)]))
        return out

    monkeypatch.setattr(bench_e2e, "run_sweep", fake_sweep)
    report = bench_e2e.run("quick", ["syn20k"], ["1gbit"], 12, configs, 2, seeds=[7, 8, 9])
    assert [(e["seed"], e["sync_interval"], e.get("dropout_stream", 0)) for e in swept] == [
        (7, 1, 0), (7, 1, 1), (7, 2, 0), (8, 1, 1), (8, 2, 0), (8, 1, 0), (9, 2, 0), (9, 1, 0), (9, 1, 1)]
    by_seed = report["graphs"]["syn20k"]["1gbit"]["by_seed"]
    for seed in (7, 8, 9):
        base, null, stale = by_seed[str(seed)]["runs"]
        assert (base["name"], null["name"], stale["name"]) == ("interval1", "null", "stale")
        assert abs(base["epoch_s"] - (0.1 + 0.001 * seed)) < 1e-12
        assert abs(null["sync_epoch_over_interval1"] - (0.11 + 0.001 * seed) / (0.1 + 0.001 * seed)) < 1e-12
        assert abs(stale["sync_epoch_over_interval1"] - (0.2 + 0.001 * seed) / (0.1 + 0.001 * seed)) < 1e-12
        assert "sync_epoch_over_interval1" not in base
    summary = report["graphs"]["syn20k"]["1gbit"]["over_seeds"]
    assert summary["stale"]["sync_epoch_over_interval1_max"] == max(
        by_seed[str(s)]["runs"][2]["sync_epoch_over_interval1"] for s in (7, 8, 9))
    assert summary["interval1"]["sync_epoch_over_interval1_median"] is None


def _sync_seed(stale_sync_s, extra=()):
    """A seed whose stale run's sync epochs take ``stale_sync_s`` against interval 1's 1.0 s."""
    runs = [_run("interval1", 1.0, [0.5, 0.8, 0.9], 0.88), _run("stale", stale_sync_s, [0.5, 0.89, 0.9], 0.87, 2)]
    runs += [_run(name, 0.7, [0.5, 0.89, 0.9], 0.87, 2) for name in extra]
    return dict(bench_e2e.compare(runs, "1gbit", 4), runs=runs)


def test_the_sync_epochs_median_comes_with_its_bootstrap_interval():
    ratios = [0.9, 1.0, 1.02, 1.05, 1.3]
    summary = bench_e2e.over_seeds({s: _sync_seed(r) for s, r in enumerate(ratios)})["stale"]
    low, high = summary["sync_epoch_over_interval1_interval90"]
    assert abs(summary["sync_epoch_over_interval1_median"] - 1.02) < 1e-12
    assert 0.9 <= low < 1.02 < high <= 1.3  # a sweep of 5 seeds could read its median anywhere here
    assert bench_e2e.median_interval(ratios) == [low, high]  # a fixed generator: files read the same
    assert bench_e2e.median_interval([1.1, 1.1, 1.1]) == [1.1, 1.1]
    assert bench_e2e.median_interval([1.1]) is None and bench_e2e.median_interval([]) is None
    wide = bench_e2e.median_interval(ratios, level=0.99)
    assert wide[0] <= low and wide[1] >= high


def test_pooled_sweeps_are_one_sweep_of_their_seeds_and_a_seed_counts_once():
    first = dict(graphs={"cora": {"1gbit": dict(by_seed={"0": _sync_seed(1.0), "1": _sync_seed(1.1)})}})
    second = dict(graphs={"cora": {"1gbit": dict(by_seed={"2": _sync_seed(0.9, ["f32"]),
                                                          "3": _sync_seed(1.2, ["f32"])})},
                          "syn200k": {"1gbit": dict(by_seed={"0": _sync_seed(0.6)})}})
    pooled = bench_e2e.pool([first, second])
    cora = pooled["graphs"]["cora"]["1gbit"]
    assert sorted(cora["by_seed"]) == ["0", "1", "2", "3"]
    # only the configurations every file ran are pooled, in the first file's order
    assert [r["name"] for r in cora["by_seed"]["3"]["runs"]] == ["interval1", "stale"]
    assert set(cora["over_seeds"]) == {"interval1", "stale"}
    stale = cora["over_seeds"]["stale"]
    assert stale["seeds"] == 4 and abs(stale["sync_epoch_over_interval1_median"] - 1.05) < 1e-12
    assert abs(stale["sync_epoch_over_interval1_max"] - 1.2) < 1e-12
    assert pooled["graphs"]["syn200k"]["1gbit"]["over_seeds"]["stale"]["seeds"] == 1
    with pytest.raises(ValueError, match="seed 0 is in more than one result file"):
        bench_e2e.pool([first, first])
    unseeded = dict(graphs={"cora": {"1gbit": _sync_seed(1.0)}})
    with pytest.raises(ValueError, match="without --seeds"):
        bench_e2e.pool([first, unseeded])


def test_pool_refuses_a_file_that_is_not_a_result_by_name(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(SystemExit):
        bench_e2e.main(["--pool", str(bad), "--out", str(tmp_path / "out.json")])
    assert "is not a bench_e2e result file" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench_e2e.main(["--pool", str(tmp_path / "absent.json")])
    assert "cannot read result file" in capsys.readouterr().err
    good = tmp_path / "good.json"
    good.write_text(json.dumps(dict(graphs={"cora": {"1gbit": dict(by_seed={"0": _sync_seed(1.0),
                                                                            "1": _sync_seed(1.1)})}})))
    assert bench_e2e.main(["--pool", str(good), "--out", str(tmp_path / "out.json")]) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["files"] == [str(good)] and out["graphs"]["cora"]["1gbit"]["over_seeds"]["stale"]["seeds"] == 2


def test_every_committed_sweep_is_valid_and_judged_against_interval_1_first():
    import glob
    import json
    from dgl_sni.config import TrainConfig
    files = sorted(glob.glob(os.path.join(os.path.dirname(os.path.dirname(__file__)), "configs", "*.json")))
    assert any(f.endswith("paper.json") for f in files)
    for path in files:
        with open(path) as fh:
            configs = json.load(fh)
        assert configs[0]["name"] == "interval1" and configs[0]["preset"] == "exact", path
        assert len({c["name"] for c in configs}) == len(configs), path
        for c in configs:
            TrainConfig.from_dict({k: v for k, v in c.items() if k != "name"}).validate()
