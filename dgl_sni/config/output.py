"""The output part: progress, metrics, checkpoints, sweeps."""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from typing import ClassVar

from .options import option

CHECKPOINT_NAME = re.compile(r"^epoch_(\d+)\.pt$")  # what save_checkpoint writes: epoch_{epoch}.pt


def find_checkpoint(directory: str) -> tuple:
    """``(path, epoch)`` of the newest checkpoint in ``directory``: the ``epoch_N.pt`` of the
    largest N (not the newest file: a folder written by two runs keeps its order).

    Raises ``ValueError`` naming the problem: the folder is missing or holds no checkpoint.
    Reads only names (no torch): the CLI calls it before the cluster starts.
    """
    if not os.path.exists(directory):
        raise ValueError(f"--resume {directory}: no such folder")
    if not os.path.isdir(directory):
        raise ValueError(f"--resume {directory} is not a folder (give the --checkpoint-dir of the run "
                         f"to resume)")
    found = [(int(m.group(1)), name) for name in os.listdir(directory)
             if (m := CHECKPOINT_NAME.match(name)) and os.path.isfile(os.path.join(directory, name))]
    if not found:
        raise ValueError(f"--resume {directory} holds no checkpoint (epoch_N.pt): was it the "
                         f"--checkpoint-dir of a run that finished at least one epoch?")
    epoch, name = max(found)
    return os.path.join(directory, name), epoch


def resume_point(directory: str, epochs: int) -> tuple:
    """``(path, epoch)`` of the checkpoint ``--resume directory`` continues from (the newest
    ``epoch_N.pt`` by N); a ``ValueError`` when the folder has none or when epoch N was the
    last of ``epochs`` (nothing left to train)."""
    path, epoch = find_checkpoint(directory)
    if epoch + 1 >= epochs:
        raise ValueError(f"--resume {directory}: its newest checkpoint {os.path.basename(path)} is of epoch "
                         f"{epoch}, and --epochs {epochs} ends at epoch {epochs - 1}: nothing to resume "
                         f"(give a larger --epochs, the total of the run, to train further)")
    return path, epoch


def check_writable(flag: str, path: str, folder: bool) -> None:
    """Raise ``ValueError`` naming ``flag`` unless a run can write ``path``: a folder
    (``folder``) or a file there. The launcher calls it before any machine starts, so a run
    never trains to the end and then fails to write what it trained.

    The nearest folder that exists must be one, and a folder must be creatable in it (tried
    and removed again: write permission alone does not tell, e.g. under ``/proc`` or on a
    read-only mount). A file's path must not be a folder, a folder's not a file. Creates
    nothing that stays.
    """
    path = os.path.abspath(path)
    if os.path.isdir(path) and not folder:
        raise ValueError(f"{flag} {path} is a folder; give a file name (e.g. {os.path.join(path, 'metrics.json')})")
    if os.path.exists(path) and not os.path.isdir(path) and folder:
        raise ValueError(f"{flag} {path} is a file; give a folder")
    base = path if folder else os.path.dirname(path)
    while not os.path.exists(base):
        base = os.path.dirname(base)
    if not os.path.isdir(base):
        raise ValueError(f"{flag} {path}: {base} is a file, so no folder can be made there")
    try:
        shutil.rmtree(tempfile.mkdtemp(prefix=".dgl-sni-probe-", dir=base))
    except OSError as err:
        raise ValueError(f"{flag} {path}: cannot write under {base} ({err.strerror or err})") from None


@dataclass
class OutputConfig:
    """What a run writes (progress line, metrics JSON, checkpoints) and the sweep it runs."""

    TITLE: ClassVar[str] = "output"

    quiet: bool = option(False, "no progress line", common=True)
    metrics: str | None = option(None, "write the metrics JSON here", common=True)
    checkpoint_dir: str | None = option(None, "rank 0 saves weights and optimizer state here (epoch_N.pt)",
                                        common=True)
    checkpoint_every: int = option(1, "save a checkpoint every N epochs",
                                   needs=("--checkpoint-dir or --resume", lambda c: c.checkpoints_to is not None))
    resume: str | None = option(None, "continue a stopped run from the newest epoch_N.pt in this "
                                      "--checkpoint-dir of it (weights, optimizer, step) at epoch N+1, up to "
                                      "--epochs; new checkpoints go there too unless --checkpoint-dir is given",
                                common=True)
    epoch_gate: str | None = option(None, "benchmarks: FIFO folder that steps epochs one by one "
                                          "(dgl_sni.worker.EpochGate)", hidden=True)
    sweep: str | None = option(None, "JSON list of runs (each a dict of model/optimiser/prediction settings) "
                                     "to train one after another on the same cluster; --metrics is then a folder",
                               common=True)

    @property
    def checkpoints_to(self) -> str | None:
        """Where checkpoints are written: ``--checkpoint-dir``, else the ``--resume`` folder
        (a run resumed twice continues from the second run's checkpoints)."""
        return self.checkpoint_dir or self.resume

    def check_writable(self) -> None:
        """Refuse (``ValueError``) a metrics path or checkpoint folder a run could not write
        (:func:`check_writable`; with ``--sweep``, ``--metrics`` is a folder)."""
        if self.metrics:
            check_writable("--metrics", self.metrics, folder=bool(self.sweep))
        if self.checkpoints_to:
            check_writable("--checkpoint-dir" if self.checkpoint_dir else "--resume", self.checkpoints_to,
                           folder=True)

    def validate(self) -> "OutputConfig":
        if self.checkpoint_every < 1:
            raise ValueError(f"--checkpoint-every must be at least 1, got {self.checkpoint_every}")
        if self.resume is not None:
            if self.sweep:
                raise ValueError("--resume cannot be combined with --sweep (resume one run at a time)")
            find_checkpoint(self.resume)  # the folder exists and holds a checkpoint
        return self
