"""Configuration declared once: parts, presets, generated flags, flat view, and a DGL-free ``--help``."""
import argparse
import json
import subprocess
import sys
from dataclasses import fields

import pytest

from tests.helpers import ROOT
from dgl_sni.config import (MODEL_NAMES, PREDICTORS, SWEEPABLE, DataConfig, SNIConfig, TrainConfig,
                            add_train_arguments, from_args, load_sweep)
from dgl_sni.config.options import option_of
from dgl_sni.config.presets import PRESETS, RULES

# the flat keys of the metrics JSON's "config" before the parts existed (result files read them)
OLD_KEYS = (
    "dataset data_dir nodes avg_degree classes feat_dim data_seed feature_norm workers partition bandwidth "
    "cluster port master_port threads timeout run_dir model layers hidden heads epochs lr dropout weight_decay "
    "seed eval_every sync_interval sampling_ratio warmup predictor stale_grad sync_policy drift_bound "
    "measure_staleness transfer agent doca_pci doca_name storage_tier device_mem_budget host_cache_budget "
    "subparts quiet metrics checkpoint_dir checkpoint_every epoch_gate sweep").split()
STOCK_SCRIPT_ONLY = {"tensors", "static", "feature_cache_bytes"}  # read from DGL_SNI_CONFIG only
# settings added since the parts existed (sync_loss_gap: the guarded policy; dropout_stream: the
# null runs of the paired-seed studies; preset: the named presets)
NEW_KEYS = {"sync_drift", "quantize", "stale_eval", "agent_timeout", "agent_dir", "resume", "sync_loss_gap", "smooth",
            "allocator", "stale_halo", "sync_halo", "dropout_stream", "preset", "stale_truth", "row_average",
            "grad_average", "prefetch", "model_file", "halo_sample", "bit_choice", "average_trend", "stale_trend"}
# settings no non-default config below moves, and why
KEPT = {"resume": "needs a folder holding a checkpoint, and excludes --sweep (the configs set one)"}
COMMON = {"dataset", "workers", "bandwidth", "model", "model_file", "layers", "hidden", "dropout", "lr", "seed", "epochs",
          "preset", "sync_interval", "storage_tier", "quiet", "metrics", "checkpoint_dir", "resume", "sweep"}


def _train_parser():
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return parser


_MOVED = dict(
    feature_norm="row", workers=3, partition="random", bandwidth="100mbit", cluster="loopback",
    port=31000, master_port=31001, threads=2, allocator="system", timeout=60.5, run_dir="/r",
    layers=3, hidden=8, dropout=0.25, lr=0.005, weight_decay=0.0, seed=4, epochs=7, eval_every=2,
    sync_interval=4, sampling_ratio=0.3, warmup=7, stale_grad="skip", measure_staleness=True,
    quiet=True, metrics="/m.json", checkpoint_dir="/c", checkpoint_every=2, epoch_gate="/g", sweep="/s.json",
    stale_eval=True, agent_timeout=3.0, dropout_stream=2)


def _non_default() -> list:
    """Configs that between them set every setting to another value than its default, each
    setting where it means something (so no config sets them all)."""
    return [TrainConfig.from_dict(dict(_MOVED, **extra)).validate() for extra in (
        dict(dataset="cora", data_dir="/d", model="gat", heads=2, predictor="holt", sync_policy="adaptive",
             drift_bound=0.1, agent="inline", storage_tier="/t", device_mem_budget="512M",
             host_cache_budget="4G", subparts=3, smooth=0.5, stale_halo="rows", sync_halo="rows"),
        dict(nodes=500, avg_degree=4.5, classes=3, feat_dim=7, data_seed=9, model="sage", predictor="linear-trend",
             window=6, beta=0.5, lam=0.05, sync_policy="drift", sync_drift=0.2, quantize=4, agent="doca",
             doca_pci="0000:03:00.0", doca_name="sni-x", preset="fast", sync_halo="inputs", stale_trend=0.5),
        dict(predictor="gated", transfer=False, sync_policy="guarded", sync_loss_gap=0.05, agent_dir="/a",
             sync_halo="summed", stale_truth="rows@2", row_average=0.5, grad_average=0.5, prefetch=False,
             quantize=8, bit_choice="adaptive", average_trend="rows"),
        dict(model_file="/models/mine.py:build", heads=3, sync_interval=1, halo_sample=0.3),
    )]


