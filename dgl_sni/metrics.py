"""Per-epoch counters and the metrics JSON.

:class:`Counters` is the one mutable record that the exchange (bytes, communication
time) and the collective (barrier / all-reduce wait) add to while an epoch runs; the
trainer snapshots and resets it once per epoch. :func:`merge_epoch` folds the
per-worker snapshots into the epoch object written to ``--metrics``.
"""
from __future__ import annotations

import json
import os
import tempfile
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

from storage_tier.memory import peak_rss_mb  # noqa: F401  (re-exported: the worker reports it)

COUNTER_KEYS = ("comm_s", "sync_s", "bytes_sent", "bytes_recv")
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def host_steal_s(stat_path: str = "/proc/stat") -> float | None:
    """CPU time the hypervisor has taken from this host's cores since boot (all cores, the
    ``steal`` column of ``/proc/stat``), in seconds; ``None`` where the kernel does not say.
    The difference over an epoch is how much of it a shared virtual machine lost."""
    try:
        with open(stat_path) as fh:
            fields = fh.readline().split()
    except OSError:
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    return int(fields[8]) / _CLOCK_TICKS


@dataclass
class Counters:
    """What one worker spent on communication during the current epoch."""

    comm_s: float = 0.0
    sync_s: float = 0.0
    bytes_sent: int = 0
    bytes_recv: int = 0
    extra: dict = field(default_factory=dict)

    @contextmanager
    def timing(self, key: str):
        """Add the block's wall time to ``key`` (a field, or a named extra counter)."""
        start = time.perf_counter()
        try:
            yield
        finally:
            if key in COUNTER_KEYS:
                setattr(self, key, getattr(self, key) + time.perf_counter() - start)
            else:
                self.add(key, time.perf_counter() - start)

    def add(self, key: str, value) -> None:
        """Add to a named extra counter (e.g. ``pulled_rows``)."""
        self.extra[key] = self.extra.get(key, 0) + value

    def snapshot_and_reset(self) -> dict:
        out = {k: getattr(self, k) for k in COUNTER_KEYS}
        out.update(self.extra)
        self.comm_s = self.sync_s = 0.0
        self.bytes_sent = self.bytes_recv = 0
        self.extra = {}
        return out


SUMMED = ("bytes_sent", "bytes_recv", "eval_bytes", "measure_bytes", "predictor_s", "transfer_s",
          "cpu_s",  # the trainers' CPU time in the step: against the host's cores, what compute alone takes
          "agent_wait_s",  # summed like predictor_s: their ratio is the share of agent time not hidden
          # storage tier
          "storage_bytes", "storage_bytes_read", "storage_bytes_written", "storage_payload_read",
          "storage_payload_written", "storage_reads", "storage_writes", "cache_hits", "cache_misses",
          "cache_writeback_bytes", "fwd_bytes_read", "fwd_bytes_written", "bwd_bytes_read",
          "bwd_bytes_written")
MAXED = ("time_s", "comm_s", "sync_s", "comp_s", "eval_s",
         "steal_s",  # host-wide: every trainer of the machine reads the same counter
         "io_wait_s", "gather_s", "compute_s", "storage_read_s", "storage_write_s", "peak_rss_mb",
         "cache_peak_bytes", "cache_budget_bytes")
# staleness means derived from per-worker sums: name -> (numerator, denominator)
# (also per layer: the same names prefixed "l1_", "l2_", ...)
MEANS = dict(staleness_l2=("stale_l2_sum", "stale_l2_n"), cache_l2=("cache_l2_sum", "stale_l2_n"),
             pred_rows_l2=("pred_l2_sum", "pred_l2_n"), pred_rows_cache_l2=("pred_cache_l2_sum", "pred_l2_n"),
             true_l2=("true_l2_sum", "stale_l2_n"), grad_err_l2=("grad_err_sum", "grad_n"),
             grad_true_l2=("grad_true_sum", "grad_n"))


def _summed(key: str) -> bool:
    return key in SUMMED or key.endswith(("_rows", "_sum", "_n"))


def merge_epoch(per_worker: list) -> dict:
    """Combine the workers' records of one epoch.

    Global values (loss, accuracies, mode) are identical on every worker and taken from
    the first; byte and row counts are summed over workers; times are the slowest
    worker's (the epoch ends when the last one does); staleness errors become means
    over all measured rows of all workers. Each worker's own counters are kept under
    ``workers``.
    """
    first = per_worker[0]
    keys = {k for w in per_worker for k in w}
    out = {k: v for k, v in first.items() if not _summed(k) and k not in MAXED}
    for key in keys:
        if _summed(key):
            out[key] = sum(w.get(key, 0) for w in per_worker)
        elif key in MAXED:
            out[key] = max(w.get(key, 0.0) for w in per_worker)
    for name, (num, den) in MEANS.items():
        for prefix in {k[: -len(num)] for k in out if k.endswith(num)}:
            if out.get(prefix + den):
                out[prefix + name] = out[prefix + num] / out[prefix + den]
    if "cache_hits" in out:
        looked = out["cache_hits"] + out.get("cache_misses", 0)
        out["cache_hit_rate"] = out["cache_hits"] / looked if looked else 0.0
    for key in [k for k in out if k.endswith(("_sum", "_n"))]:
        del out[key]
    out["workers"] = [{k: w[k] for k in w if _summed(k) or k in MAXED} for w in per_worker]
    return out


def summarize(epochs: list, peak_rss: list) -> dict:
    """The ``summary`` object: best validation epoch, totals, largest trainer RSS."""
    best = max(epochs, key=lambda e: (e.get("val_acc", -1.0), -e["epoch"])) if epochs else {}
    return dict(
        best_val_acc=best.get("val_acc"),
        test_acc_at_best_val=best.get("test_acc"),
        best_epoch=best.get("epoch"),
        total_time_s=sum(e["time_s"] for e in epochs),
        total_bytes=sum(e["bytes_sent"] + e["bytes_recv"] for e in epochs),
        peak_rss_mb=max(peak_rss) if peak_rss else None,
        epochs=len(epochs),
    )


def write_metrics(path: str, config: dict, epochs: list, summary: dict, **extra) -> None:
    """Write the metrics JSON atomically (a crash never leaves half a file).

    The launcher checked ``path`` before training; if it still cannot be written (the disk
    filled, the folder went away), the metrics go to a file of the temporary folder and the
    ``OSError`` raised names both, so a finished run's figures are never lost.
    """
    doc = dict(config=config, epochs=epochs, summary=summary, **extra)
    try:
        _write_json(path, doc)
    except OSError as err:
        fd, kept = tempfile.mkstemp(prefix="dgl-sni-metrics-", suffix=".json")
        os.close(fd)
        _write_json(kept, doc)
        raise OSError(f"cannot write the metrics to {path} ({err.strerror or err}); "
                      f"they were written to {kept}") from err


def _write_json(path: str, doc: dict) -> None:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=1, default=_json_default)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if hasattr(obj, "__dataclass_fields__"):
        return asdict(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")
