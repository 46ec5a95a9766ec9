"""The built-in model, and what the trainers ask of any model.

:class:`FullGraphGNN` stacks the built-in layers (:mod:`dgl_sni.layers`) whose halo rows come
through one interface (:class:`~dgl_sni.halo.rows.HaloRows`) in the form the step's plan gives
each layer. The same model object runs in the single-process reference (the block spans the
whole graph: :class:`~dgl_sni.halo.rows.WholeGraph`) and in a distributed trainer (the
exchange writes the owned rows and brings the halo rows). :class:`TrainableModel` is what a
trainer asks of a model (also of a user's, :class:`~dgl_sni.block_model.BlockModel`);
:class:`KeyedDropper` the keyed dropout the built-in and the storage tier's models share.
"""
from __future__ import annotations

import abc
import threading
from contextlib import contextmanager

import torch
import torch.nn as nn

from storage_tier.block import GraphBlock
from .config.model import ModelConfig
from .dropout import KeyedMask, derive_seed, keyed_dropout

_MODEL = ModelConfig()  # the models' defaults are the configuration's
from .config import MODEL_NAMES  # declared without DGL
from .halo.rows import ROWS_ONLY, SPLITS, Form, HaloRows, WholeGraph
from .halo.sums import BlockSplit  # noqa: F401 (annotations)
from .layers import GATLayer, GCNLayer, HaloLinear, SAGELayer

DROPOUT_TAGS = {"feat": 1, "attn": 2}  # what a keyed dropout mask drops: layer inputs, GAT attention


class KeyedDropper:
    """The keyed dropout of layer ``layer`` at step ``step``: ``drop(x, keys, tag)`` applies
    it, ``drop.mask(keys, tag)`` hands it to a kernel that drops rows as it reads them.

    Its masks depend only on ``(seed, step, layer, tag)`` and each row's key, so every
    model that draws them here (:class:`FullGraphGNN`, the storage tier's models in
    :mod:`dgl_sni.tier_models`) drops the same entries. Made by :func:`keyed_dropper`.
    """

    def __init__(self, p: float, seed: int, step: int, layer: int):
        self.p, self._parts = p, (seed, step, layer)

    def _seed(self, tag: str) -> int:
        return derive_seed(*self._parts, DROPOUT_TAGS[tag])

    def __call__(self, x: torch.Tensor, keys: torch.Tensor, tag: str) -> torch.Tensor:
        return keyed_dropout(x, keys, self._seed(tag), self.p)

    def mask(self, keys: torch.Tensor, tag: str) -> KeyedMask:
        return KeyedMask(keys, self._seed(tag), self.p)


def keyed_dropper(p: float, seed: int, step: int, layer: int) -> KeyedDropper:
    """The keyed dropout of layer ``layer`` at step ``step`` (:class:`KeyedDropper`)."""
    return KeyedDropper(p, seed, step, layer)


identity_exchange = WholeGraph()  # single process: the destination rows are every source row


class TrainableModel(abc.ABC):
    """What the trainers ask of a model: the built-in :class:`FullGraphGNN` and a user's DGL
    module wrapped in :class:`~dgl_sni.block_model.BlockModel` (both made by
    :func:`dgl_sni.model_file.build`).

    * ``model(block, x_src, halo, step, dropout_seed, split)``: the logits of ``block``'s
      destination rows, the halo rows of each layer's input taken through ``halo``, dropout
      keyed by ``(dropout_seed, step)`` and global ids;
    * ``exchange_dims(block, x_src)``: the width of the rows exchanged before each layer that
      takes halo rows (the exchange's tensors are made for them; ``None``: ``block`` cannot
      show them, it has no halo rows);
    * ``halo_takes(block, x_src)``: what each layer can take its halo rows as
      (:class:`~dgl_sni.halo.rows.Takes`; index 0 the input layer, then one per exchanged
      layer): the step planner chooses every form from it;
    * ``exchanged_parameters()``: the parameters the exchanged rows depend on (a schedule
      that watches weight drift watches these).
    """

    @abc.abstractmethod
    def exchange_dims(self, block: GraphBlock, x_src: torch.Tensor) -> list | None: ...

    @abc.abstractmethod
    def halo_takes(self, block: GraphBlock, x_src: torch.Tensor) -> list: ...

    @abc.abstractmethod
    def exchanged_parameters(self): ...