@pytest.mark.parametrize("argv", [[], ["train"], ["partition"], ["launch"]], ids=["top", "train", "partition", "launch"])
def test_help_imports_neither_dgl_nor_torch(argv):
    code = ("import json, runpy, sys\n"
            f"sys.argv = ['dgl-sni', *{argv!r}, '--help']\n"
            "try:\n    runpy.run_module('dgl_sni.cli', run_name='__main__')\n"
            "except SystemExit as e:\n    code = e.code\n"
            "print(json.dumps(dict(code=code, heavy=[m for m in ('dgl', 'torch') if m in sys.modules])))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": ROOT, "PATH": "/usr/bin:/bin"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result == dict(code=0, heavy=[])
    assert "usage: dgl-sni" in proc.stdout


def test_every_field_of_every_part_has_a_flag_with_its_help():
    actions = {a.dest: a for a in _train_parser()._actions}
    defaults = TrainConfig()
    for part in defaults.parts().values():
        for f in fields(part):
            opt = option_of(f)
            if opt is None:  # not a setting: what was given explicitly
                assert f.name == "given"
                continue
            assert opt.help, f.name
            if not opt.cli:
                assert f.name in STOCK_SCRIPT_ONLY
                assert f.name not in actions
                continue
            action = actions[f.name]
            if opt.hidden:
                assert action.help == argparse.SUPPRESS, f.name
            else:  # --help lists the common flags, --help-all every one, with its default
                assert action.full_help.startswith(opt.help), f.name
                assert (action.help == action.full_help) == opt.common, f.name
            assert action.default == argparse.SUPPRESS, f.name  # a flag not given sets nothing
            if opt.choices is not None:
                assert tuple(action.choices) == opt.choices, f.name
    assert actions["transfer"].option_strings == ["--no-transfer"]
    assert actions["measure_staleness"].option_strings == ["--measure-staleness"]
    assert {"window", "beta", "lam"} <= set(actions)


def test_names_are_declared_once():
    from dpu_agent.predictors import PREDICTOR_NAMES
    assert PREDICTORS == ("none",) + PREDICTOR_NAMES
    assert tuple(_train_parser()._option_string_actions["--predictor"].choices) == PREDICTORS
    import dgl_sni.config as config
    import dgl_sni.models as models
    import dgl_sni.partition as partition
    assert models.MODEL_NAMES is config.MODEL_NAMES == MODEL_NAMES
    assert partition.METHODS is config.METHODS


def test_train_runs_exact_by_default_and_the_stock_switch_fast():
    cfg = TrainConfig.from_dict({}).validate()
    assert cfg.sni.preset == "exact" and cfg.sni.sync_interval == 1 and cfg.sni.quantize == 0
    assert not cfg.sni_active
    assert from_args(_train_parser().parse_args([])) == cfg
    switch = SNIConfig.from_dict({})  # a stock script's rows are not averaged over steps: fast without it
    rules = {r.setting: r.value for r in RULES if r.context == "switch"}
    assert switch.preset == "fast" and switch.sync_interval == rules["sync_interval"] != PRESETS["fast"].values[
        "sync_interval"]
    assert switch.row_average == switch.grad_average == 0.0


@pytest.mark.parametrize("extra", [dict(), dict(quantize=4), dict(preset="fast", sync_policy="pipeline"),
                                   dict(preset="fast", storage_tier="/t")],
                         ids=["float32", "4-bit", "pipelined", "storage-tier"])
def test_a_width_per_row_is_refused_where_rows_do_not_travel_at_8_bits(extra):
    with pytest.raises(ValueError, match="--bit-choice adaptive means nothing without --quantize 8"):
        TrainConfig.from_dict(dict(extra, bit_choice="adaptive")).validate()
    assert TrainConfig.from_dict(dict(preset="fast", bit_choice="adaptive")).validate().sni.quantize == 8


def test_flags_round_trip_non_default_configs():
    configs = _non_default()
    defaults = TrainConfig().as_dict()
    moved = set().union(*({k for k, v in cfg.as_dict().items() if v != defaults[k]} for cfg in configs))
    assert set(defaults) - moved == set(KEPT)  # every other setting moved in some config
    for cfg in configs:
        argv = cfg.to_argv()
        assert "--measure-staleness" in argv and "--quiet" in argv
        assert from_args(_train_parser().parse_args(argv)) == cfg
    argv = configs[1].to_argv()
    for flag, value in (("--window", "6"), ("--beta", "0.5"), ("--lam", "0.05"), ("--preset", "fast")):
        assert argv[argv.index(flag) + 1] == value
    assert "--no-transfer" in configs[2].to_argv()


def test_only_the_settings_given_travel_to_the_workers():
    cfg = TrainConfig.from_dict(dict(preset="fast", model="gat", epochs=3)).validate()
    assert sorted(cfg.to_argv()) == sorted(["--preset", "fast", "--model", "gat", "--epochs", "3"])
    assert not cfg.sni_active  # fast trains GAT as exact: the worker expands the same from the same flags
    assert from_args(_train_parser().parse_args(cfg.to_argv())) == cfg
    with pytest.raises(ValueError, match="quantize=8 cannot apply with storage tier: tier-backed rows"):
        TrainConfig.from_dict(dict(quantize=8, storage_tier="/t")).validate()


def test_worker_parses_the_same_flags():
    from dgl_sni.worker import _parse
    for cfg in _non_default():
        ns = _parse(cfg.to_argv() + ["--part-config", "p.json", "--ip-config", "ip.txt"])
        assert from_args(ns) == cfg


def test_worker_flags_rebuild_the_config_with_default_on_switches():
    parser = _train_parser()
    cfg = TrainConfig.from_dict(dict(predictor="gated", sync_interval=5, transfer=False,
                                     measure_staleness=True)).validate()
    argv = cfg.to_argv()
    assert "--no-transfer" in argv and "--measure-staleness" in argv
    again = from_args(parser.parse_args(argv))
    assert again.sni.transfer is False and again.sni.measure_staleness is True
    assert "--no-transfer" not in TrainConfig().to_argv()


def test_metrics_config_stays_flat():
    for cfg in _non_default():
        flat = cfg.as_dict()
        assert set(flat) == set(OLD_KEYS) | {"window", "beta", "lam"} | NEW_KEYS
        assert all(not isinstance(v, dict) for v in flat.values())
        assert TrainConfig.from_dict(flat) == cfg
    with pytest.raises(ValueError, match="unknown setting"):
        TrainConfig.from_dict({"sync_intervall": 3})


def test_sweep_changes_only_what_it_did(tmp_path):
    assert set(SWEEPABLE) == {"model", "layers", "hidden", "heads", "epochs", "lr", "dropout", "weight_decay",
                              "seed", "eval_every", "sync_interval", "sampling_ratio", "warmup", "predictor",
                              "stale_grad", "sync_policy", "drift_bound", "measure_staleness", "transfer",
                              "agent", "sync_drift", "quantize", "stale_eval", "sync_loss_gap", "smooth",
                              "stale_halo", "sync_halo", "dropout_stream", "preset", "stale_truth", "row_average",
                              "grad_average", "prefetch", "model_file", "halo_sample", "bit_choice",
                              "average_trend", "stale_trend"}
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps([{"predictor": "gated", "sync_interval": 3}, {"model": "sage"}]))
    base = TrainConfig.from_dict(dict(metrics=str(tmp_path / "out"), workers=3)).validate()
    runs = load_sweep(str(path), base)
    assert [r.sni.predictor for r in runs] == ["gated", "cache"]
    assert [r.model.model for r in runs] == ["gcn", "sage"]
    assert runs[0].sni.sync_interval == 3 and runs[1].sni.sync_interval == 1
    assert runs[1].cluster.workers == 3 and runs[1].output.metrics.endswith("run001.json")
    path.write_text(json.dumps([{"workers": 4}]))
    with pytest.raises(ValueError, match="which a sweep cannot change"):
        load_sweep(str(path), base)


