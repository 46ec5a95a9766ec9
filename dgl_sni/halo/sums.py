"""Summed halo rows: how a stale step feeds a layer its halo rows once per sync period.

On a stale step the halo rows a trainer is served (the agent's cache of smoothed rows by
default) do not change from one stale step to the next. A layer that is linear in each
halo row (GCN, SAGE: ``out = f(owned rows, sum over halo in-edges of scale_u * h_u)``)
then needs only that sum, ``S = A_halo (scale * H_halo)``: one ``[owned, d]`` matrix per
layer, computed when the served rows change and reused until then. The step aggregates
over the edges among owned rows only (58% of a partition's edges on the 200k-node graph
on 4 workers) and never touches the halo rows (71% of its source rows).

Halo rows enter the sum without dropout: that is the expectation of the keyed dropout of
the exact step (inverted dropout keeps each row's mean), and what makes the sum constant.
Owned rows keep their keyed masks, so an owned row is dropped as on an exact step. The
halo rows' gradients are still pushed to their owners (``--stale-grad exchange``):
``scale * A_halo^T dL/dS``, over the halo edges only. Sync steps and evaluation use the
whole block and are unchanged, so interval 1 stays exact.

:class:`BlockSplit` owns the split of one trainer's block (built once by the trainer);
:class:`KeptSums` the sums kept for the stale steps (owned by the step planner, which
decides when they serve). The model takes a layer's sum through
:meth:`~dgl_sni.halo.rows.HaloRows.halo_sum` where the plan's form is ``SUM``.
"""
from __future__ import annotations

import torch

import dgl_sni  # noqa: F401
import dgl
from ..aggregate import dropped_sum, scaled_sum
from ..dropout import KeyedMask
from .averages import mix

from storage_tier.block import GraphBlock, edge_key


