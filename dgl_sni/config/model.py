"""The model and optimiser part: identical on every worker."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .options import option

MODEL_NAMES = ("gcn", "sage", "gat")  # dgl_sni.models
CUSTOM_MODEL = "custom"  # what a run of --model-file is, where settings depend on the model (presets, blocks)


@dataclass
class ModelConfig:
    """Model and optimiser settings and the training schedule; identical on every worker."""

    TITLE: ClassVar[str] = "model and optimiser"

    model: str = option("gcn", "GNN architecture", choices=MODEL_NAMES, sweep=True, common=True)
    model_file: str = option("", "a model of your own: FILE.py:build, where build(in_feats, num_classes, cfg) "
                                 "returns a torch module with forward(blocks, x) written from DGL's layers "
                                 "(docs/models.md); replaces --model", sweep=True, common=True)
    layers: int = option(2, "GNN layers", sweep=True, common=True)
    hidden: int = option(16, "hidden width (per head for GAT)", sweep=True, common=True)
    heads: int = option(4, "GAT heads in hidden layers (a model file's build reads it as cfg.heads)", sweep=True,
                        needs=("--model gat or --model-file", lambda c: c.model == "gat" or bool(c.model_file)))
    dropout: float = option(0.5, "dropout probability on each layer's input", sweep=True, common=True)
    lr: float = option(0.01, "Adam learning rate", sweep=True, common=True)
    weight_decay: float = option(5e-4, "Adam weight decay", sweep=True)
    seed: int = option(0, "weights and dropout seed", sweep=True, common=True)
    dropout_stream: int = option(0, "draw the dropout masks from another stream of --seed (0: the seed's own); "
                                    "two runs that differ only here start from the same weights and see "
                                    "different masks, the noise of exact training between paired runs",
                                 sweep=True)
    epochs: int = option(100, "training epochs", sweep=True, common=True)
    eval_every: int = option(1, "evaluate every N epochs (and after the last)", sweep=True)

    @property
    def arch(self) -> str:
        """The model as far as other settings depend on it: ``--model``, or ``custom`` for a
        model file."""
        return CUSTOM_MODEL if self.model_file else self.model

    @property
    def dropout_seed(self) -> int:
        """The seed of the keyed dropout masks: ``seed``, or one derived from it and
        ``dropout_stream``."""
        if self.dropout_stream == 0:
            return self.seed
        from ..dropout import derive_seed
        return derive_seed(self.seed, self.dropout_stream)

    def validate(self) -> "ModelConfig":
        """Raise ``ValueError`` naming the first bad setting."""
        checks = [
            (self.layers >= 1, f"--layers must be at least 1, got {self.layers}"),
            (self.hidden >= 1, f"--hidden must be at least 1, got {self.hidden}"),
            (self.heads >= 1, f"--heads must be at least 1, got {self.heads}"),
            (self.epochs >= 1, f"--epochs must be at least 1, got {self.epochs}"),
            (self.lr > 0, f"--lr must be positive, got {self.lr}"),
            (0.0 <= self.dropout < 1.0, f"--dropout must lie in [0, 1), got {self.dropout}"),
            (self.weight_decay >= 0, f"--weight-decay must be >= 0, got {self.weight_decay}"),
            (self.dropout_stream >= 0, f"--dropout-stream must be >= 0, got {self.dropout_stream}"),
            (self.eval_every >= 1, f"--eval-every must be at least 1, got {self.eval_every}"),
            (self.model in MODEL_NAMES, f"--model must be one of {', '.join(MODEL_NAMES)}"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        return self