def test_a_sweep_entrys_preset_sets_what_neither_it_nor_the_base_gave(tmp_path):
    path = tmp_path / "sweep.json"
    path.write_text(json.dumps([{"preset": "exact"}, {"preset": "fast"}, {"preset": "fast", "sync_interval": 5}]))
    base = TrainConfig.from_dict(dict(workers=4, quantize=4)).validate()  # given: kept by every run
    exact, fast, five = load_sweep(str(path), base)
    assert (exact.sni.sync_interval, fast.sni.sync_interval, five.sni.sync_interval) == (1, 8, 5)
    assert {r.sni.quantize for r in (exact, fast, five)} == {4}
    assert five.sni.preset == "fast" and five.stale_sums and not exact.sni_active


def test_the_fast_preset_is_the_stale_configuration_with_its_fallbacks():
    parse = lambda *argv: from_args(_train_parser().parse_args(list(argv))).sni  # noqa: E731
    fast = parse("--preset", "fast")
    assert (fast.sync_interval, fast.warmup, fast.predictor, fast.smooth, fast.quantize, fast.stale_grad,
            fast.stale_halo, fast.sync_halo, fast.row_average, fast.grad_average) == \
        (8, 5, "cache", 0.0, 8, "last", "summed", "auto", 0.9, 0.9)
    # where a preset's value cannot apply, the setting falls back (and the metrics show it)
    gat = parse("--preset", "fast", "--model", "gat")
    assert (gat.preset, gat.sync_interval, gat.quantize, gat.row_average) == ("fast", 1, 0, 0)  # as exact
    # which layers take summed rows is the planner's, from what each layer declares (GAT's: rows)
    assert parse("--preset", "fast", "--model", "gat", "--sync-interval", "2").stale_halo == "summed"
    sage = parse("--preset", "fast", "--model", "sage")  # SAGE: shorter interval, half the averaging
    assert (sage.stale_halo, sage.sync_interval, sage.smooth, sage.row_average, sage.grad_average, sage.quantize) == \
        ("summed", 5, 0.0, 0.5, 0.5, 8)
    tier = parse("--preset", "fast", "--storage-tier", "/t")  # rows in files: not averaged over steps
    assert (tier.quantize, tier.stale_halo, tier.sync_interval, tier.smooth, tier.row_average) == (0, "rows", 2, 0.75, 0)
    pipe = parse("--preset", "fast", "--sync-policy", "pipeline")
    assert (pipe.quantize, pipe.smooth, pipe.grad_average) == (0, 0.0, 0)  # no agent, no stale epoch
    # without dropout the kept sums go on along their trend, where stale epochs keep sums
    assert parse("--preset", "fast").stale_trend == 0.0
    assert parse("--preset", "fast", "--dropout", "0").stale_trend == 1.0
    # SAGE without dropout: half the averaging oscillates there, so it takes fast's own values
    sage0 = parse("--preset", "fast", "--dropout", "0", "--model", "sage")
    assert (sage0.sync_interval, sage0.row_average, sage0.grad_average, sage0.stale_trend) == (8, 0.9, 0.9, 1.0)
    assert parse("--preset", "fast", "--dropout", "0.1", "--model", "sage").sync_interval == 5
    assert parse("--preset", "fast", "--dropout", "0", "--model", "sage", "--sync-interval", "5").row_average == 0.9
    assert parse("--preset", "fast", "--dropout", "0", "--stale-trend", "0.5").stale_trend == 0.5
    assert parse("--preset", "fast", "--dropout", "0", "--stale-trend", "0").stale_trend == 0.0
    for no_sums in (("--preset", "exact"), ("--preset", "fast", "--model", "gat"),
                    ("--preset", "fast", "--storage-tier", "/t"), ("--preset", "fast", "--stale-halo", "rows"),
                    ("--preset", "fast", "--sync-policy", "pipeline")):
        assert parse(*no_sums, "--dropout", "0").stale_trend == 0.0, no_sums
    with pytest.raises(ValueError, match="row_average=0.9 cannot apply with storage tier: no rows averaged"):
        parse("--preset", "fast", "--storage-tier", "/t", "--row-average", "0.9")
    # a setting given wins over the preset, at any value
    assert parse("--preset", "fast", "--quantize", "0").quantize == 0
    assert parse("--sync-interval", "2").quantize == 0  # exact's float32 rows, at interval 2
    # a pipelined run given --smooth averages its one-step-old rows and gradients (PipeGCN's smoothing)
    assert parse("--sync-policy", "pipeline", "--smooth", "0.5").smooth == 0.5
    with pytest.raises(ValueError, match="refused|cannot apply"):
        parse("--sync-policy", "pipeline", "--row-average", "0.5")
    with pytest.raises(ValueError, match="--quantize must be one of 0, 4, 8 bits, got 6"):
        SNIConfig(quantize=6).validate()
    with pytest.raises(ValueError, match="unknown preset 'fastest'"):
        TrainConfig.from_dict(dict(preset="fastest"))


