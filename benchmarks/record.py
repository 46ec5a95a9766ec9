"""The committed record of a suite's runs: what lets a report be recomputed without training.

A training run writes a metrics file of a few hundred kilobytes (every epoch's figures per
worker). The results report keeps, for each run it uses, a *compact* copy: the run's
configuration, partition, summary and what was in effect, the machine it ran on, and per epoch
the figures the report reads (time and its parts, mode, loss, accuracies, bytes, rows), without
the per-worker lists. Compact copies are gzipped JSON, one file per sweep folder, under
``benchmarks/record/<suite>/``, and are committed.

Two sources hand a sweep's metrics to the report, with the signature of
:func:`benchmarks._sweep.run_sweep`:

* :class:`Recorder` trains (or reuses a finished run, as ``run_sweep`` does), stores the compact
  copies and returns them, so the live report is computed from exactly what is kept;
* :class:`Replay` returns the kept copies and trains nothing; a run the record lacks is a
  :class:`MissingRun` naming it.

Each part of a report that is not a sweep (DGL's example, the machine, the clean-up check) is kept
beside them as a named JSON document (:meth:`RecordBase.put` / :meth:`RecordBase.get`).
"""
from __future__ import annotations

import abc
import gzip
import json
import os

from benchmarks._sweep import _wanted, matches, run_sweep

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORD = os.path.join(ROOT, "benchmarks", "record")
PATH_KEYS = ("dataset", "model_file", "data_dir", "storage_tier")  # kept by file name: machines differ


class MissingRun(LookupError):
    """A run the record does not hold (``--no-run`` on a record without it)."""


def compact(metrics: dict, cores: int | None = None) -> dict:
    """``metrics`` without the per-worker lists of each epoch (the epoch's own figures are the
    slowest worker's times and the workers' summed bytes and rows), with the host's cores."""
    out = {k: v for k, v in metrics.items() if k != "epochs"}
    out["epochs"] = [{k: v for k, v in e.items() if k != "workers"} for e in metrics["epochs"]]
    out.setdefault("host_cores", cores or os.cpu_count())
    return out


def kept_key(kept: dict, key: str) -> str | None:
    """The key under which ``kept`` holds the run named ``key``: ``key`` itself, or one made
    before a setting of :data:`benchmarks._sweep.ADDED` existed that matches it."""
    if key in kept:
        return key
    folder, settings = key.split("|", 1)
    wanted = json.loads(settings)
    return next((k for k in kept if k.split("|", 1)[0] == folder and matches(json.loads(k.split("|", 1)[1]), wanted)),
                None)


def run_key(folder: str, run: dict, dataset_args: list, workers: int, base_args=()) -> str:
    """A run's name in the record: its sweep folder and every setting the trainers saw (paths by
    their file name, so that a record made on one machine replays on another)."""
    wanted = _wanted(run, dataset_args, workers, base_args)
    for key in PATH_KEYS:
        if wanted.get(key) not in (None, "None"):
            wanted[key] = os.path.basename(wanted[key].split(":")[0])
    return os.path.basename(os.path.normpath(folder)) + "|" + json.dumps(wanted, sort_keys=True)


class RecordBase(abc.ABC):
    """One suite's record folder; subclasses say where a sweep's metrics come from."""

    def __init__(self, suite: str, root: str = RECORD):
        self.folder = os.path.join(root, suite)

    def _file(self, name: str) -> str:
        return os.path.join(self.folder, f"{name}.json.gz")

    def _read(self, name: str):
        path = self._file(name)
        if not os.path.exists(path):
            return None
        with gzip.open(path, "rt") as fh:
            return json.load(fh)

    def _write(self, name: str, value) -> None:
        os.makedirs(self.folder, exist_ok=True)
        tmp = self._file(name) + ".tmp"
        with gzip.GzipFile(tmp, "wb", mtime=0) as raw:  # mtime 0: the same runs give the same bytes
            raw.write(json.dumps(value, sort_keys=True, separators=(",", ":")).encode())
        os.replace(tmp, self._file(name))

    def get(self, name: str):
        """A named document of the record (``None`` if it has none)."""
        return self._read(f"doc-{name}")

    @abc.abstractmethod
    def put(self, name: str, value) -> None:
        """Keep a named document (the live source only)."""

    @abc.abstractmethod
    def sweep(self, dataset_args: list, workers: int, runs: list, out_dir: str, base_args=()) -> list:
        """The compact metrics of ``runs``, as :func:`benchmarks._sweep.run_sweep` is called."""

    def all_runs(self) -> list:
        """Every compact run of the record (the cost model is fitted to them)."""
        if not os.path.isdir(self.folder):
            return []
        out = []
        for name in sorted(os.listdir(self.folder)):
            if name.startswith("runs-") and name.endswith(".json.gz"):
                out += [m for _, m in sorted(self._read(name[:-len(".json.gz")]).items())]
        return out


class Recorder(RecordBase):
    """Trains what a sweep needs (reusing finished runs) and keeps their compact copies."""

    def put(self, name: str, value) -> None:
        self._write(f"doc-{name}", value)

    def sweep(self, dataset_args, workers, runs, out_dir, base_args=()) -> list:
        metrics = run_sweep(dataset_args, workers, runs, out_dir, base_args=base_args)
        name = "runs-" + os.path.basename(os.path.normpath(out_dir))
        kept = self._read(name) or {}
        out = []
        for run, m in zip(runs, metrics):
            c = compact(m)
            key = run_key(out_dir, run, dataset_args, workers, base_args)
            kept.pop(kept_key(kept, key), None)  # kept under an older key: now under its full one
            kept[key] = c
            out.append(c)
        self._write(name, kept)
        return out


class Replay(RecordBase):
    """Reads a suite's runs back from its record; trains nothing."""

    def put(self, name: str, value) -> None:
        pass  # the record is read, never rewritten, when nothing was trained

    def sweep(self, dataset_args, workers, runs, out_dir, base_args=()) -> list:
        name = "runs-" + os.path.basename(os.path.normpath(out_dir))
        kept = self._read(name) or {}
        out = []
        for run in runs:
            key = kept_key(kept, run_key(out_dir, run, dataset_args, workers, base_args))
            if key is None:
                raise MissingRun(f"{self.folder} holds no run {out_dir.rstrip('/').split('/')[-1]} {run}: run "
                                 "the suite (without --no-run) to measure it")
            out.append(kept[key])
        return out
