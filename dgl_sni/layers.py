"""The built-in layers: GCN, SAGE and GAT over a :class:`~storage_tier.block.GraphBlock`.

A layer maps source rows to destination rows (``layer(block, h_src) -> h_dst``). GCN and SAGE
are linear in each source row (:class:`HaloLinear`): they can aggregate their owned rows apart
from the halo rows and take the halo rows as a sum (:mod:`dgl_sni.halo.sums`), and the storage
tier runs their backward source by source. Stacked by :class:`~dgl_sni.models.FullGraphGNN` and
the storage tier's models (:mod:`dgl_sni.tier_models`).
"""
from __future__ import annotations

import abc
from typing import TYPE_CHECKING

import torch
import torch.nn as nn
import torch.nn.functional as F

import dgl_sni  # noqa: F401
import dgl.ops as dops
from dgl.nn.functional import edge_softmax

from storage_tier.block import GraphBlock, ReverseBlock
from .aggregate import copy_u_sum
from .epilogue import scale_bias_act
from .projection import project

if TYPE_CHECKING:
    from .halo.sums import BlockSplit


class HaloLinear(abc.ABC):
    """A layer whose output is linear in every halo row, so a stale step can feed it the
    halo rows' sum instead of the rows (:mod:`dgl_sni.halo.sums`).

    * ``halo_scale(block)``: the per-source-row factor a halo row is multiplied by before
      it is summed into a destination (``None``: 1);
    * ``local_sum(split, h_own)``: the aggregation over the owned source rows
      (``split.local``), as far as it goes without the halo rows;
    * ``combine(split, h_own, local, halo_sum)``: the layer's output from it and
      ``halo_sum``, the sum over the halo in-edges of ``scale * h_u`` (with
      ``halo_projected``: of ``project_halo(h_u, scale)``, for a layer that
      ``projects_first``, as an exact pass taking its halo rows apart sums them), with the
      activation ``act`` applied (see :func:`activate`).

    ``forward_summed`` is the two in turn; the model's summed pass calls them apart, so a
    sync step aggregates its owned rows while the halo rows are on the wire. The model asks
    for the owned rows' aggregation through ``dropped_local_sum(split, h, drop)``, which
    applies the layer's input dropout first, and for the layer over the whole block (an
    exact step's input layer) through ``dropped_forward(block, h, drop, act)``; a layer may
    fuse the two (GCN projects and drops its rows in one kernel). Equals
    ``forward`` over the whole block to float rounding when ``halo_sum`` is the sum of the
    same rows.
    """

    @abc.abstractmethod
    def halo_scale(self, block: GraphBlock) -> torch.Tensor | None: ...

    @abc.abstractmethod
    def local_sum(self, split: "BlockSplit", h_own: torch.Tensor) -> torch.Tensor: ...

    @abc.abstractmethod
    def combine(self, split: "BlockSplit", h_own: torch.Tensor, local: torch.Tensor,
                halo_sum: torch.Tensor, halo_projected: bool = False, act: str | None = None) -> torch.Tensor: ...

    @abc.abstractmethod
    def projects_first(self) -> bool:
        """The layer projects its rows before aggregating them (it narrows them)."""

    @abc.abstractmethod
    def project_halo(self, rows: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        """Halo rows projected as a layer that :meth:`projects_first` projects its sources,
        each scaled by ``scale`` (:meth:`halo_scale`; ``None``: 1); their sum goes to
        :meth:`combine` with ``halo_projected``."""

    @abc.abstractmethod
    def aggregate(self, block: GraphBlock, h_src: torch.Tensor) -> torch.Tensor:
        """The destination rows' aggregation of ``h_src`` before any weight (input width)."""

    @abc.abstractmethod
    def forward_aggregated(self, block: GraphBlock, h_src: torch.Tensor, agg: torch.Tensor,
                           act: str | None = None) -> torch.Tensor:
        """The layer's output from :meth:`aggregate`'s result: ``forward`` aggregating first.
        For fixed input rows (the features, without dropout) ``agg`` is computed once."""

    @abc.abstractmethod
    def backward_sources(self, rblock: ReverseBlock, g_src: torch.Tensor, x: torch.Tensor,
                         g_own: torch.Tensor | None, input_grad: bool) -> torch.Tensor | None:
        """Backward over one unit of source rows ``x`` (the storage tier's source-major pass):
        ``g_src`` is the output gradient at ``rblock``'s source rows (the destinations
        ``x`` feeds), ``g_own`` at the unit's own rows (``None``: they are no destination).
        Adds the unit's share to the parameters' ``.grad``; returns the gradient of ``x``
        if ``input_grad``. Equals autograd through ``forward`` to float rounding."""

    def forward_summed(self, split: "BlockSplit", h_own: torch.Tensor, halo_sum: torch.Tensor) -> torch.Tensor:
        return self.combine(split, h_own, self.local_sum(split, h_own), halo_sum)

    def dropped_forward(self, block: GraphBlock, h_src: torch.Tensor, drop,
                        act: str | None = None) -> torch.Tensor:
        """``forward`` of the rows ``h_src`` through the layer's input dropout ``drop``
        (``None``: none); a layer may fuse the two (GCN projects and drops in one kernel)."""
        h = h_src if drop is None else drop(h_src, block.src_keys, "feat")
        return self(block, h, drop, act)

    def dropped_local_sum(self, split: "BlockSplit", h: torch.Tensor,
                          drop) -> "tuple[torch.Tensor | None, torch.Tensor]":
        """The owned rows ``h`` through the layer's input dropout ``drop`` (``None``: none)
        and :meth:`local_sum`: ``(owned rows for combine, local sum)``. A layer may fuse the
        dropout into its first op; it then hands :meth:`combine` what that reads of the
        owned rows (:class:`GCNLayer`: nothing)."""
        h_own = h if drop is None else drop(h, split.local.src_keys, "feat")
        return h_own, self.local_sum(split, h_own)


ACTIVATIONS = {"relu": F.relu, "elu": F.elu}  # what a layer applies to its output (``act``)


def activate(h: torch.Tensor, act: str | None) -> torch.Tensor:
    """``h`` through the activation named ``act`` (``None``: unchanged). A layer's ``act``
    argument: the model names the activation that follows each layer but the last, and a
    layer may fuse it into its last op (:class:`GCNLayer` fuses the relu)."""
    return h if act is None else ACTIVATIONS[act](h)


def _accumulate(param: torch.Tensor, grad: torch.Tensor) -> None:
    """``param.grad += grad`` (creating it), as autograd accumulates."""
    if param.grad is None:
        param.grad = grad.detach().clone()
    else:
        param.grad.add_(grad)


class GCNLayer(nn.Module, HaloLinear):
    """Kipf & Welling convolution, ``D^-1/2 (A + I) D^-1/2 H W``, over global degrees."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(in_dim, out_dim))
        self.bias = nn.Parameter(torch.zeros(out_dim))
        nn.init.xavier_uniform_(self.weight)

    @property
    def out_dim(self) -> int:
        return self.weight.shape[1]

    def forward(self, block: GraphBlock, h_src: torch.Tensor, drop=None, act: str | None = None) -> torch.Tensor:
        if self.weight.shape[0] > self.weight.shape[1]:
            # project first; scaling rows commutes with it and is cheaper on narrow rows
            h = copy_u_sum(block.graph, project(h_src, self.weight, block.src_norm))
        else:
            h = project(copy_u_sum(block.graph, h_src * block.src_norm), self.weight)
        return self._epilogue(h, block.dst_norm, act)

    def _epilogue(self, h: torch.Tensor, dst_norm: torch.Tensor, act: str | None,
                  add: torch.Tensor | None = None) -> torch.Tensor:
        """``act((h + add) * dst_norm + bias)``, the relu fused (:mod:`dgl_sni.epilogue`)."""
        out = scale_bias_act(h, dst_norm, self.bias, relu=act == "relu", add=add)
        return out if act in (None, "relu") else activate(out, act)

    def halo_scale(self, block: GraphBlock) -> torch.Tensor:
        return block.src_norm

    def aggregate(self, block, h_src):
        return copy_u_sum(block.graph, h_src * block.src_norm)

    def forward_aggregated(self, block, h_src, agg, act=None):
        return self._epilogue(project(agg, self.weight), block.dst_norm, act)

    def projects_first(self) -> bool:
        return self.weight.shape[0] > self.weight.shape[1]

    def local_sum(self, split: "BlockSplit", h_own: torch.Tensor) -> torch.Tensor:
        local = split.local
        if self.projects_first():
            return copy_u_sum(local.graph, project(h_own, self.weight, local.src_norm))
        return copy_u_sum(local.graph, h_own * local.src_norm)

    def dropped_forward(self, block, h_src, drop, act=None):
        if drop is None or not self.projects_first():
            return super().dropped_forward(block, h_src, drop, act)
        # the projection drops the rows as it reads them (dgl_sni.projection): the same bits,
        # without writing the dropped rows (Cora's and CiteSeer's inputs: 1433 and 3703 wide)
        h = project(h_src, self.weight, block.src_norm, drop.mask(block.src_keys, "feat"))
        return self._epilogue(copy_u_sum(block.graph, h), block.dst_norm, act)

    def dropped_local_sum(self, split, h, drop):
        if drop is None or not self.projects_first():
            return super().dropped_local_sum(split, h, drop)
        # the projection drops the rows as it reads them (dgl_sni.projection); combine reads none
        local = split.local
        return None, copy_u_sum(local.graph, project(h, self.weight, local.src_norm, drop.mask(local.src_keys, "feat")))

    def project_halo(self, rows: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        return project(rows, self.weight, scale)

    def combine(self, split: "BlockSplit", h_own: torch.Tensor, local: torch.Tensor,
                halo_sum: torch.Tensor, halo_projected: bool = False, act: str | None = None) -> torch.Tensor:
        if self.projects_first():
            add = halo_sum if halo_projected else project(halo_sum, self.weight)
            return self._epilogue(local, split.local.dst_norm, act, add=add)
        return self._epilogue(project(local + halo_sum, self.weight), split.local.dst_norm, act)

    @torch.no_grad()
    def backward_sources(self, rblock, g_src, x, g_own, input_grad):
        t = dops.copy_u_sum(rblock.graph, g_src * rblock.v_norm) * rblock.u_norm
        _accumulate(self.weight, x.t() @ t)
        if g_own is not None:
            _accumulate(self.bias, g_own.sum(0))
        return t @ self.weight.t() if input_grad else None


class _HeadAndAll(torch.autograd.Function):
    """``(h[:n], h)`` for a layer that reads its destination rows (the head) and all rows.

    Autograd would sum the two gradients of ``h`` by zero-filling a full-size gradient for
    the slice, copying the head's gradient into it and adding the other path's gradient
    out of place (three passes over every source row). Here the head's gradient is added
    into the other path's gradient in place (one pass over the head rows), when that
    gradient is a fresh dense tensor; otherwise into a copy. Same values. Precondition:
    the all-rows output feeds an op whose backward allocates its input gradient (SpMM,
    matmul), never one that passes its gradient through to a second input (``+``).
    """

    @staticmethod
    def forward(ctx, h, n):
        ctx.n, ctx.shape = int(n), h.shape
        return h[: ctx.n], h.view_as(h)

    @staticmethod
    def backward(ctx, g_head, g_all):
        if g_all is None:
            g_all = g_head.new_zeros(ctx.shape)
        elif not (g_all.is_contiguous() and g_all._base is None and not g_all.requires_grad):
            g_all = g_all.clone()
        if g_head is not None:
            g_all[: ctx.n] += g_head
        return g_all, None


class SAGELayer(nn.Module, HaloLinear):
    """GraphSAGE with mean aggregation: ``W_self h_v + W_neigh mean(h_u)``."""

    def __init__(self, in_dim: int, out_dim: int):
        super().__init__()
        self.fc_self = nn.Linear(in_dim, out_dim, bias=True)
        self.fc_neigh = nn.Linear(in_dim, out_dim, bias=False)
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_uniform_(self.fc_self.weight, gain=gain)
        nn.init.xavier_uniform_(self.fc_neigh.weight, gain=gain)
        nn.init.zeros_(self.fc_self.bias)

    @property
    def out_dim(self) -> int:
        return self.fc_self.out_features

    def forward(self, block: GraphBlock, h_src: torch.Tensor, drop=None, act: str | None = None) -> torch.Tensor:
        if h_src.requires_grad:
            h_dst, h_src = _HeadAndAll.apply(h_src, block.num_dst)
        else:
            h_dst = h_src[: block.num_dst]
        if self.fc_neigh.in_features > self.fc_neigh.out_features:
            neigh = dops.copy_u_mean(block.graph, self.fc_neigh(h_src))
        else:
            neigh = self.fc_neigh(dops.copy_u_mean(block.graph, h_src))
        return activate(self.fc_self(h_dst) + neigh, act)

    def halo_scale(self, block: GraphBlock) -> None:
        return None

    def aggregate(self, block, h_src):
        return dops.copy_u_mean(block.graph, h_src)

    def forward_aggregated(self, block, h_src, agg, act=None):
        return activate(self.fc_self(h_src[: block.num_dst]) + self.fc_neigh(agg), act)

    def projects_first(self) -> bool:
        return self.fc_neigh.in_features > self.fc_neigh.out_features

    def local_sum(self, split: "BlockSplit", h_own: torch.Tensor) -> torch.Tensor:
        graph = split.local.graph
        return copy_u_sum(graph, self.fc_neigh(h_own) if self.projects_first() else h_own)

    def project_halo(self, rows: torch.Tensor, scale: torch.Tensor | None = None) -> torch.Tensor:
        return self.fc_neigh(rows if scale is None else rows * scale)

    def combine(self, split: "BlockSplit", h_own: torch.Tensor, local: torch.Tensor,
                halo_sum: torch.Tensor, halo_projected: bool = False, act: str | None = None) -> torch.Tensor:
        fc = self.fc_neigh
        if self.projects_first():
            neigh = (local + (halo_sum if halo_projected else fc(halo_sum))) / split.in_degree
        else:
            neigh = fc((local + halo_sum) / split.in_degree)
        return activate(self.fc_self(h_own) + neigh, act)

    @torch.no_grad()
    def backward_sources(self, rblock, g_src, x, g_own, input_grad):
        t = dops.copy_u_sum(rblock.graph, g_src / rblock.v_degree)
        fc_n, fc_s = self.fc_neigh, self.fc_self
        _accumulate(fc_n.weight, t.t() @ x)
        dx = t @ fc_n.weight if input_grad else None
        if g_own is not None:
            _accumulate(fc_s.weight, g_own.t() @ x)
            _accumulate(fc_s.bias, g_own.sum(0))
            if input_grad:
                dx += g_own @ fc_s.weight
        return dx


class GATLayer(nn.Module):
    """Graph attention (Velickovic et al.) with ``heads`` heads, concatenated or averaged."""

    def __init__(self, in_dim: int, out_dim: int, heads: int, concat: bool,
                 negative_slope: float = 0.2):
        super().__init__()
        self.heads, self.head_dim, self.concat = heads, out_dim, concat
        self.fc = nn.Linear(in_dim, heads * out_dim, bias=False)
        self.attn_l = nn.Parameter(torch.empty(1, heads, out_dim))
        self.attn_r = nn.Parameter(torch.empty(1, heads, out_dim))
        self.bias = nn.Parameter(torch.zeros(heads * out_dim if concat else out_dim))
        self.negative_slope = negative_slope
        gain = nn.init.calculate_gain("relu")
        nn.init.xavier_normal_(self.fc.weight, gain=gain)
        nn.init.xavier_normal_(self.attn_l, gain=gain)
        nn.init.xavier_normal_(self.attn_r, gain=gain)

    @property
    def out_dim(self) -> int:
        return self.heads * self.head_dim if self.concat else self.head_dim

    def forward(self, block: GraphBlock, h_src: torch.Tensor, drop=None, act: str | None = None) -> torch.Tensor:
        z = self.fc(h_src).view(-1, self.heads, self.head_dim)
        el = (z * self.attn_l).sum(-1, keepdim=True)
        er = (z[: block.num_dst] * self.attn_r).sum(-1, keepdim=True)
        e = F.leaky_relu(dops.u_add_v(block.graph, el, er), self.negative_slope)
        a = edge_softmax(block.graph, e)
        if drop is not None:  # attention dropout, keyed by edge
            a = drop(a, block.edge_keys, "attn")
        out = dops.u_mul_e_sum(block.graph, z, a)
        out = out.flatten(1) if self.concat else out.mean(1)
        return activate(out + self.bias, act)
