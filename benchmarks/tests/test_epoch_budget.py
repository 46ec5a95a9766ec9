"""What a stale run's epochs would have had to cost, from result files made up here (no cluster)."""
import json

import pytest

from benchmarks import epoch_budget


def _run(name, sooner, epochs=1.1, sync=0.2, stale=0.1, k=5.0):
    breakdown = dict(sync=dict(time_s=sync))
    if stale is not None:
        breakdown["stale"] = dict(time_s=stale)
    return dict(name=name, breakdown=breakdown, epochs_per_sync=k, time_to_target_speedup=sooner,
                epochs_to_target_ratio=epochs, epoch_s=0.3)


def _result(seeds):
    return dict(graphs=dict(g=dict(l=dict(by_seed={
        str(s): dict(runs=[_run("interval1", 1.0, stale=None), *runs]) for s, runs in seeds.items()}))))


def test_the_budget_is_the_epoch_cost_that_would_have_met_the_target():
    # mean epoch (200 + 4 * 100) / 5 = 120 ms, 2.0x sooner; 2.5x needs 120 * 2.0 / 2.5 = 96 ms:
    # stale epochs of (5 * 96 - 200) / 4 = 70 ms, or syncs of 5 * 96 - 4 * 100 = 80 ms
    row = epoch_budget.budget(_run("fast", 2.0), 2.5)
    assert row["stale_needed_ms"] == pytest.approx(70.0) and row["sync_needed_ms"] == pytest.approx(80.0)
    assert (row["sync_ms"], row["stale_ms"], row["k"]) == (pytest.approx(200.0), pytest.approx(100.0), 5.0)
    met = epoch_budget.budget(_run("fast", 3.0), 2.5)  # already sooner: the budget is above the cost
    assert met["stale_needed_ms"] > 100.0 and met["sync_needed_ms"] > 200.0
    assert "stale_needed_ms" not in epoch_budget.budget(_run("fast", None), 2.5)


def test_medians_over_seeds_of_every_file_count_a_seed_that_never_reached_as_zero():
    files = [_result({0: [_run("fast", 2.0)], 1: [_run("fast", None)]}), _result({2: [_run("fast", 3.0)]})]
    (row,) = epoch_budget.table(files, 2.5)  # interval 1 has no stale epochs: not a row
    assert (row["name"], row["seeds"], row["never"]) == ("fast", 3, 1)
    assert row["sooner"] == 2.0  # median of 0, 2.0, 3.0
    # the budgets' median with the seed that never reached lowest: 70 ms (the seed 2.0x sooner),
    # not 130 ms (the one 3.0x sooner, (5 * 144 - 200) / 4)
    assert row["stale_needed_ms"] == pytest.approx(70.0)
    (most,) = epoch_budget.table(files[:1], 2.5)  # one reached, one never: the median is never
    assert most["stale_needed_ms"] is None and most["sooner"] == 1.0
    assert row["interval1_ms"] == pytest.approx(300.0)


def test_the_printed_table_says_none_where_no_cost_would_do(tmp_path, capsys):
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_result({0: [_run("slow", 0.5, sync=0.2, stale=0.1, k=2.0)]})))
    assert epoch_budget.main([str(path), "--target", "2.5"]) == 0
    line = capsys.readouterr().out.splitlines()[-1]
    # mean 150 ms, needed 30 ms: stale 2 * 30 - 200 < 0, sync 60 - 100 < 0
    assert line.startswith("| slow | 1 (0) | 300 | 200 | 100 | 2.0 |") and line.endswith("| none | none |")
    with pytest.raises(SystemExit):
        epoch_budget.main([str(path), "--target", "0"])
