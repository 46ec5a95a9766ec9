"""Rank 0's progress output and the epoch gate benchmarks drive training with.

:class:`Progress` writes one JSON line per epoch for the launcher (or draws its own tqdm
line); :class:`EpochGate` lets an outside driver step training one epoch at a time. Both
are used by :mod:`dgl_sni.worker`.
"""
from __future__ import annotations

import json
import os
import sys

import torch


class EpochGate:
    """Lets an outside driver step training one epoch at a time (benchmarks).

    ``DIR/go`` and ``DIR/done`` are FIFOs made by the driver. Before each epoch rank 0
    reads one byte from ``go`` (``q`` stops training) and tells the other ranks; after
    the training step it writes one byte to ``done``.
    """

    def __init__(self, directory: str, collective):
        self.collective = collective
        self._go = open(os.path.join(directory, "go"), "rb", buffering=0) if collective.rank == 0 else None
        self._done = open(os.path.join(directory, "done"), "wb", buffering=0) if collective.rank == 0 else None

    def wait(self) -> bool:
        flag = torch.zeros(1)
        if self._go is not None:
            byte = self._go.read(1)
            flag[0] = 0.0 if byte in (b"", b"q") else 1.0
        self.collective.broadcast(flag)
        return bool(flag.item())

    def done(self) -> None:
        if self._done is not None:
            self._done.write(b".")


# what an epoch event carries: figures every trainer has alike (the per-worker counters are
# merged at the end, in the metrics file)
EPOCH_EVENT = ("epoch", "mode", "loss", "train_acc", "eval_train_acc", "val_acc", "test_acc")


LOG_INTERVAL_S = 10.0  # a progress bar written to a log (not a terminal) redraws at most this often


def progress_bar(total: int, desc: str, file=None):
    """A tqdm bar on ``file`` (stderr): redrawn as tqdm does on a terminal, and at most every
    :data:`LOG_INTERVAL_S` seconds where the stream is a log file or a pipe (a scheduler's
    job log would otherwise get a redraw per epoch)."""
    from tqdm import tqdm
    file = sys.stderr if file is None else file
    return tqdm(total=total, desc=desc, unit="epoch", file=file,
                mininterval=0.1 if file.isatty() else LOG_INTERVAL_S)


def emit(path: str, obj: dict) -> None:
    with open(path, "a") as fh:
        fh.write(json.dumps(obj) + "\n")


class Progress:
    """Rank 0's per-epoch output: JSON lines for the launcher, or a tqdm line of its own."""

    def __init__(self, total_epochs: int, quiet: bool, path):
        self.path, self.bar = path, None
        if path is None and not quiet:
            self.bar = progress_bar(total_epochs, "train")

    def begin_run(self, index: int, count: int) -> None:
        if self.path and count > 1:
            emit(self.path, dict(event="run", index=index, count=count))

    def update(self, rec: dict) -> None:
        """Rank 0's record of an epoch; its global figures (the same on every trainer) go out."""
        if self.path:
            emit(self.path, dict(event="epoch", **{k: rec[k] for k in EPOCH_EVENT if k in rec}))
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{rec['loss']:.4f}", val=f"{rec.get('val_acc', float('nan')):.3f}",
                                refresh=False)  # drawn by update, at its interval
            self.bar.update(1)

    def close(self, summary: dict) -> None:
        if self.path:
            emit(self.path, dict(event="done", summary=summary))
        if self.bar is not None:
            self.bar.close()
