"""Run a sweep of training configurations on one emulated cluster and read the results back."""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_sweep(dataset_args: list, workers: int, runs: list, out_dir: str, base_args=()) -> list:
    """Train every run (a dict of sweepable settings) on one cluster; return their metrics."""
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump(runs, fh)
        sweep = fh.name
    cmd = [sys.executable, "-m", "dgl_sni.cli", "train", *map(str, dataset_args), "--workers", str(workers),
           *map(str, base_args), "--sweep", sweep, "--metrics", out_dir, "--quiet"]
    start = time.time()
    env = dict(os.environ, PYTHONPATH=ROOT)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    os.unlink(sweep)
    if proc.returncode != 0:
        raise RuntimeError(f"sweep failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
    results = []
    for index in range(len(runs)):
        with open(os.path.join(out_dir, f"run{index:03d}.json")) as fh:
            results.append(json.load(fh))
    print(f"  {len(runs)} runs in {time.time() - start:.0f} s", flush=True)
    return results


def dataset_args(name: str) -> list:
    if name == "synthetic":
        return ["--dataset", "synthetic", "--nodes", 100_000]
    return ["--dataset", name]
