"""Helpers the tests import (``from tests.helpers import ...``): the repository root, the
network-namespace mark, shared datasets and running the dgl-sni CLI. Fixtures live in conftest.py."""
import json
import os
import subprocess
import sys

import pytest

import dgl_sni  # noqa: F401  (DGL shims first)
from dgl_sni.cluster import netns_available
from dgl_sni.data import default_data_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

needs_netns = pytest.mark.skipif(not netns_available()[0],
                                 reason="emulated machines need root (network namespaces)")


def shared_dataset(name):
    path = os.path.join(default_data_dir(), f"{name}.npz")
    if not os.path.exists(path):
        pytest.skip(f"{path} not present")
    return path


def run_cli(*args, timeout=600, check=True, env=None):
    """Run ``python -m dgl_sni.cli ARGS``; return the CompletedProcess."""
    full_env = dict(os.environ, PYTHONPATH=ROOT, PYTHONWARNINGS="ignore")
    if env:
        full_env.update(env)
    proc = subprocess.run([sys.executable, "-m", "dgl_sni.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=full_env, cwd=ROOT)
    if check and proc.returncode != 0:
        raise AssertionError(f"dgl-sni {' '.join(map(str, args))} failed ({proc.returncode}):\n"
                             f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def read_metrics(path):
    with open(path) as fh:
        return json.load(fh)


def leftover_namespaces():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [ln.split()[0] for ln in out.splitlines() if ln.startswith("sni")]


def train_sweep(out_dir, entries, *args, checkpoints=False, env=None):
    """Train every entry of ``entries`` (dicts of sweepable settings) one after another on one
    emulated cluster (``dgl-sni train ARGS --sweep``: one start-up, one partitioning).

    Returns, per entry, its metrics and (with ``checkpoints``) its checkpoint folder. Runs of
    a sweep are the runs one would get one at a time (each starts from its seed; the
    exchange tensors are zeroed between runs)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    sweep, metrics, ckpt = out_dir / "sweep.json", out_dir / "metrics", out_dir / "ckpt"
    sweep.write_text(json.dumps(list(entries)))
    run_cli("train", *args, "--quiet", "--sweep", sweep, "--metrics", metrics,
            *(("--checkpoint-dir", ckpt) if checkpoints else ()), env=env)
    return [(read_metrics(metrics / f"run{i:03d}.json"), ckpt / f"run{i:03d}" if checkpoints else None)
            for i in range(len(entries))]
