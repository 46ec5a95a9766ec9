"""The committed record: compact copies judge as the full metrics do, a replay returns what was
recorded and names what it lacks, and the published report is what the record regenerates."""
import os
import re
import shutil

import pytest

from benchmarks import bench_e2e, record, report_pages as pages, results_report as rr

GRAPH = ["--dataset", "synthetic", "--nodes", 1000]


def _metrics(seed: int, n_epochs: int = 6) -> dict:
    epochs = []
    for i in range(n_epochs):
        workers = [dict(time_s=0.1 + 0.01 * w, comp_s=0.05, comm_s=0.03, bytes_sent=100 * (w + 1)) for w in range(2)]
        epochs.append(dict(epoch=i, mode="sync" if i % 2 == 0 else "stale", loss=2.0 - 0.1 * i - seed,
                           val_acc=0.5 + 0.05 * i, test_acc=0.5 + 0.04 * i, time_s=0.11, comp_s=0.05, comm_s=0.03,
                           sync_s=0.0, cpu_s=0.2, bytes_sent=300, bytes_recv=300, workers=workers))
    return dict(config=dict(sync_interval=2, warmup=0, seed=seed, workers=2), epochs=epochs,
                summary=dict(workers=[dict(owned_nodes=500, halo_nodes=200, local_edges=4000)] * 2),
                partition=dict(num_nodes=1000), in_effect=dict(smooth=0.0), saved="2026-12-06 10:00")


def test_a_compact_copy_drops_the_per_worker_lists_and_judges_as_the_full_metrics():
    full = _metrics(0)
    small = record.compact(full, cores=os.cpu_count())
    assert all("workers" not in e for e in small["epochs"]) and all("workers" in e for e in full["epochs"])
    assert [{k: v for k, v in e.items() if k != "workers"} for e in full["epochs"]] == small["epochs"]
    assert bench_e2e.summarize_run(small, "x") == bench_e2e.summarize_run(full, "x")


def test_a_replay_returns_what_was_recorded_in_any_order_and_names_a_missing_run(tmp_path, monkeypatch):
    trained = []

    def fake_sweep(dataset_args, workers, runs, out_dir, base_args=()):
        trained.extend(runs)
        return [_metrics(r["seed"]) for r in runs]

    monkeypatch.setattr(record, "run_sweep", fake_sweep)
    runs = [dict(preset="exact", seed=0, epochs=6), dict(preset="fast", seed=1, epochs=6)]
    live = record.Recorder("quick", str(tmp_path)).sweep(GRAPH, 2, runs, "/x/syn1k-1gbit-w2")
    first = (tmp_path / "quick" / "runs-syn1k-1gbit-w2.json.gz").read_bytes()
    again = record.Replay("quick", str(tmp_path)).sweep(GRAPH, 2, runs[::-1], "/elsewhere/syn1k-1gbit-w2")
    assert again == live[::-1] and len(trained) == 2
    record.Recorder("quick", str(tmp_path)).sweep(GRAPH, 2, runs, "/x/syn1k-1gbit-w2")
    assert (tmp_path / "quick" / "runs-syn1k-1gbit-w2.json.gz").read_bytes() == first  # same runs, same bytes
    with pytest.raises(record.MissingRun, match="syn1k-1gbit-w2.*'seed': 2"):
        record.Replay("quick", str(tmp_path)).sweep(GRAPH, 2, [dict(preset="exact", seed=2, epochs=6)],
                                                    "/x/syn1k-1gbit-w2")
    with pytest.raises(record.MissingRun):  # another setting is another run
        record.Replay("quick", str(tmp_path)).sweep(GRAPH, 2, [dict(preset="exact", seed=0, epochs=7)],
                                                    "/x/syn1k-1gbit-w2")
    assert sorted(m["config"]["seed"] for m in record.Replay("quick", str(tmp_path)).all_runs()) == [0, 1]


