"""The results report: its methods are valid configurations, and the document, the plots and the
README's headline are written from the suite's JSON alone."""
import pytest

from benchmarks import bench_e2e, report_pages as pages, report_suite as suite, results_report as rr


def test_every_method_is_a_valid_configuration_and_interval_1_comes_first():
    from dgl_sni.config import TrainConfig
    assert suite.METHODS[0] == dict(name="interval1", preset="exact")
    for method in suite.METHODS:
        TrainConfig.from_dict({k: v for k, v in method.items() if k != "name"}).validate()
        assert method["name"] in suite.WHAT
    pipelined = TrainConfig.from_dict(dict(preset="fast", sync_policy="pipeline")).validate()
    assert pipelined.pipelined and not pipelined.sni_active


def _summary(name, epoch_s, vals, test):
    curve = [dict(epoch=i, mode="sync", train_time_s=(i + 1) * epoch_s, loss=1.0, val_acc=v, test_acc=test)
             for i, v in enumerate(vals)]
    breakdown = {"sync": dict(time_s=epoch_s, comp_s=epoch_s / 2, comm_s=epoch_s / 3, sync_s=epoch_s / 6, bytes=1e6)}
    return dict(name=name, config=dict(sync_interval=1), epoch_s=epoch_s, breakdown=breakdown,
                best_val_acc=max(vals), final_test_acc=test, test_acc_at_best_val=test, curve=curve)


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
                peer_code=dict(ran=True, graph="syn300k-d16", target_val_acc=0.87,
                               runs=[dict(name="interval1", epoch_s=0.6, time_to_target_s=10.0, best_val=0.88,
                                          final_test=0.86, final_test_delta=0.0, saved=None),
                                     dict(name="bns-0.1", epoch_s=0.3, time_to_target_s=None, best_val=0.85,
                                          final_test=0.84, final_test_delta=-0.02, saved=None)]),
                dgl_example=dict(ran=False, why="no copy"), scaling=dict(graph="syn20k", link="1gbit", cores=2,
                                                                         rows=scaling),
                tier=dict(graph="syn20k", workers=2, link="1gbit", runs=tier),
                cost_model=dict(runs=3, check=check, holdout=[dict(check[0], error=-0.12)], projections=proj,
                                assumptions=["one core"], halo_ratio=dict(value=4.25, machines=8)),
                cleanup=dict(clean=True, namespaces=[], shared_memory=[], temporary=[]),
                sweeps=[dict(model="built-in GCN", graph="syn200k", seeds=[0, 1, 2], sooner=[3.0, 0.0, 2.6],
                             null=[1.0, 0.9, 1.1], epochs_ratio=[1.0, None, 1.1], final_test_delta=[0.0, -0.02, 0.01],
                             epochs_per_sync=6.25, holds=False,
                             target=dict(sooner=2.5, epochs_ratio=1.2, test_margin=0.01))])


def test_the_report_and_the_headline_come_from_the_json(tmp_path, monkeypatch):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{pages.HEADLINE[0]}\nold table\n{pages.HEADLINE[1]}\nrest\n")
    data = _data()
    (tmp_path / "figures").mkdir()
    (tmp_path / "figures" / "comparison-cora-1gbit.png").write_text("another suite's figure")
    pages.plots(data, str(tmp_path / "figures"))
    pages.write_report(data, "python benchmarks/results_report.py", str(tmp_path / "RESULTS.md"), str(readme))
    doc = (tmp_path / "RESULTS.md").read_text()
    assert "at commit abc1234" in doc and "| fast | - | 123 | 3.25 |" in doc  # 0.4 / 0.123 per epoch
    assert "Machine: 2 cores, 23.5 GiB, Linux 6, Python 3.11.7" in doc and "{" not in doc
    assert "Skipped (dataset not present): cora." in doc and "Not run: no copy." in doc
    assert "no namespace, shared-memory segment or run folder was left behind" in doc
    assert "BNS-GCN's code" not in doc.replace("BNS-GCN's own code is not run", "")  # no figure typed in by hand
    assert "| `bns-0.1` | 300 | no | - | 0.8500 | -0.020 |" in doc
    assert "its largest error is 12%** (a graph it has not seen); fitted on every run, 5%" in doc
    assert "4.25 halo rows per owned row, as measured at 8 machines" in doc
    head = readme.read_text()
    assert "old table" not in head and head.startswith("intro\n") and head.endswith("rest\n")
    assert ("| built-in GCN | syn200k | 0, 1, 2 | 2.60 (never-3.00) | 1.00 (0.90-1.10) | 1.05 (1.10); never in some | "
            "-0.0033 (-0.0200) | 6.2 |") in head
    assert "Targets that hold: none. Missed: built-in GCN on syn200k." in head
    assert "| fast | - | 123 | 3.25 | 0.2 | 4.88 |" in doc  # target 0.89: at 1.2 s against 0.246 s
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == sorted(
        f"{n}.{e}" for n in ("comparison-syn20k-1gbit", "scaling") for e in ("png", "svg"))