def test_the_switch_takes_the_same_preset_where_its_settings_apply():
    """``DGL_SNI_CONFIG={"preset": "fast"}`` gives the stock-script switch what ``--preset fast``
    gives dgl-sni train, except the settings a script's own rows cannot take."""
    train = TrainConfig.from_dict(dict(preset="fast", storage_tier="/t")).validate().sni  # not averaged either
    for switch in (SNIConfig.from_dict({"preset": "fast"}), SNIConfig.from_dict({})):  # DGL_SNI=1: fast
        shared = ("sync_interval", "warmup", "predictor", "sampling_ratio", "sync_policy", "window", "beta", "lam")
        assert {k: getattr(switch, k) for k in shared} == {k: getattr(train, k) for k in shared}
        assert (switch.smooth, switch.quantize, switch.stale_halo, switch.row_average) == (0.0, 0, "rows", 0.0)
    assert SNIConfig.from_dict({"preset": "exact"}).sync_interval == 1


@pytest.mark.parametrize("argv, why", [
    (["--sync-drift", "0.1"], "--sync-drift 0.1 means nothing without --sync-policy drift"),
    (["--sync-loss-gap", "0.1"], "--sync-loss-gap 0.1 means nothing without --sync-policy guarded"),
    (["--drift-bound", "0.1", "--sync-policy", "drift"], "--drift-bound 0.1 means nothing without --sync-policy adaptive"),
    (["--beta", "0.5", "--predictor", "gated"], "--beta 0.5 means nothing without --predictor linear-trend"),
    (["--window", "8"], "--window 8 means nothing without --predictor linear-trend, gated or window-trend"),
    (["--no-transfer"], "--transfer False means nothing without --predictor gated"),
    (["--heads", "2"], "--heads 2 means nothing without --model gat"),
    (["--dataset", "cora", "--nodes", "50"], "--nodes 50 means nothing without --dataset synthetic"),
    (["--subparts", "3"], "--subparts 3 means nothing without --storage-tier"),
    (["--checkpoint-every", "5"], "--checkpoint-every 5 means nothing without --checkpoint-dir or --resume"),
    (["--doca-name", "x"], "--doca-name x means nothing without --agent doca or doca-local"),
])
def test_a_flag_given_where_it_means_nothing_is_refused_with_the_reason(argv, why):
    with pytest.raises(ValueError, match=why):
        from_args(_train_parser().parse_args(argv))
    with pytest.raises(ValueError, match="--sync-drift 0.3 means nothing"):
        SNIConfig.from_dict({"sync_drift": 0.3})  # DGL_SNI_CONFIG too
    assert from_args(_train_parser().parse_args(["--sync-drift", "0.05"]))  # its default: harmless