def test_a_run_kept_before_a_setting_existed_is_that_settings_default_and_no_other_value(tmp_path, monkeypatch):
    from benchmarks import _sweep
    monkeypatch.setattr(record, "run_sweep", lambda dataset_args, workers, runs, out_dir, base_args=():
                        [_metrics(r["seed"]) for r in runs])
    runs = [dict(preset="fast", seed=0, epochs=6)]
    record.Recorder("quick", str(tmp_path)).sweep(GRAPH, 2, runs, "/x/syn1k-1gbit-w2")
    path = tmp_path / "quick" / "runs-syn1k-1gbit-w2.json.gz"
    import gzip
    import json
    kept = json.loads(gzip.decompress(path.read_bytes()))
    (key, value), = kept.items()
    folder, settings = key.split("|", 1)
    older = {k: v for k, v in json.loads(settings).items() if k not in _sweep.ADDED}  # kept before they existed
    assert len(older) < len(json.loads(settings))
    record.Recorder("quick", str(tmp_path))._write("runs-syn1k-1gbit-w2", {folder + "|" + json.dumps(older): value})
    assert record.Replay("quick", str(tmp_path)).sweep(GRAPH, 2, runs, "/x/syn1k-1gbit-w2") == [value]
    with pytest.raises(record.MissingRun):  # an added setting away from its default is another run
        record.Replay("quick", str(tmp_path)).sweep(GRAPH, 2, [dict(runs[0], bit_choice="adaptive")],
                                                    "/x/syn1k-1gbit-w2")
    record.Recorder("quick", str(tmp_path)).sweep(GRAPH, 2, runs, "/x/syn1k-1gbit-w2")  # kept again: its full key
    assert list(json.loads(gzip.decompress(path.read_bytes()))) == [key]
    assert _sweep.matches(dict(quantize=8), dict(quantize="8", bit_choice="fixed"))
    assert not _sweep.matches(dict(quantize=8), dict(quantize="8", smooth="0.75"))  # only the declared ones


def test_an_empty_record_is_refused_with_its_folder_named(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        rr.main(["--no-run", "--record", str(tmp_path), "--doc", str(tmp_path / "R.md")])
    assert exc.value.code == 2 and f"{tmp_path}/quick holds no record of the quick suite" in capsys.readouterr().err


def test_the_published_report_is_what_the_committed_record_regenerates(tmp_path):
    with open(pages.DOC) as fh:
        published = fh.read()
    suite = re.search(r"^Suite `(\w+)`", published, re.M).group(1)
    readme = tmp_path / "README.md"
    shutil.copy(pages.README, readme)
    code = rr.main(["--no-run", "--doc", str(tmp_path / "RESULTS.md"), "--readme", str(readme)]
                   + (["--full"] if suite == "full" else []))
    assert code == 0
    assert (tmp_path / "RESULTS.md").read_text() == published
    with open(pages.README) as fh:
        assert readme.read_text() == fh.read()
    drawn = sorted(os.listdir(tmp_path / "figures" / "results"))
    assert drawn == sorted(os.listdir(os.path.join(os.path.dirname(pages.DOC), "figures", "results")))


def test_a_replay_reports_the_seeds_its_record_holds(tmp_path, monkeypatch):
    """Seed 0 of a part recorded, seed 1 not: the replayed part holds seed 0 and says so; a part
    with no recorded seed is left out (the report names it as not measured)."""
    from benchmarks import report_suite as suite

    def fake_sweep(dataset_args, workers, runs, out_dir, base_args=()):
        out = []
        for r in runs:
            m = _metrics(r.get("seed", 0), n_epochs=8)
            m["config"] = dict(m["config"], sync_interval=1, workers=workers)
            out.append(m)
        return out

    monkeypatch.setattr(record, "run_sweep", fake_sweep)
    monkeypatch.setattr(suite, "_present", lambda graph: True)
    part = dict(graphs=["syn20k"], links=["1gbit"], epochs=8, seeds=[0])
    suite.comparison(part, record.Recorder("quick", str(tmp_path)))
    replayed = suite.comparison(dict(part, graphs=["syn20k", "cora"], seeds=[0, 1]),
                                record.Replay("quick", str(tmp_path)))
    assert list(replayed["graphs"]) == ["syn20k"]
    assert replayed["graphs"]["syn20k"]["1gbit"]["measured"]["seeds"] == [0]
    assert sorted(replayed["single_process"]) == ["syn20k"]