def test_a_narrowed_suite_keeps_the_suites_order_and_refuses_what_it_lacks():
    part = suite.narrowed("full", graphs=["syn500k", "syn200k"], links=["1gbit"], seeds=[0])
    assert part["graphs"] == ["syn200k", "syn500k"] and part["links"] == ["1gbit"] and part["seeds"] == [0]
    assert part["scaling_graph"] == suite.SUITES["full"]["scaling_graph"]
    with pytest.raises(ValueError, match="links 10gbit not in the full suite"):
        suite.narrowed("full", links=["10gbit"])
    with pytest.raises(SystemExit) as exc:
        rr.main(["--full", "--graphs", "reddit"])
    assert exc.value.code == 2


def test_the_parts_not_measured_are_named(tmp_path):
    data = _data()
    data["suite"] = "full"
    data["comparison"]["graphs"] = {"syn500k": {"1gbit": dict(data["comparison"]["graphs"]["syn20k"]["1gbit"],
                                                             measured=dict(seeds=[0], first="2026-12-01 10:00",
                                                                           last="2026-12-01 11:00"))},
                                    "syn200k": {"1gbit": data["comparison"]["graphs"]["syn20k"]["1gbit"]}}
    data["comparison"]["skipped"] = ["cora", "citeseer"]
    data["scaling"] = data["tier"] = None
    lacking = suite.missing_parts(data)
    assert "syn200k/unshaped seeds 0, 1, 2" in lacking and "syn500k/1gbit seeds 1, 2" in lacking
    assert "syn200k/1gbit seeds 0, 1, 2" in lacking  # a part that does not say its seeds holds none
    (tmp_path / "README.md").write_text("no headline block\n")
    pages.write_report(data, "python benchmarks/results_report.py --full", str(tmp_path / "RESULTS.md"),
                    str(tmp_path / "README.md"))
    doc = (tmp_path / "RESULTS.md").read_text()
    assert "Seeds 0; runs trained 2026-12-01 10:00 to 2026-12-01 11:00." in doc
    assert "Not measured yet (the suite's parts this report lacks): " in doc and "syn500k/unshaped seeds 0, 1, 2" in doc
    assert doc.count("Not measured yet.") == 2  # scaling and the tier


def test_dgl_examples_accuracy_stands_beside_full_graph_training(tmp_path):
    (tmp_path / "README.md").write_text("no headline block\n")
    data = _data()
    data["dgl_example"] = dict(ran=True, graph="syn20k", epochs=50, epoch_s=0.07, test_accs=[0.8, 0.82],
                               eval_epochs=[25, 50], best_test=0.82, time_to_best_s=3.5)
    pages.write_report(data, "python benchmarks/results_report.py", str(tmp_path / "RESULTS.md"),
                    str(tmp_path / "README.md"))
    doc = (tmp_path / "RESULTS.md").read_text()
    assert "test accuracy after epochs 25: 0.8000, 50: 0.8200; its best, 0.8200, after 3.5 s" in doc
    assert "interval1 0.8800 (its target after 1.2 s), fast 0.8700 (its target after 0.2 s)" in doc


def test_the_readme_line_on_the_peers_says_shorter_longer_or_never():
    peers = dict(graph="g", seeds=[0, 1], families=[
        dict(peer="A", best="a-own", best_sooner=1.25, fast_over_best=2.0),
        dict(peer="B", best="b", best_sooner=4.0, fast_over_best=0.5),
        dict(peer="C", best=None, rows=["c", "c-own"], best_sooner=0.0, fast_over_best=None)])
    line = pages._peers_line(peers)[1]
    assert "`fast`'s median time to the target is 2.00x shorter than A's (`a-own`), 2.00x longer than B's (`b`); " \
        "C's rows (`c`, `c-own`) did not reach the target" in line
    assert pages._peers_line(None) == []


def test_the_readme_line_on_a_peers_own_code_names_its_best_variant_or_what_it_reached():
    code = dict(peer="P", best="p-code-x", fast_over_best=0.8, exact_reached=True, rows={})
    assert "`fast`'s median time to the target is 1.25x longer than its best variant's (`p-code-x`)" \
        in pages._peer_code_line([code])[0]
    other = dict(peer="Q", best=None, exact_reached=False,
                 rows={"q-code-exact": {}, "q-code-a": dict(own=dict(sooner=[0.0, 0.0])),
                       "q-code-b": dict(own=dict(sooner=[1.5, 2.0, 0.0]))})
    lines = pages._peer_code_line([code, other])
    assert len(lines) == 2 and lines[1].startswith("Q's own code")
    assert "no variant but its exact training reaches this project's target on most seeds, nor does that; " \
        "against its own exact code, `q-code-b` reaches that code's target 1.50x sooner." in lines[1]
    assert pages._peer_code_line(None) == []