class FullGraphGNN(nn.Module, TrainableModel):
    """A stack of GCN/SAGE/GAT layers trained on whole graphs (or whole partitions).

    ``forward(block, x_src, halo)``: ``x_src`` are the input rows of every source node;
    layer ``l >= 1`` takes the halo rows of its input through ``halo``
    (:class:`~dgl_sni.halo.rows.HaloRows`) in the form the step's plan gives. Dropout is
    keyed by node (edge) and by ``(seed, step, layer)``, so its masks do not depend on how
    the graph is partitioned.
    """

    def __init__(self, model: str, in_dim: int, hidden: int, num_classes: int,
                 num_layers: int, dropout: float = _MODEL.dropout, heads: int = _MODEL.heads):
        super().__init__()
        if model not in MODEL_NAMES:
            raise ValueError(f"unknown model '{model}': choose one of {', '.join(MODEL_NAMES)}")
        if num_layers < 1:
            raise ValueError(f"--layers must be at least 1, got {num_layers}")
        self.model_name, self.num_layers = model, num_layers
        self.layers = nn.ModuleList()
        dim = in_dim
        for i in range(num_layers):
            last = i == num_layers - 1
            out = num_classes if last else hidden
            if model == "gcn":
                layer = GCNLayer(dim, out)
            elif model == "sage":
                layer = SAGELayer(dim, out)
            else:
                layer = GATLayer(dim, out, heads=1 if last else heads, concat=not last)
            self.layers.append(layer)
            dim = layer.out_dim
        self.dropout = dropout
        self._input_agg = None  # (key, the input layer's aggregated features, block, features)

    def hidden_dims(self) -> list:
        """Width of the rows exchanged before layer ``l`` for ``l = 1..L-1``."""
        return [layer.out_dim for layer in self.layers[:-1]]

    def exchange_dims(self, block: GraphBlock, x_src: torch.Tensor) -> list:
        return self.hidden_dims()

    def exchanged_parameters(self):
        return (p for layer in self.layers[:-1] for p in layer.parameters())

    def halo_takes(self, block: GraphBlock, x_src: torch.Tensor) -> list:
        """GCN and SAGE layers split their halo rows (apart or summed); GAT's attend over every row."""
        return [SPLITS if isinstance(layer, HaloLinear) else ROWS_ONLY for layer in self.layers]

    def forward(self, block: GraphBlock, x_src: torch.Tensor, halo: HaloRows = identity_exchange,
                step: int = 0, dropout_seed: int = 0, split: "BlockSplit | None" = None) -> torch.Tensor:
        """The model over ``block``: ``x_src`` are the input rows of every source node. Each
        layer takes its halo rows in the form ``halo.form(layer)`` says
        (:class:`~dgl_sni.halo.rows.Form`): ``ROWS``, the whole block (``halo(l, owned)`` returns
        its source rows); ``APART`` (GCN, SAGE; ``split`` is the block's
        :class:`~dgl_sni.halo.sums.BlockSplit`), the owned rows aggregated while the halo rows
        travel, then their dropped sum; ``SUM``, the undropped sum of the halo rows (of the input
        features for layer 0: they never change, only their dropout would), as a stale step
        takes them (:mod:`dgl_sni.halo.sums`). Dropout is applied to each layer's input rows
        (and to GAT's attention), keyed by node (edge) and by ``(seed, step, layer)``. Without
        input dropout a GCN or SAGE input layer, whole or summed, is one projection of the
        features' aggregation, computed once (:meth:`_input_aggregate`): its halo rows are
        features, which no step changes."""
        summed_input = halo.form(0) is Form.SUM
        h = split.x_own if summed_input else x_src
        for i, layer in enumerate(self.layers):
            drop, act = self._dropper(step, i, dropout_seed), self._activation(i)
            form = Form.SUM if i == 0 and summed_input else halo.form(i) if i > 0 else Form.ROWS
            if form is not Form.ROWS and not isinstance(layer, HaloLinear):
                raise RuntimeError(f"layer {i} ({type(layer).__name__}) takes whole halo rows, as it declares "
                                   f"(halo_takes), but the step's plan gives it form {form.value}")
            if i == 0 and drop is None and isinstance(layer, HaloLinear):
                # fixed input rows, halo rows included: taken whole or summed, the layer is one
                # projection of their aggregation, computed once
                h = layer.forward_aggregated(block, x_src, self._input_aggregate(layer, block, x_src), act)
            elif form is Form.SUM:
                h = self._summed(layer, i, h, split, halo, drop, act)
            elif form is Form.APART:
                h = self._rows_apart(layer, i, h, split, halo, drop, act)
            else:
                if i > 0:
                    h = halo(i, h)
                h = self._dropped_forward(layer, block, h, drop, act)
        return h

    @staticmethod
    def _dropped_forward(layer: nn.Module, block: GraphBlock, h: torch.Tensor, drop, act: str | None) -> torch.Tensor:
        """Layer ``layer`` over the whole block, its input rows ``h`` dropped by ``drop``
        (fused into the layer's first op where it can: :meth:`HaloLinear.dropped_forward`)."""
        if isinstance(layer, HaloLinear):
            return layer.dropped_forward(block, h, drop, act)
        if drop is not None:
            h = drop(h, block.src_keys, "feat")
        return layer(block, h, drop, act)

    def _activation(self, layer: int) -> str | None:
        """The activation after layer ``layer`` (none after the last), applied by the layer."""
        if layer == self.num_layers - 1:
            return None
        return "elu" if self.model_name == "gat" else "relu"

    def _input_aggregate(self, layer: "HaloLinear", block: GraphBlock, x_src: torch.Tensor) -> torch.Tensor:
        """The input layer's aggregation of the features, computed once per block and
        features: without input dropout they never change, so that layer is one
        projection of its destination rows per step (forward and weight gradient), with
        no sparse aggregation and no projection of the halo rows. Exact: the layer's
        aggregate-first form, equal to its forward to float rounding."""
        key = (id(block), id(x_src), x_src._version)
        if self._input_agg is None or self._input_agg[0] != key:
            self._input_agg = None
            with torch.no_grad():
                agg = layer.aggregate(block, x_src)
            self._input_agg = (key, agg, block, x_src)  # the refs keep the ids valid
        return self._input_agg[1]

    @staticmethod
    def _rows_apart(layer: "HaloLinear", i: int, h: torch.Tensor, split: "BlockSplit",
                    halo: HaloRows, drop, act: str | None) -> torch.Tensor:
        """Layer ``i`` over owned rows ``h`` and halo rows taken apart: the pull is sent, the
        owned rows are dropped and aggregated, then the halo rows are received and summed as
        they are dropped (the masks keyed by node, as over the whole block), in one pass over
        the halo edges that also sums them undropped where a sync step keeps that sum for the
        stale steps (:meth:`~dgl_sni.halo.rows.HaloRows.halo_sum`). A layer that projects first
        projects the sum (one row per owned node, not per halo row), as a summed pass does."""
        h = halo.start_halo(i, h)
        h_own, local = layer.dropped_local_sum(split, h, drop)
        scale = layer.halo_scale(split.halo)
        mask = None if drop is None else drop.mask(split.halo.src_keys, "feat")
        return layer.combine(split, h_own, local, halo.halo_sum(i, h, split, scale, mask), act=act)

    @staticmethod
    def _summed(layer: "HaloLinear", i: int, h: torch.Tensor, split: "BlockSplit", halo: HaloRows,
                drop, act: str | None) -> torch.Tensor:
        """Layer ``i`` over the owned rows ``h`` (dropped as over the whole block) and the sum of
        its halo rows: the input features' (fixed; for a layer that projects first only the
        rows with a halo in-edge are projected), or ``halo.halo_sum``'s, asked for with
        ``halo.start_halo`` before the owned rows are aggregated, so rows the sum needs travel
        meanwhile."""
        scale = layer.halo_scale(split.halo)
        if i > 0:
            h = halo.start_halo(i, h)
        h_own, local = layer.dropped_local_sum(split, h, drop)
        if i == 0 and layer.projects_first():
            halo_sum = split.spread(layer.project_halo(split.static_rows(scale)))
            return layer.combine(split, h_own, local, halo_sum, halo_projected=True, act=act)
        halo_sum = split.static_sum(scale) if i == 0 else halo.halo_sum(i, h, split, scale)
        return layer.combine(split, h_own, local, halo_sum, act=act)

    def _dropper(self, step: int, layer: int, seed: int):
        if not self.training or self.dropout == 0.0:
            return None
        return keyed_dropper(self.dropout, seed, step, layer)


_SEED_LOCK = threading.Lock()


@contextmanager
def seeded(seed: int):
    """Draw from torch's global generator seeded with ``seed``, restoring it afterwards.

    Serialised: trainers built in threads (tests, the storage tier's engine) would
    otherwise interleave their draws and get different initial weights.
    """
    with _SEED_LOCK:
        state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        try:
            yield
        finally:
            torch.random.set_rng_state(state)


def init_model(seed: int, *args, **kwargs) -> FullGraphGNN:
    """Build a model whose initial weights depend on ``seed`` only (not on rank or world size)."""
    with seeded(seed):
        return FullGraphGNN(*args, **kwargs)
