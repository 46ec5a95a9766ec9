"""DGL layers that are linear in their source rows: their halo rows taken as one sum.

A stale step serves halo rows that do not change until the next sync. A layer whose output
depends on its source rows only through ``sum over in-edges (u, v) of scale_u * h_u`` (DGL's
``GraphConv``; ``SAGEConv`` with ``mean`` or ``gcn`` aggregation; ``GINConv`` with ``sum`` or
``mean``) can then take the sum of its halo rows, kept from one stale step to the next, and
aggregate its owned rows only, as the built-in GCN does (:mod:`dgl_sni.halo.sums`): no pass over
the halo edges and no halo rows in its products.

:class:`SumsHaloRows` is what such a layer declares: ``halo_scale`` (the factor a halo row is
multiplied by before it is summed) and ``forward_summed`` (the layer's output from its owned
rows and that sum). :func:`summing` finds it for a module: the module itself where it
implements the protocol (a user's own layer), or the adapter of a DGL layer recognised by its
type and settings (:data:`ADAPTERS`). Each adapter computes what the DGL layer's own
``forward`` computes over the whole block, to float rounding, when the sum is of the same rows
(``tests/dgl_sni/test_linear_layers.py``); steps that take whole rows run DGL's code itself.

Used by :class:`~dgl_sni.block_model.BlockModel`; imports nothing of the exchange.
"""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING

import torch
import torch.nn as nn

import dgl_sni  # noqa: F401  (DGL shims first)
from dgl.nn import GINConv, GraphConv, SAGEConv

from .aggregate import copy_u_sum
from .projection import project

if TYPE_CHECKING:
    from .halo.sums import BlockSplit


class SumsHaloRows(abc.ABC):
    """A layer (or the adapter of one) linear in each of its source rows.

    * ``halo_scale(module, graph)``: the ``[halo, 1]`` factor each halo row is multiplied by
      before it is summed into its destinations (``None``: 1); the same tensor for the same
      ``graph`` (a kept sum is checked against it);
    * ``forward_summed(module, graph, split, h_own, halo_sum)``: the layer's output for the
      destinations, from the owned source rows ``h_own`` (``[owned, d]``, as the model passes
      them, dropout already applied by the model) and ``halo_sum``, the sum over each
      destination's halo in-edges of ``scale_u * h_u``. ``graph`` is the block the model
      passed (global degrees); ``split.local`` holds the edges among owned rows.
    """

    @abc.abstractmethod
    def halo_scale(self, module: nn.Module, graph) -> torch.Tensor | None: ...

    @abc.abstractmethod
    def forward_summed(self, module: nn.Module, graph, split: "BlockSplit", h_own: torch.Tensor,
                       halo_sum: torch.Tensor) -> torch.Tensor: ...


def _degree_scale(degrees: torch.Tensor, power: float) -> torch.Tensor:
    return degrees.to(torch.float32).clamp(min=1).pow(power).unsqueeze(1)


class _Scales:
    """The degree scales of one block, made once (a kept sum is checked against the same tensor)."""

    def __init__(self):
        self._made = {}  # (id(graph), side, power) -> (graph, scales...)

    def get(self, graph, power: float) -> tuple:
        """``(owned sources' scale, halo sources' scale)``: out-degree ** power."""
        key = (id(graph), "out", power)
        if key not in self._made:
            scale = _degree_scale(graph.out_degrees(), power)
            n = graph.num_dst_nodes()
            self._made[key] = (graph, scale[:n], scale[n:])
        return self._made[key][1:]

    def dst(self, graph, power: float) -> torch.Tensor:
        """The destinations' in-degree ** power."""
        key = (id(graph), "in", power)
        if key not in self._made:
            self._made[key] = (graph, _degree_scale(graph.in_degrees(), power))
        return self._made[key][1]


