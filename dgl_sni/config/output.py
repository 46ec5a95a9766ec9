"""The output part: progress, metrics, checkpoints, sweeps."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .options import option


@dataclass
class OutputConfig:
    """What a run writes (progress line, metrics JSON, checkpoints) and the sweep it runs."""

    TITLE: ClassVar[str] = "output"

    quiet: bool = option(False, "no progress line")
    metrics: str | None = option(None, "write the metrics JSON here")
    checkpoint_dir: str | None = option(None, "rank 0 saves weights and optimizer state here (epoch_N.pt)")
    checkpoint_every: int = option(1, "save a checkpoint every N epochs")
    epoch_gate: str | None = option(None, "benchmarks: FIFO folder that steps epochs one by one "
                                          "(dgl_sni.worker.EpochGate)", hidden=True)
    sweep: str | None = option(None, "JSON list of runs (each a dict of model/optimiser/prediction settings) "
                                     "to train one after another on the same cluster; --metrics is then a folder")

    def validate(self) -> "OutputConfig":
        if self.checkpoint_every < 1:
            raise ValueError(f"--checkpoint-every must be at least 1, got {self.checkpoint_every}")
        return self