def test_help_lists_the_common_flags_and_help_all_every_one():
    from dgl_sni.cli import build_parser
    parser = build_parser()
    train = parser._subparsers._group_actions[0].choices["train"]
    short = train.format_help()
    assert all(f"--{name.replace('_', '-')}" in short for name in COMMON) and "--sync-drift" not in short
    assert "(default: exact: 1 / fast: 8)" in " ".join(short.split())
    with pytest.raises(SystemExit):
        train.parse_args(["--help-all"])
    assert "--sync-drift" in train.format_help() and "--window" in train.format_help()


def test_partition_builds_its_data_flags_from_the_data_part():
    from dgl_sni.cli import build_parser
    from dgl_sni.config import part_from_args
    ns = build_parser().parse_args(["partition", "--parts", "2", "--out", "x"])
    assert part_from_args(DataConfig, ns) == DataConfig()
    ns = build_parser().parse_args(["partition", "--parts", "2", "--out", "x", "--nodes", "77",
                                    "--feature-norm", "none"])
    assert part_from_args(DataConfig, ns) == DataConfig(nodes=77, feature_norm="none")
    assert ns.method == "metis"


def test_validation_names_the_bad_flag():
    with pytest.raises(ValueError, match="--port and --master-port are both 30050"):
        TrainConfig.from_dict(dict(master_port=30050)).validate()
    with pytest.raises(ValueError, match="--window|window must be at least 1"):
        TrainConfig.from_dict(dict(window=0)).validate()
    with pytest.raises(ValueError, match="--device-mem-budget"):
        TrainConfig.from_dict(dict(device_mem_budget="lots")).validate()
    assert TrainConfig.from_dict(dict(bandwidth="1GBit")).validate().cluster.bandwidth == "1gbit"


