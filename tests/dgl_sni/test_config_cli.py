"""Configuration declared once: parts, generated flags, flat view, and a DGL-free ``--help``."""
import argparse
import json
import subprocess
import sys
from dataclasses import fields

import pytest

from conftest import ROOT
from dgl_sni.config import (MODEL_NAMES, PREDICTORS, SWEEPABLE, DataConfig, SNIConfig, TrainConfig,
                            add_train_arguments, from_args, load_sweep)
from dgl_sni.config.options import option_of

# the flat keys of the metrics JSON's "config" before the parts existed (result files read them)
OLD_KEYS = (
    "dataset data_dir nodes avg_degree classes feat_dim data_seed feature_norm workers partition bandwidth "
    "cluster port master_port threads timeout run_dir model layers hidden heads epochs lr dropout weight_decay "
    "seed eval_every sync_interval sampling_ratio warmup predictor stale_grad sync_policy drift_bound "
    "measure_staleness transfer agent doca_pci doca_name storage_tier device_mem_budget host_cache_budget "
    "subparts quiet metrics checkpoint_dir checkpoint_every epoch_gate sweep").split()
STOCK_SCRIPT_ONLY = {"tensors", "static", "feature_cache_bytes"}  # read from DGL_SNI_CONFIG only
# settings added since the parts existed (issues 11 and 13; sync_loss_gap: the guarded policy;
# dropout_stream: the null runs of the paired-seed studies)
NEW_KEYS = {"sync_drift", "quantize", "stale_eval", "agent_timeout", "agent_dir", "resume", "sync_loss_gap", "smooth",
            "allocator", "stale_halo", "sync_halo", "dropout_stream"}
# settings the non-default config below leaves at their defaults, and why
KEPT = {"quantize": "quantized rows cannot be tier-backed (the config sets --storage-tier)",
        "agent_dir": "standalone socket agents need --agent process (the config sets inline)",
        "resume": "needs a folder holding a checkpoint, and excludes --sweep (the config sets one)"}


def _train_parser():
    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    return parser


def _non_default() -> TrainConfig:
    return TrainConfig.from_dict(dict(
        dataset="cora", data_dir="/d", nodes=500, avg_degree=4.5, classes=3, feat_dim=7, data_seed=9,
        feature_norm="row", workers=3, partition="random", bandwidth="100mbit", cluster="loopback",
        port=31000, master_port=31001, threads=2, allocator="system", timeout=60.5, run_dir="/r",
        model="gat", layers=3,
        hidden=8, heads=2, dropout=0.25, lr=0.005, weight_decay=0.0, seed=4, epochs=7, eval_every=2,
        sync_interval=4, sampling_ratio=0.3, warmup=7, predictor="holt", stale_grad="skip",
        sync_policy="adaptive", drift_bound=0.1, measure_staleness=True, transfer=False, agent="inline",
        doca_pci="0000:03:00.0", doca_name="sni-x", window=6, beta=0.5, lam=0.05, storage_tier="/t",
        device_mem_budget="512M", host_cache_budget="4G", subparts=3, quiet=True, metrics="/m.json",
        checkpoint_dir="/c", checkpoint_every=2, epoch_gate="/g", sweep="/s.json", sync_drift=0.2,
        stale_eval=True, agent_timeout=3.0, sync_loss_gap=0.05, smooth=0.5, stale_halo="rows",
        sync_halo="rows", dropout_stream=2)).validate()


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
            assert opt.help, f.name
            if not opt.cli:
                assert f.name in STOCK_SCRIPT_ONLY
                assert f.name not in actions
                continue
            action = actions[f.name]
            assert action.help == (argparse.SUPPRESS if opt.hidden else opt.help), f.name
            assert action.default == getattr(part, f.name), f.name
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


def test_train_keeps_its_defaults_and_the_stock_switch_keeps_its_own():
    cfg = TrainConfig()
    assert cfg.sni.sync_interval == 1 and SNIConfig().sync_interval == 5
    assert not cfg.sni_active
    ns = _train_parser().parse_args([])
    assert from_args(ns) == cfg


def test_flags_round_trip_a_non_default_config():
    cfg = _non_default()
    defaults = TrainConfig().as_dict()
    assert all(value != defaults[key] for key, value in cfg.as_dict().items() if key not in KEPT)  # all moved
    argv = cfg.to_argv()
    assert "--no-transfer" in argv and "--measure-staleness" in argv and "--quiet" in argv
    for flag, value in (("--window", "6"), ("--beta", "0.5"), ("--lam", "0.05")):
        assert argv[argv.index(flag) + 1] == value
    assert from_args(_train_parser().parse_args(argv)) == cfg


def test_the_settings_it_keeps_round_trip_too():
    cfg = TrainConfig.from_dict(dict(quantize=4, agent="process", agent_dir="/a", sync_interval=3)).validate()
    assert from_args(_train_parser().parse_args(cfg.to_argv())) == cfg
    with pytest.raises(ValueError, match="--quantize is not supported with --storage-tier"):
        TrainConfig.from_dict(dict(quantize=8, storage_tier="/t")).validate()


def test_worker_parses_the_same_flags():
    from dgl_sni.worker import _parse
    cfg = _non_default()
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
    cfg = _non_default()
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
                              "stale_halo", "sync_halo", "dropout_stream"}
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


def test_train_smooths_stale_rows_unless_told_otherwise_and_the_switch_never_does():
    parse = lambda *argv: from_args(_train_parser().parse_args(list(argv))).sni  # noqa: E731
    assert parse().smooth is None and parse().smoothing == 0.75
    assert parse("--smooth", "0").smoothing == 0.0 and parse("--smooth", "0.5").smoothing == 0.5
    assert parse("--sync-policy", "pipeline").smoothing == 0.0  # no agent: nothing to smooth
    assert parse("--sync-policy", "adaptive").smoothing == 0.75
    with pytest.raises(ValueError, match="--smooth does not combine with --sync-policy pipeline"):
        parse("--sync-policy", "pipeline", "--smooth", "0.5")
    assert parse().predictor == "cache"
    assert SNIConfig().smoothing == 0.0 and SNIConfig().predictor == "gated"  # the stock-script switch's


def test_stale_train_runs_travel_in_8_bits_unless_told_otherwise_and_exact_ones_never_do():
    parse = lambda *argv: from_args(_train_parser().parse_args(list(argv)))  # noqa: E731
    assert parse().sni.quantize is None and parse().quantize_bits == 0  # interval 1: exact
    assert parse("--sync-interval", "5").quantize_bits == 8
    assert parse("--sync-policy", "adaptive").quantize_bits == 8  # stale epochs at interval 1
    assert parse("--sync-interval", "5", "--quantize", "0").quantize_bits == 0
    assert parse("--sync-interval", "5", "--quantize", "4").quantize_bits == 4
    assert parse("--sync-interval", "5", "--predictor", "none").quantize_bits == 0  # never stale
    assert parse("--sync-policy", "pipeline").quantize_bits == 0  # not measured: opt-in
    assert parse("--sync-interval", "5", "--storage-tier", "/t").quantize_bits == 0  # rows in files
    with pytest.raises(ValueError, match="--quantize must be one of 0, 4, 8 bits, got 6"):
        SNIConfig(quantize=6).validate()
    assert SNIConfig().quantize == 0  # the stock-script switch's


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