class GraphConvSum(SumsHaloRows):
    """DGL's ``GraphConv`` (any ``norm``; its own weight, no edge weights)."""

    POWERS = {"both": -0.5, "left": -1.0}  # the source-side normalisation by out-degree

    def __init__(self):
        self._scales = _Scales()

    def halo_scale(self, module, graph):
        power = self.POWERS.get(module._norm)
        return None if power is None else self._scales.get(graph, power)[1]

    def forward_summed(self, module, graph, split, h_own, halo_sum):
        power = self.POWERS.get(module._norm)
        scale = None if power is None else self._scales.get(graph, power)[0]
        weight, local = module.weight, split.local.graph
        if weight is not None and module._in_feats > module._out_feats:  # project first, as DGL does
            rst = copy_u_sum(local, project(h_own, weight, scale)) + project(halo_sum, weight)
        else:
            rst = copy_u_sum(local, h_own if scale is None else h_own * scale) + halo_sum
            if weight is not None:
                rst = project(rst, weight)
        if module._norm in ("right", "both"):
            rst = rst * self._scales.dst(graph, -0.5 if module._norm == "both" else -1.0)
        if module.bias is not None:
            rst = rst + module.bias
        return rst if module._activation is None else module._activation(rst)


class SAGEConvSum(SumsHaloRows):
    """DGL's ``SAGEConv`` with ``mean`` or ``gcn`` aggregation (its input dropout is applied to
    the owned rows; halo rows enter the sum undropped, the dropout's expectation)."""

    def halo_scale(self, module, graph):
        return None

    def forward_summed(self, module, graph, split, h_own, halo_sum):
        h = module.feat_drop(h_own)
        fc = module.fc_neigh
        lin_first = module._in_src_feats > module._out_feats
        local = copy_u_sum(split.local.graph, fc(h) if lin_first else h)
        neigh = local + (fc(halo_sum) if lin_first else halo_sum)
        if module._aggre_type == "mean":
            neigh = neigh / graph.in_degrees().to(neigh).clamp(min=1).unsqueeze(1)
            rst = module.fc_self(h) + (neigh if lin_first else fc(neigh))
        else:  # gcn: the destination's own row counts once more
            neigh = (neigh + (fc(h) if lin_first else h)) / (graph.in_degrees().to(neigh).unsqueeze(1) + 1)
            rst = neigh if lin_first else fc(neigh)
            if module.bias is not None:
                rst = rst + module.bias
        if module.activation is not None:
            rst = module.activation(rst)
        return rst if module.norm is None else module.norm(rst)


class GINConvSum(SumsHaloRows):
    """DGL's ``GINConv`` with ``sum`` or ``mean`` aggregation."""

    def halo_scale(self, module, graph):
        return None

    def forward_summed(self, module, graph, split, h_own, halo_sum):
        neigh = copy_u_sum(split.local.graph, h_own) + halo_sum
        if module._aggregator_type == "mean":
            neigh = neigh / graph.in_degrees().to(neigh).clamp(min=1).unsqueeze(1)
        rst = (1 + module.eps) * h_own + neigh
        if module.apply_func is not None:
            rst = module.apply_func(rst)
        return rst if module.activation is None else module.activation(rst)


# DGL's layers recognised by type: (class, settings under which the layer is linear, adapter)
ADAPTERS = (
    (GraphConv, lambda m: True, GraphConvSum),
    (SAGEConv, lambda m: m._aggre_type in ("mean", "gcn"), SAGEConvSum),
    (GINConv, lambda m: m._aggregator_type in ("sum", "mean"), GINConvSum),
)


def summing(module: nn.Module) -> SumsHaloRows | None:
    """How ``module`` takes its halo rows as a sum: itself where it declares
    :class:`SumsHaloRows`, a new adapter where it is a DGL layer linear in its sources
    (:data:`ADAPTERS`, by exact type: a subclass may compute otherwise), else ``None``."""
    if isinstance(module, SumsHaloRows):
        return module
    for cls, linear, adapter in ADAPTERS:
        if type(module) is cls and linear(module):
            return adapter()
    return None
