"""The data part: which graph a run trains on."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .options import option

FEATURE_NORMS = ("auto", "row", "none")  # how a graph's features are normalised (dgl_sni.data applies them)


@dataclass
class DataConfig:
    """The dataset (a file or the embedded synthetic generator's parameters) and its feature normalisation."""

    TITLE: ClassVar[str] = "data"

    dataset: str = option("synthetic", "synthetic, cora, citeseer, pubmed, a .npz file or a DGL .bin graph file",
                          common=True)
    data_dir: str | None = option(None, "folder holding cora.npz, citeseer.npz and pubmed.npz")
    nodes: int = option(20000, "synthetic: number of nodes", needs=("--dataset synthetic", lambda c: c.dataset == "synthetic"))
    avg_degree: float = option(10.0, "synthetic: directed edges per node", needs=("--dataset synthetic", lambda c: c.dataset == "synthetic"))
    classes: int = option(8, "synthetic: number of classes", needs=("--dataset synthetic", lambda c: c.dataset == "synthetic"))
    feat_dim: int = option(64, "synthetic: feature width", needs=("--dataset synthetic", lambda c: c.dataset == "synthetic"))
    data_seed: int = option(0, "synthetic: graph seed", needs=("--dataset synthetic", lambda c: c.dataset == "synthetic"))
    feature_norm: str = option("auto", "row-normalise features; auto: when all are non-negative (bag of words)",
                               choices=FEATURE_NORMS)

    def synthetic_args(self) -> dict:
        """Keyword arguments of :func:`dgl_sni.data.load_dataset` for the synthetic generator."""
        return dict(num_nodes=self.nodes, avg_degree=self.avg_degree, num_classes=self.classes,
                    feat_dim=self.feat_dim, seed=self.data_seed)

    def validate(self) -> "DataConfig":
        return self  # a bad dataset is reported when it is loaded