def test_config_errors_name_the_setting(tmp_path):
    with pytest.raises(ValueError, match="--sampling-ratio must lie in"):
        SNIConfig(sampling_ratio=1.5).validate()
    with pytest.raises(ValueError, match="unknown SNI setting"):
        SNIConfig.from_dict({"sync_intervall": 3})
    bad = tmp_path / "c.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        SNIConfig.from_file(str(bad))


def test_boundary_node_sampling_samples_sync_steps_in_memory_at_one_width():
    ok = TrainConfig.from_dict(dict(halo_sample=0.3)).validate()
    assert ok.sni.halo_sample == 0.3 and not ok.sni_active
    for fine in (dict(preset="fast"), dict(sync_interval=4), dict(quantize=8), dict(quantize=4)):
        assert TrainConfig.from_dict(dict(halo_sample=0.3, **fine)).validate().sni.halo_sample == 0.3
    assert TrainConfig.from_dict(dict(halo_sample=0.3, preset="fast")).validate().sni_active
    for bad, why in ((dict(sync_policy="pipeline"), "pipeline"), (dict(storage_tier="/t"), "storage-tier"),
                     (dict(quantize=8, bit_choice="adaptive"), "bit-choice adaptive"),
                     (dict(preset="fast", predictor="linear-trend"), "predictor cache"),
                     (dict(preset="fast", sync_policy="adaptive"), "other than adaptive")):
        with pytest.raises(ValueError, match="--halo-sample") as err:
            TrainConfig.from_dict(dict(halo_sample=0.3, **bad)).validate()
        assert why in str(err.value)
    with pytest.raises(ValueError, match=r"--halo-sample must lie in \[0, 1\]"):
        TrainConfig.from_dict(dict(halo_sample=1.5)).validate()


def test_the_exceptions_of_fast_are_one_table_and_the_docs_show_it():
    """Every context that takes another value than fast's is a row of RULES; the design
    document shows that table as generated, and --help names every context."""
    from pathlib import Path
    from dgl_sni.config.presets import RULES, describe, rules_table
    doc = (Path(__file__).resolve().parents[3] / "docs" / "design-choices.md").read_text()
    assert rules_table() in doc
    text = describe("fast")
    for rule in RULES:
        assert rule.context.replace("_", " ") in text and rule.why
        if rule.setting != "preset":
            assert f"{rule.setting} {rule.value}" in text
