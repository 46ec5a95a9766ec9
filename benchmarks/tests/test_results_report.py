"""The results report: its methods are valid configurations, and the document, the plots and the
README's headline are written from the suite's JSON alone."""
import pytest

from benchmarks import bench_e2e, results_report as rr


def test_every_method_is_a_valid_configuration_and_interval_1_comes_first():
    from dgl_sni.config import TrainConfig
    assert rr.METHODS[0] == dict(name="interval1", preset="exact")
    for method in rr.METHODS:
        TrainConfig.from_dict({k: v for k, v in method.items() if k != "name"}).validate()
        assert method["name"] in rr.WHAT
    pipelined = TrainConfig.from_dict(dict(preset="fast", sync_policy="pipeline")).validate()
    assert pipelined.pipelined and not pipelined.sni_active


def _summary(name, epoch_s, vals, test):
    curve = [dict(epoch=i, mode="sync", train_time_s=(i + 1) * epoch_s, loss=1.0, val_acc=v, test_acc=test)
             for i, v in enumerate(vals)]
    breakdown = {"sync": dict(time_s=epoch_s, comp_s=epoch_s / 2, comm_s=epoch_s / 3, sync_s=epoch_s / 6, bytes=1e6)}
    return dict(name=name, config=dict(sync_interval=1), epoch_s=epoch_s, breakdown=breakdown,
                best_val_acc=max(vals), final_test_acc=test, test_acc_at_best_val=test, curve=curve)


def _reference():
    import json
    with open(rr.PEERS) as fh:
        return json.load(fh)["bns-gcn"]


def _data():
    runs = [_summary("interval1", 0.4, [0.5, 0.8, 0.9], 0.88), _summary("fast", 0.123, [0.5, 0.89, 0.9], 0.87)]
    judged = dict(bench_e2e.compare(runs, "1gbit", 4), runs=runs)
    scaling = [dict(workers=w, preset="exact", epoch_s=0.1 * w, breakdown=runs[0]["breakdown"], halo_nodes=2.0 * w,
                    owned_nodes=10.0) for w in (2, 4, 8)]
    tier = {"fast, in memory": dict(epoch_s=0.02, best_val=0.7, final_test=0.69, bytes_per_epoch=1e5, sync_interval=8,
                                    smooth=0.0, peak_rss_mb=400.0)}
    check = [dict(configuration="g: exact interval 1, 32-bit, 1gbit", runs=2, measured_s=0.4, estimated_s=0.42,
                  error=0.05, worst_run_error=0.07)]
    proj = [dict(graph="Reddit", interval=1, bits=32, halo_ratio=2.5, sync_s=1.0, stale_s=0.5, epoch_s=1.0,
                 speedup=1.0)]
    return dict(suite="quick", minutes=3.0, settings=dict(graphs=["syn20k"], links=["1gbit"], epochs=3, seeds=[0]),
                machine=dict(commit="abc1234", date="2026-12-05", cores=2, memory_gib=23.5, python="3.11.7",
                             torch="2.13.0", dgl="2.1.0", kernel="6"),
                comparison=dict(graphs={"syn20k": {"1gbit": judged}}, single_process={}, skipped=["cora"]),
                peer_code=dict(ran=True, graph="syn300k-d16", target_val_acc=0.87, reference=_reference(),
                               runs=[dict(name="interval1", epoch_s=0.6, time_to_target_s=10.0, best_val=0.88,
                                          final_test=0.86, final_test_delta=0.0, saved=None),
                                     dict(name="bns-0.1", epoch_s=0.3, time_to_target_s=None, best_val=0.85,
                                          final_test=0.84, final_test_delta=-0.02, saved=None)]),
                dgl_example=dict(ran=False, why="no copy"), scaling=dict(graph="syn20k", link="1gbit", cores=2,
                                                                         rows=scaling),
                tier=dict(graph="syn20k", workers=2, link="1gbit", runs=tier),
                cost_model=dict(runs=3, check=check, holdout=[], projections=proj, assumptions=["one core"]),
                cleanup=dict(clean=True, namespaces=[], shared_memory=[], temporary=[]))


