"""The benchmarks' sweep runner reuses a finished run only when every setting matches."""
import json

from benchmarks import _sweep
from dgl_sni.config import TrainConfig

DATA = ["--dataset", "synthetic", "--nodes", 2000, "--avg-degree", 20]
BASE = ["--layers", 3, "--dropout", 0.5]


def _store(folder, name, **settings):
    values = dict(dataset="synthetic", nodes=2000, avg_degree=20.0, workers=2, layers=3, dropout=0.5, **settings)
    (folder / name).write_text(json.dumps({"config": TrainConfig.from_dict(values).as_dict()}))


def _hit(folder, run):
    wanted = _sweep._wanted(run, DATA, 2, BASE)
    return [p for p, c in _sweep._finished(str(folder)).items()
            if all(str(c.get(k)) == v for k, v in wanted.items())]


def test_a_finished_run_matches_its_settings_as_parsed(tmp_path):
    _store(tmp_path, "run000.json", sync_interval=5, epochs=40)
    assert len(_hit(tmp_path, dict(sync_interval=5, epochs=40))) == 1  # 20 flag, 20.0 stored


def test_a_run_made_under_another_default_is_not_reused(tmp_path):
    _store(tmp_path, "run000.json", sync_interval=5, epochs=40, smooth=0.5)
    assert _hit(tmp_path, dict(sync_interval=5, epochs=40)) == []  # smooth left at its default
    old = json.loads((tmp_path / "run000.json").read_text())
    del old["config"]["smooth"]  # a run stored before the setting existed
    (tmp_path / "run000.json").write_text(json.dumps(old))
    assert _hit(tmp_path, dict(sync_interval=5, epochs=40, smooth=0.5)) == []
    assert _hit(tmp_path, dict(sync_interval=4, epochs=40)) == []
