"""The user API of the storage tier: models written one layer at a time.

(Model code, so it lives in ``dgl_sni``; the tier's engine sees a model only through the
:class:`storage_tier.protocols.TierModel` interface, which :class:`TierModel` implements.)

The tier runs a model layer by layer and sub-partition by sub-partition, so a model
must expose one layer as a function of that layer's gathered source rows.
:class:`TierModel` is the base class; a subclass keeps its layers in ``self.layers``
(an ``nn.ModuleList`` whose items have ``out_dim``, or it overrides
:meth:`TierModel.layer_out_dim`) and implements::

    layer_forward(layer, graph_block, h) -> h_dst

``graph_block`` is a :class:`~storage_tier.block.GraphBlock` (destination rows = the
sub-partition's rows, source rows = its rows first, then its boundary); ``h`` holds the
layer's input rows of every source row; the result holds the layer's output rows of the
destination rows *including the activation* (``relu``/``elu``) for every layer but the
last, whose output is the logits. Dropout must go through :meth:`TierModel.drop_input`
(and :meth:`TierModel.dropper` for edge dropout): it is keyed by node id and
``(seed, step, layer)``, so a layer recomputed in backward, and every sub-partition that
gathers the same row, draws the same mask as whole-graph training does.

Porting a DGL/PyG-style model takes a few lines. Before (whole graph)::

    class Net(nn.Module):
        def forward(self, g, x):
            for i, conv in enumerate(self.layers):
                x = F.dropout(x, self.p, self.training)
                x = conv(g, x)
                if i < len(self.layers) - 1:
                    x = F.relu(x)
            return x

After::

    class Net(TierModel):
        def __init__(self, dims, p):
            super().__init__(dropout=p)
            self.layers = nn.ModuleList(SAGELayer(a, b) for a, b in zip(dims, dims[1:]))

        def layer_forward(self, layer, graph_block, h):
            h = self.drop_input(layer, graph_block, h)
            h = self.layers[layer](graph_block, h)
            return h if layer == self.num_layers - 1 else F.relu(h)

``graph_block.graph`` is a DGL block, so DGL's own ``SAGEConv``/``GATConv`` can be called
on it as well; for GCN use ``graph_block.src_norm``/``dst_norm`` (global degrees) rather
than ``GraphConv``'s norm, which would see the block's local degrees.

:class:`TierGCN`, :class:`TierSAGE` and :class:`TierGAT` ship on this base. GCN and SAGE
also declare the source-major backward (:class:`storage_tier.protocols.SourceMajorModel`):
their layers are linear in each source row, so the tier backpropagates them unit by unit
without recomputing the layer; a user model gets the regathering backward, which needs only
``layer_forward``. They reuse the
layer classes of :mod:`dgl_sni.models` and take their layers from a
:class:`~dgl_sni.models.FullGraphGNN` built the same way, so parameter names
(``layers.0.weight`` ...) and, under :func:`tier_model`'s seeding, initial values equal
``init_model``'s: tier and in-memory training can be compared weight by weight.
:meth:`TierModel.forward` runs the model on one whole block in memory (reference use).
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from storage_tier.block import MODELS_WITH_SELF_LOOPS, GraphBlock

from .layers import HaloLinear
from .models import _MODEL, FullGraphGNN, keyed_dropper, seeded


class TierModel(nn.Module):
    """Base class of models the storage tier can train (see module docstring).

    Owns the layers' parameters and the keyed-dropout context. Implements
    :class:`storage_tier.protocols.TierModel`: the tier engine calls :meth:`layer_forward`,
    :meth:`drop_rows` and :meth:`set_predropped`; the tier trainer
    (:class:`dgl_sni.trainers.tier.TierTrainer`) sets the dropout context (:meth:`set_step`).
    """

    self_loops = False  # whether blocks need explicit self loops (GCN/GAT-style layers)

    def __init__(self, dropout: float = 0.0):
        super().__init__()
        self.dropout = float(dropout)
        self._step, self._seed = 0, 0
        self._predropped: frozenset = frozenset()  # layers whose input rows arrive dropped

    # ------------------------------------------------------------------ subclass API
    def layer_forward(self, layer: int, graph_block: GraphBlock, h: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement "
                                  "layer_forward(layer, graph_block, h) (see dgl_sni.tier_models)")

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def layer_out_dim(self, layer: int) -> int:
        """Width of the rows ``layer`` produces."""
        return int(self.layers[layer].out_dim)

    def exchanged_parameters(self):
        """The parameters the exchanged rows depend on (every layer's but the last)."""
        return (p for layer in self.layers[:-1] for p in layer.parameters())

    # ------------------------------------------------------------------ dropout
    def set_step(self, step: int, seed: int) -> None:
        """Key dropout masks by optimisation step and seed (as FullGraphGNN's forward does)."""
        self._step, self._seed = int(step), int(seed)

    def set_predropped(self, layers: frozenset) -> None:
        """The layers whose input rows the tier engine feeds already dropped (see :meth:`drop_rows`)."""
        self._predropped = frozenset(layers)

    def dropper(self, layer: int):
        """``drop(x, keys, tag)`` for ``layer`` in training with dropout, else None
        (the masks :class:`~dgl_sni.models.FullGraphGNN` draws: :func:`~dgl_sni.models.keyed_dropper`)."""
        if not self.training or self.dropout == 0.0:
            return None
        return keyed_dropper(self.dropout, self._seed, self._step, layer)

    def drop_input(self, layer: int, graph_block: GraphBlock, h: torch.Tensor) -> torch.Tensor:
        """Keyed dropout of the layer's input rows (keyed by the source rows' dataset ids).

        Identity for layers the tier engine feeds already-dropped rows (see
        :meth:`drop_rows`): the mask depends only on (seed, step, layer, node, column), so
        dropping a row once where it is produced equals dropping every gathered copy.
        """
        if layer in self._predropped:
            return h
        drop = self.dropper(layer)
        return h if drop is None else drop(h, graph_block.src_keys, "feat")

    def drop_rows(self, layer: int, h: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
        """The input dropout of ``layer`` applied to rows ``h`` of nodes ``keys`` (engine use)."""
        drop = self.dropper(layer)
        return h if drop is None else drop(h, keys, "feat")

    # ------------------------------------------------------------------ whole-block use
    def forward(self, block: GraphBlock, x_src: torch.Tensor, step: int = 0,
                dropout_seed: int = 0) -> torch.Tensor:
        """All layers on one block whose destination rows are all its source rows (in memory)."""
        self.set_step(step, dropout_seed)
        h = x_src
        for layer in range(self.num_layers):
            h = self.layer_forward(layer, block, h)
        return h


class _Shipped(TierModel):
    """GCN/SAGE/GAT whose layers come from :class:`~dgl_sni.models.FullGraphGNN`."""

    model_name = ""

    def __init__(self, in_dim: int, hidden: int, num_classes: int, num_layers: int,
                 dropout: float = _MODEL.dropout, heads: int = _MODEL.heads):
        super().__init__(dropout)
        gnn = FullGraphGNN(self.model_name, in_dim, hidden, num_classes, num_layers,
                           dropout=dropout, heads=heads)
        self.layers = gnn.layers
        self.self_loops = self.model_name in MODELS_WITH_SELF_LOOPS

    def layer_forward(self, layer, graph_block, h):
        """Input dropout, the layer, ``relu`` between layers (GAT overrides)."""
        h = self.drop_input(layer, graph_block, h)
        h = self.layers[layer](graph_block, h)
        return h if layer == self.num_layers - 1 else F.relu(h)

    # the source-major backward (storage_tier.protocols.SourceMajorModel); a user model on
    # the base class does not declare it, and the engine recomputes its layer_forward instead
    def source_major(self, layer):
        """GCN and SAGE layers are linear in each source row (:class:`~dgl_sni.layers.HaloLinear`);
        a subclass that changes :meth:`layer_forward` (another activation...) opts out."""
        return type(self).layer_forward is _Shipped.layer_forward and isinstance(self.layers[layer], HaloLinear)

    def layer_backward_sources(self, layer, rblock, g_src, x, g_own, input_grad):
        return self.layers[layer].backward_sources(rblock, g_src, x, g_own, input_grad)

    def activation_backward(self, layer, grad, out):
        """``relu``'s backward: ``out > 0`` exactly where the pre-activation was (dropped
        entries already have no gradient)."""
        return torch.where(out > 0, grad, torch.zeros((), dtype=grad.dtype))


class TierGCN(_Shipped):
    """GCN on the tier: ``relu(D^-1/2 (A+I) D^-1/2 H W)`` per layer, logits last."""

    model_name = "gcn"


class TierSAGE(_Shipped):
    """GraphSAGE (mean) on the tier."""

    model_name = "sage"


class TierGAT(_Shipped):
    """GAT on the tier (attention dropout keyed by edge, ``elu`` between layers)."""

    model_name = "gat"

    def layer_forward(self, layer, graph_block, h):
        h = self.drop_input(layer, graph_block, h)
        h = self.layers[layer](graph_block, h, self.dropper(layer))
        return h if layer == self.num_layers - 1 else F.elu(h)


TIER_MODELS = {"gcn": TierGCN, "sage": TierSAGE, "gat": TierGAT}


def tier_model(cfg, in_dim: int, num_classes: int) -> TierModel:
    """The shipped model for ``cfg`` with the initial weights ``init_model(cfg.seed, ...)`` gives."""
    if cfg.model not in TIER_MODELS:
        raise ValueError(f"unknown model '{cfg.model}': choose one of {', '.join(TIER_MODELS)}")
    with seeded(cfg.seed):
        return TIER_MODELS[cfg.model](in_dim, cfg.hidden, num_classes, cfg.layers,
                                      dropout=cfg.dropout, heads=cfg.heads)