class BlockSplit:
    """One trainer's block split at its owned rows: ``local`` (owned sources, self loops
    included) and ``halo`` (halo sources), with the reversed halo graph the halo gradients
    are summed over, the destinations' in-degrees and the halo rows' input sums.

    Built once per block by :class:`~dgl_sni.trainers.full_graph.FullGraphTrainer`; read by
    the model's layers that take their halo rows apart or summed, and by the exchange's
    :meth:`~dgl_sni.halo.rows.HaloRows.halo_sum`.
    ``x_src``: the block's input rows (owned first); the sum of the halo input rows is
    computed once per scale, since input features never change: whole (``static_sum``) or
    as its rows at ``halo_dst``, the owned rows with a halo in-edge (``static_rows``; the
    others are zero), which a layer that projects first projects alone (``spread`` puts
    the projected rows back in place).
    """

    def __init__(self, block: GraphBlock, x_src: torch.Tensor):
        n_own = block.num_dst
        src, dst = block.graph.edges(order="eid")
        local = src < n_own
        self.num_owned, self.num_halo = n_own, block.num_src - n_own
        self.local = _sub_block(block, src[local], dst[local], n_own, slice(0, n_own))
        self.halo = _sub_block(block, src[~local] - n_own, dst[~local], self.num_halo,
                               slice(n_own, block.num_src))
        h_src, h_dst = self.halo.graph.edges(order="eid")
        self._reverse = dgl.create_block((h_dst, h_src), num_src_nodes=n_own, num_dst_nodes=self.num_halo)
        self._reverse.create_formats_()
        self.in_degree = block.graph.in_degrees().to(torch.float32).clamp(min=1).unsqueeze(1)
        self.x_own = x_src[:n_own]
        self._x_halo = x_src[n_own:]
        self.halo_dst = halo_destinations(src, dst, n_own)  # owned rows with a halo in-edge, ascending
        self._static = {}  # id(scale) -> (scale, sum of the halo input rows)
        self._static_rows = {}  # id(scale) -> (scale, that sum's rows at halo_dst)

    def sum_rows(self, rows: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
        """``S[v] = sum over halo in-edges (u, v) of scale[u] * rows[u]`` (``[owned, d]``)."""
        if self.num_halo == 0:
            return rows.new_zeros((self.num_owned, rows.shape[1]))
        return scaled_sum(self.halo.graph, rows, src_scale=scale)

    def dropped_sums(self, rows: torch.Tensor, scale: torch.Tensor | None, mask: KeyedMask,
                     plain: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
        """:meth:`sum_rows` of the halo rows ``rows`` dropped by ``mask`` (their keyed dropout)
        and, with ``plain``, of ``rows`` as they are (else ``None``), in one pass over the
        halo edges (:func:`~dgl_sni.aggregate.dropped_sum`); not differentiable: the dropped
        sum's backward is :meth:`rows_grad` with the same ``mask``."""
        if self.num_halo == 0:
            zeros = rows.new_zeros((self.num_owned, rows.shape[1]))
            return zeros, zeros.clone() if plain else None
        return dropped_sum(self.halo.graph, rows, mask, src_scale=scale, plain=plain)

    def rows_grad(self, grad_sum: torch.Tensor, scale: torch.Tensor | None,
                  mask: KeyedMask | None = None) -> torch.Tensor:
        """The halo rows' gradient from the sum's: ``scale * A_halo^T grad_sum`` (``[halo, d]``),
        dropped by ``mask`` where the sum was of the rows dropped by it (:meth:`dropped_sums`)."""
        if self.num_halo == 0:
            return grad_sum.new_zeros((0, grad_sum.shape[1]))
        return scaled_sum(self._reverse, grad_sum.contiguous(), dst_scale=scale, dst_mask=mask)

    def static_sum(self, scale: torch.Tensor | None) -> torch.Tensor:
        """The sum of the halo input rows (layer 0), computed once per ``scale``."""
        key = id(scale)
        if key not in self._static:
            self._static[key] = (scale, self.sum_rows(self._x_halo, scale))
        return self._static[key][1]

    def static_rows(self, scale: torch.Tensor | None) -> torch.Tensor:
        """The rows of :meth:`static_sum` at :attr:`halo_dst` (``[len(halo_dst), d]``): the
        others are zero, so a layer that projects its rows first projects only these (on 4
        METIS parts: 14-30% of the owned rows of Cora, whose inputs are 1433 wide, and 6-7%
        of CiteSeer's, 3703 wide)."""
        key = id(scale)
        if key not in self._static_rows:
            self._static_rows[key] = (scale, self.sum_rows(self._x_halo, scale)[self.halo_dst].contiguous())
        return self._static_rows[key][1]

    def spread(self, rows: torch.Tensor) -> torch.Tensor:
        """``[owned, d]`` rows: ``rows`` (one per :attr:`halo_dst`) in place, zeros elsewhere
        (differentiable in ``rows``)."""
        out = rows.new_zeros((self.num_owned, rows.shape[1]))
        return out.index_copy(0, self.halo_dst, rows)


def halo_destinations(src: torch.Tensor, dst: torch.Tensor, num_owned: int) -> torch.Tensor:
    """The owned rows (destinations) with an in-edge from a halo row (a source at
    ``num_owned`` or beyond), ascending: :attr:`BlockSplit.halo_dst`."""
    return torch.unique(dst[src >= num_owned])


def halo_in_rows(block: GraphBlock) -> int:
    """How many owned rows of ``block`` have an in-edge from a halo row."""
    src, dst = block.graph.edges(order="eid")
    return int(halo_destinations(src, dst, block.num_dst).numel())


class KeptSums:
    """The halo sums a run's stale steps reuse, per layer, with the version of the served
    rows they sum (:attr:`~dgl_sni.halo.resolver.Resolved.version`).

    A stale step's sum is kept until the served rows change. A training sync step sums
    its fresh rows undropped (with ``--sync-halo summed`` it trains on that sum; with
    ``inputs`` and ``rows`` it trains on them dropped, summed in the same pass) and updates
    the kept sum as the resolver says the served rows follow
    (:attr:`~dgl_sni.halo.resolver.Resolved.blend`: the smoothing averages the fresh rows
    into the cache), so the stale steps after it sum nothing; where
    the kept sum is not of the version before, it is dropped and the next stale step sums
    anew. Owned by :class:`~dgl_sni.halo.plan.HaloPlanner`: a stale step whose cache rows
    are those of the kept version takes the kept sum (:meth:`current`).
    """

    def __init__(self):
        self._kept = {}  # layer -> (version, scale, sum)
        self._trend = {}  # layer -> (step, per-step change, the kept sum it continues) of the last trended keep
        self._last = {}  # layer -> (step, scale, sum) of the last keep that may start a trend
        self._out = {}  # layer -> the buffer a continued sum is written to

    def current(self, layer: int, version: int | None) -> torch.Tensor | None:
        """The kept sum of ``layer`` where it is of the rows of ``version`` (else ``None``)."""
        kept = self._kept.get(layer)
        return kept[2] if version is not None and kept is not None and kept[0] == version else None

    def scaled_by(self, layer: int, scale) -> bool:
        """The sum kept for ``layer`` was summed with ``scale`` (the same tensor)."""
        kept = self._kept.get(layer)
        return kept is not None and kept[1] is scale

    def version(self, layer: int) -> int | None:
        """The version of the rows whose sum is kept for ``layer`` (``None``: none kept)."""
        kept = self._kept.get(layer)
        return None if kept is None else kept[0]

    def get(self, layer: int, version: int | None, scale) -> torch.Tensor | None:
        """The kept sum of the rows of ``version`` (a stale step's :attr:`Resolved.version`)
        scaled by ``scale``, or ``None``."""
        kept = self._kept.get(layer)
        if version is None or kept is None or kept[1] is not scale or kept[0] != version:
            return None
        return kept[2]

    def continued(self, layer: int, version: int | None, step: int, share: float) -> torch.Tensor | None:
        """:meth:`current`, continued to ``step`` along its change between the last two
        trended keeps (:meth:`keep` with a ``step``): ``S + share * k * D``, ``k`` steps after
        the sync that kept ``S``, ``D`` the change per step from the sum before it. Without
        that history (the first sync of a trend, a sum since updated otherwise) the sum as
        kept. A continued sum is written to one buffer per layer, which the next call
        rewrites: a step reads it (forward, and a layer's backward of that step)."""
        total = self.current(layer, version)
        trend = self._trend.get(layer)
        if total is None or not share or trend is None or trend[2] is not total or step <= trend[0]:
            return total
        out = self._out.get(layer)  # one buffer per layer, rewritten each step (a step only reads it)
        if out is None or out.shape != total.shape:
            out = self._out[layer] = torch.empty_like(total)
        return torch.add(total, trend[1], alpha=share * (step - trend[0]), out=out)

    def keep(self, layer: int, resolved, scale, total: torch.Tensor, step: int | None = None) -> None:
        """``total`` was summed from ``resolved``'s rows: keep it, or the sum it updates.
        With ``step`` (a training step whose sums may start a trend) the change per step since
        the last such keep of the same scale is kept beside it, for :meth:`continued`."""
        self._keep(layer, resolved, scale, total)
        kept = self._kept.get(layer)
        self._trend.pop(layer, None)
        if step is None or kept is None:
            self._last.pop(layer, None)
            return
        last = self._last.get(layer)
        if last is not None and last[1] is scale and step > last[0]:
            self._trend[layer] = (step, (kept[2] - last[2]) / (step - last[0]), kept[2])
        self._last[layer] = (step, scale, kept[2])

    def _keep(self, layer: int, resolved, scale, total: torch.Tensor) -> None:
        if resolved.version is not None:
            self._kept[layer] = (resolved.version, scale, total)
            return
        if resolved.blend is None:
            return
        g, version = resolved.blend
        kept = self._kept.get(layer)
        if not g:
            self._kept[layer] = (version, scale, total)
        elif kept is not None and kept[1] is scale and kept[0] == version - 1:
            self._kept[layer] = (version, scale, mix(kept[2], g, total))
        else:
            self._kept.pop(layer, None)


def _sub_block(block: GraphBlock, src, dst, num_src: int, rows: slice) -> GraphBlock:
    """The part of ``block`` whose edges are ``src -> dst`` over the source rows ``rows``
    (edge order kept: destination-sorted, as :func:`storage_tier.block.build_block` makes it)."""
    graph = dgl.create_block((src, dst), num_src_nodes=num_src, num_dst_nodes=block.num_dst)
    graph.create_formats_()
    keys = block.src_keys.numpy()
    return GraphBlock(graph=graph, num_src=num_src, num_dst=block.num_dst, src_norm=block.src_norm[rows],
                      dst_norm=block.dst_norm, src_keys=block.src_keys[rows],
                      edge_keys=torch.from_numpy(edge_key(keys[src.numpy() + rows.start], keys[dst.numpy()])))
