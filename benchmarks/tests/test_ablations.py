"""The ablation studies' summaries and plots, from metrics made up here (no cluster)."""
import json

import pytest

from benchmarks import ablations


def _metrics(vals, stale_every=0, errors=False):
    epochs = []
    for i, v in enumerate(vals):
        stale = stale_every and i >= 2 and i % stale_every
        e = dict(epoch=i, mode="stale" if stale else "sync", val_acc=v, test_acc=v - 0.01, loss=1.0 / (i + 1),
                 time_s=0.1 if stale else 0.3)
        if errors and stale:
            e.update(l1_staleness_l2=0.5, l1_true_l2=2.0, l2_staleness_l2=0.2, l2_true_l2=1.0,
                     l1_grad_err_l2=0.3, l1_grad_true_l2=0.6, pred_rows_l2=0.1, pred_rows_cache_l2=0.2)
        epochs.append(e)
    return dict(epochs=epochs)


def test_a_run_is_judged_against_the_exact_one_by_epochs_to_its_target():
    exact = _metrics([0.5, 0.6, 0.7, 0.8, 0.82, 0.83, 0.83])
    stale = _metrics([0.5, 0.55, 0.6, 0.7, 0.75, 0.8, 0.82, 0.83], stale_every=2, errors=True)
    out = ablations.summarize("stale", stale, exact)
    assert out["target_val_acc"] == pytest.approx(0.82)
    assert out["epochs_to_target"] == 7 and out["epochs_to_target_ratio"] == pytest.approx(7 / 5)
    assert out["row_error"][1] == [(e, 0.25) for e in (3, 5, 7)] and out["row_error"][2][0] == (3, 0.2)
    assert out["grad_error"][1][0] == (3, 0.5) and out["grad_error"][2] == []
    assert out["predicted_error"][0] == (3, 0.1, 0.2)
    assert out["syncs"] == 5 and out["final_test_delta"] == pytest.approx(0.0)


@pytest.mark.parametrize("study", ablations.STUDIES)
def test_every_study_names_its_runs_and_plots_them(tmp_path, study):
    spec = ablations._study(study)
    names = [name for name, _ in spec["runs"]]
    assert len(names) == len(set(names)) and spec["epochs"] > 0
    from dgl_sni.config import TrainConfig
    for _, settings in spec["runs"]:  # every run is a valid configuration
        TrainConfig.from_dict(dict(settings)).validate()
    exact = _metrics([0.5 + 0.01 * i for i in range(20)])
    runs = [ablations.summarize(name, _metrics([0.5 + 0.01 * i for i in range(20)], 2, True), exact)
            for name in names]
    if study == "fig3":
        assert {int(n.rsplit("E", 1)[1]) for n in names} == {2, 3, 4, 5}
    report = dict(study=study, graph="g", link=spec["link"], workers=4, epochs=20, runs=runs)
    ablations.plot(json.loads(json.dumps(report)), str(tmp_path / "p.png"))  # as read back from its JSON
    assert (tmp_path / "p.png").stat().st_size > 10_000
