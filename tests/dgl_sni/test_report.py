"""``dgl-sni report``: the summary judges runs against the first, the plots are written, bad
inputs are named."""
import json

import pytest

from dgl_sni.cli import main
from dgl_sni.report import load_runs, summarize


def run_file(tmp_path, name, vals, step_s, mode="sync", measured=False):
    epochs = [dict(epoch=i, mode=mode, time_s=step_s, comp_s=step_s / 2, comm_s=step_s / 3, sync_s=step_s / 6,
                   bytes_sent=1000, bytes_recv=2000, val_acc=v, test_acc=v - 0.01,
                   **(dict(staleness_l2=0.1 / (i + 1), l1_staleness_l2=0.1 / (i + 1)) if measured else {}))
              for i, v in enumerate(vals)]
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(dict(config=dict(preset="exact", sync_interval=1), epochs=epochs, summary={})))
    return str(path)


def test_the_summary_judges_every_run_against_the_first(tmp_path):
    exact = run_file(tmp_path, "exact", [0.5, 0.7, 0.8, 0.81], 0.4)
    fast = run_file(tmp_path, "fast", [0.5, 0.75, 0.79, 0.80], 0.1)
    never = run_file(tmp_path, "never", [0.3, 0.4, 0.5, 0.6], 0.1)
    rows = summarize(load_runs([exact, fast, never], ["exact", "fast", "never"]))
    assert rows[0]["target"] == pytest.approx(0.80)
    assert rows[0]["time_to_target_s"] == pytest.approx(1.2) and rows[0]["epoch_at_target"] == 2
    assert rows[1]["time_to_target_s"] == pytest.approx(0.4) and rows[1]["speedup"] == pytest.approx(3.0)
    assert rows[2]["time_to_target_s"] is None and rows[2]["speedup"] is None


def test_the_plots_are_written_and_bad_inputs_named(tmp_path, capsys):
    a = run_file(tmp_path, "a", [0.5, 0.7], 0.2, measured=True)
    b = run_file(tmp_path, "b", [0.5, 0.7], 0.05, mode="stale")
    assert main(["report", a, b, "--out", str(tmp_path / "plots")]) == 0
    written = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert written == sorted(f"{n}.{e}" for n in ("accuracy", "breakdown", "bytes", "staleness") for e in ("png", "svg"))
    # the target 0.69 (0.7 - 0.01) is reached at epoch 1 (the second) by both: after 0.4 s and 0.1 s, 4x sooner
    lines = capsys.readouterr().out.splitlines()
    row_b = next(line for line in lines if line.startswith("b "))
    assert row_b.split()[-3:] == ["0.1", "1", "4.00x"], row_b
    assert any(line.startswith("target:") and line.endswith("= 0.6900") for line in lines)
    (tmp_path / "bad.json").write_text("{}")
    assert main(["report", str(tmp_path / "bad.json")]) == 2
    assert "not a dgl-sni metrics file" in capsys.readouterr().err
    assert main(["report", a, "--labels", "x,y"]) == 2
    assert "--labels names 2 runs" in capsys.readouterr().err
