"""Run a sweep of training configurations on one emulated cluster and read the results back."""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _wanted(run: dict, dataset_args: list, workers: int, base_args=()) -> dict:
    """Every sweepable setting of ``run`` as the trainers will see it (the run's own values,
    its preset's and the defaults elsewhere), with the workers and the dataset flags: a finished run is reused
    only when all of them match, so a changed default never reuses a run made under the old one."""
    from dgl_sni.config import SWEEPABLE, add_train_arguments, from_args

    parser = argparse.ArgumentParser()
    add_train_arguments(parser)
    flags = list(map(str, dataset_args))
    base = from_args(parser.parse_args(flags + ["--workers", str(workers), *map(str, base_args)]))
    config = base.with_settings(run).as_dict()  # as the trainers expand it (the run's preset included)
    wanted = {k: config[k] for k in SWEEPABLE}
    wanted["workers"] = workers
    for flag in flags[::2]:  # as parsed: a stored 20.0 matches --avg-degree 20
        key = flag.lstrip("-").replace("-", "_")
        wanted[key] = config[key]
    return {k: str(v) for k, v in wanted.items()}


# Settings added after runs kept here (result folders, the committed record) were trained, each
# with a default that does what those runs did: a kept run that does not name one matches a run
# that wants its default.
ADDED = {"bit_choice": "fixed", "average_trend": "none", "stale_trend": "0.0"}


def matches(stored: dict, wanted: dict) -> bool:
    """Whether a kept run's settings (``stored``: its config, or its record key's settings) are
    ``wanted``'s (:func:`_wanted`); a setting of :data:`ADDED` it does not name counts as its
    default."""
    return all(str(stored[k]) == v if k in stored else ADDED.get(k) == v for k, v in wanted.items())


def _finished(out_dir: str) -> dict:
    """Config of every finished run file in ``out_dir`` and in staging folders that an
    interrupted sweep left behind, by path."""
    found = {}
    folders = [out_dir] + [os.path.join(out_dir, d) for d in sorted(os.listdir(out_dir))
                           if d.startswith(".sweep") and os.path.isdir(os.path.join(out_dir, d))]
    for folder in folders:
        for name in sorted(os.listdir(folder)):
            if name.startswith("run") and name.endswith(".json"):
                try:
                    with open(os.path.join(folder, name)) as fh:
                        found[os.path.join(folder, name)] = json.load(fh)["config"]
                except (OSError, ValueError, KeyError):
                    pass  # unfinished or foreign: ignored, never overwritten
    return found


def _fresh_names(out_dir: str):
    taken = set(os.listdir(out_dir))
    for k in range(10**6):
        if f"run{k:03d}.json" not in taken:
            yield os.path.join(out_dir, f"run{k:03d}.json")


def run_sweep(dataset_args: list, workers: int, runs: list, out_dir: str, base_args=()) -> list:
    """Train every run (a dict of sweepable settings) on one cluster; return their metrics.

    A run whose settings match a metrics file already in ``out_dir`` is not rerun, so an
    interrupted study resumes where it stopped. New runs are written to a staging folder
    ``out_dir/.sweep-*`` while the sweep runs and moved to fresh ``runNNN.json`` names.
    """
    os.makedirs(out_dir, exist_ok=True)
    finished = _finished(out_dir)
    paths, todo = [None] * len(runs), []
    for i, run in enumerate(runs):
        wanted = _wanted(run, dataset_args, workers, base_args)
        hit = next((p for p, c in finished.items() if matches(c, wanted)), None)
        if hit is None:
            todo.append(i)
        else:
            paths[i] = hit
            del finished[hit]
    if len(todo) < len(runs):
        print(f"  resuming: {len(runs) - len(todo)} of {len(runs)} runs already done", flush=True)
    fresh = _fresh_names(out_dir)
    for i, path in enumerate(paths):  # adopt runs finished by an interrupted sweep
        if path is not None and os.path.dirname(path) != out_dir:
            paths[i] = next(fresh)
            os.replace(path, paths[i])
    if todo:
        start = time.time()
        stage = tempfile.mkdtemp(dir=out_dir, prefix=".sweep-")
        sweep = os.path.join(stage, "sweep.json")
        with open(sweep, "w") as fh:
            json.dump([runs[i] for i in todo], fh)
        cmd = [sys.executable, "-m", "dgl_sni.cli", "train", *map(str, dataset_args), "--workers",
               str(workers), *map(str, base_args), "--sweep", sweep, "--metrics", stage, "--quiet"]
        env = dict(os.environ, PYTHONPATH=ROOT)
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
        for j, i in enumerate(todo):  # keep every finished run, also when a later one failed
            done = os.path.join(stage, f"run{j:03d}.json")
            if os.path.exists(done):
                paths[i] = next(fresh)
                os.replace(done, paths[i])
        if proc.returncode != 0:
            raise RuntimeError(f"sweep failed ({proc.returncode}), finished runs kept in {out_dir}:\n"
                               f"{proc.stderr[-4000:]}")
        shutil.rmtree(stage, ignore_errors=True)
        print(f"  {len(todo)} runs in {time.time() - start:.0f} s", flush=True)
    for stale in [d for d in os.listdir(out_dir) if d.startswith(".sweep")]:
        if not any(n.startswith("run") for n in os.listdir(os.path.join(out_dir, stale))):
            shutil.rmtree(os.path.join(out_dir, stale), ignore_errors=True)
    results = []
    for path in paths:
        with open(path) as fh:
            metrics = json.load(fh)
        # when the run was trained (its file is written once): reused runs keep their own time
        metrics["saved"] = time.strftime("%Y-%m-%d %H:%M", time.localtime(os.path.getmtime(path)))
        results.append(metrics)
    return results


def dataset_args(name: str) -> list:
    if name == "synthetic":
        return ["--dataset", "synthetic", "--nodes", 100_000]
    return ["--dataset", name]