def test_the_report_and_the_headline_come_from_the_json(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{rr.HEADLINE[0]}\nold table\n{rr.HEADLINE[1]}\nrest\n")
    monkeypatch.setattr(rr, "DOC", str(tmp_path / "RESULTS.md"))
    monkeypatch.setattr(rr, "FIGURES", str(tmp_path / "figures"))
    monkeypatch.setattr(rr, "README", str(readme))
    data = _data()
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "comparison-cora-1gbit.png").write_text("another suite's figure")
    rr.plots(data)
    rr.write_report(data, "python benchmarks/results_report.py")
    doc = (tmp_path / "RESULTS.md").read_text()
    assert "at commit abc1234" in doc and "| fast | 123 | 3.25 |" in doc  # 0.4 / 0.123 per epoch
    assert "Machine: 2 cores, 23.5 GiB, Linux 6, Python 3.11.7" in doc and "{" not in doc
    assert "Skipped (dataset not present): cora." in doc and "Not run: no copy." in doc
    assert "no namespace, shared-memory segment or run folder was left behind" in doc
    assert "| BNS-GCN's code, p = 0.1 | 490-510 | no | - | 0.8686 | -0.019 |" in doc
    assert "| dgl-sni `bns-0.1` | 300 | no | - | 0.8500 | -0.020 |" in doc
    assert _reference()["graph"] in bench_e2e.GRAPHS
    assert "at p = 0.1 an epoch takes 0.50 of the exact one in project" in doc
    assert "At p = 0.1 both miss the target: the in-project version reproduces that behaviour." in doc
    head = readme.read_text()
    assert "old table" not in head and head.startswith("intro\n") and head.endswith("rest\n")
    assert "| syn20k, 1gbit | 400 | 123 | 4.88 | -0.0100 |" in head  # target 0.89: at 1.2 s against 0.246 s
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == sorted(
        f"{n}.{e}" for n in ("comparison-syn20k-1gbit", "scaling") for e in ("png", "svg"))


def test_a_narrowed_suite_keeps_the_suites_order_and_refuses_what_it_lacks():
    suite = rr.narrowed("full", graphs=["syn500k", "syn200k"], links=["1gbit"], seeds=[0])
    assert suite["graphs"] == ["syn200k", "syn500k"] and suite["links"] == ["1gbit"] and suite["seeds"] == [0]
    assert suite["scaling_graph"] == rr.SUITES["full"]["scaling_graph"]
    with pytest.raises(ValueError, match="links 10gbit not in the full suite"):
        rr.narrowed("full", links=["10gbit"])
    with pytest.raises(SystemExit) as exc:
        rr.main(["--full", "--graphs", "reddit"])
    assert exc.value.code == 2


def test_parts_measured_in_pieces_are_merged_and_the_missing_ones_named(tmp_path, monkeypatch):
    before = _data()
    before["suite"] = "full"
    before["comparison"]["graphs"] = {"syn500k": {"1gbit": dict(before["comparison"]["graphs"]["syn20k"]["1gbit"],
                                                               measured=dict(seeds=[0], first="2026-12-01 10:00",
                                                                             last="2026-12-01 11:00"))}}
    now = _data()
    now["suite"] = "full"
    now["comparison"]["graphs"] = {"syn200k": now["comparison"]["graphs"].pop("syn20k")}
    merged = rr.merge(before, now)
    assert list(merged["comparison"]["graphs"]) == ["syn200k", "syn500k"]  # the suite's order
    assert merged["comparison"]["graphs"]["syn500k"]["1gbit"]["measured"]["first"] == "2026-12-01 10:00"
    merged["comparison"]["skipped"] = ["cora", "citeseer"]
    lacking = rr.missing_parts(merged)
    assert "syn200k/unshaped seeds 0, 1, 2" in lacking and "syn500k/1gbit seeds 1, 2" in lacking
    assert "syn200k/1gbit seeds 0, 1, 2" in lacking  # a part that does not say its seeds holds none
    assert rr.merge(None, now) is now and rr.merge(dict(suite="quick"), now) is now
    monkeypatch.setattr(rr, "DOC", str(tmp_path / "RESULTS.md"))
    monkeypatch.setattr(rr, "README", str(tmp_path / "README.md"))
    (tmp_path / "README.md").write_text("no headline block\n")
    rr.write_report(merged, "python benchmarks/results_report.py --full --graphs syn200k")
    doc = (tmp_path / "RESULTS.md").read_text()
    assert "Seeds 0; runs trained 2026-12-01 10:00 to 2026-12-01 11:00." in doc
    assert "Not measured yet (the suite's parts this report lacks): " in doc and "syn500k/unshaped seeds 0, 1, 2" in doc


def test_dgl_examples_accuracy_stands_beside_full_graph_training(tmp_path, monkeypatch):
    monkeypatch.setattr(rr, "DOC", str(tmp_path / "RESULTS.md"))
    monkeypatch.setattr(rr, "README", str(tmp_path / "README.md"))
    (tmp_path / "README.md").write_text("no headline block\n")
    data = _data()
    data["dgl_example"] = dict(ran=True, graph="syn20k", epochs=50, epoch_s=0.07, test_accs=[0.8, 0.82],
                               eval_epochs=[25, 50], best_test=0.82, time_to_best_s=3.5)
    rr.write_report(data, "python benchmarks/results_report.py")
    doc = (tmp_path / "RESULTS.md").read_text()
    assert "test accuracy after epochs 25: 0.8000, 50: 0.8200; its best, 0.8200, after 3.5 s" in doc
    assert "interval1 0.8800 (its target after 1.2 s), fast 0.8700 (its target after 0.2 s)" in doc
