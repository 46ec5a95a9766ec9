"""The bipartite compute block one trainer aggregates over.

Destination rows are the nodes a trainer owns (its partition's inner nodes, or every
node in single-process training); source rows are those owned nodes first, then the
halo (remote) nodes in a fixed order. Edges are every in-edge of a destination node,
plus one self loop per destination for models that use them (GCN, GAT).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

import patches

patches.apply()  # DGL shims before dgl

import dgl  # noqa: E402

MODELS_WITH_SELF_LOOPS = ("gcn", "gat", "custom")  # "custom": a model of the user's (dgl_sni.block_model)


@dataclass
class GraphBlock:
    """A DGL block plus the per-row normalisation a layer needs.

    Built by :func:`build_block` (trainers, reference, the tier's sub-partitions);
    consumed by the model layers, which map ``h_src [num_src, d]`` to ``h_dst [num_dst, d']``.
    ``src_norm``/``dst_norm`` are GCN's ``(deg + 1) ** -1/2`` over *global* degrees;
    ``src_keys`` the dataset's node ids of the source rows and ``edge_keys`` one id per
    edge derived from its endpoints' ids (they key the keyed dropout masks);
    ``src_degree``/``dst_degree`` the global degrees themselves (what a layer that reads
    the graph's degrees is shown: :mod:`dgl_sni.block_model`).
    """

    graph: dgl.DGLGraph
    num_src: int
    num_dst: int
    src_norm: torch.Tensor
    dst_norm: torch.Tensor
    src_keys: torch.Tensor
    edge_keys: torch.Tensor
    src_degree: torch.Tensor | None = None  # global out-degrees of the source rows (int64, self loop counted)
    dst_degree: torch.Tensor | None = None  # global in-degrees of the destination rows (likewise)

    @property
    def num_edges(self) -> int:
        return self.graph.num_edges()


@dataclass
class ReverseBlock:
    """The edges into one unit's rows taken backwards, for a layer's source-major backward.

    Destination rows are the unit's rows (sources of the forward edges); source rows are
    the forward destinations those rows feed, gathered from the gradient units. Built by
    :meth:`storage_tier.subparts.SubpartitionPlan.reverse_parts` from the forward blocks
    (self loops included); consumed by layers that are linear in their source rows, which
    sum their output gradients over it (``backward_sources``). ``v_norm``/``v_degree``:
    GCN's norm and the in-degree (clamped to 1; what a mean divides by) of the source
    rows; ``u_norm``: GCN's norm of the destination rows as forward sources.
    """

    graph: dgl.DGLGraph
    num_src: int
    num_dst: int
    v_norm: torch.Tensor
    v_degree: torch.Tensor
    u_norm: torch.Tensor


def degree_norm(degree: np.ndarray, self_loops: bool) -> torch.Tensor:
    """GCN's ``(deg [+ 1]) ** -1/2`` per node as a float32 column ``[n, 1]``.

    ``degree``: global degrees without self loops (``+1`` with ``self_loops``); the one
    expression :func:`build_block` and the tier's row spaces both use.
    """
    extra = 1.0 if self_loops else 0.0
    return torch.from_numpy(np.asarray(degree, dtype=np.float32) + extra).clamp(min=1).pow(-0.5).unsqueeze(1)


def edge_key(src_key: np.ndarray, dst_key: np.ndarray) -> np.ndarray:
    """The dropout key of edges ``src -> dst`` from their end points' keys (int64; a hash
    input, so wrapping is fine). Every block of the same edges derives it this way."""
    with np.errstate(over="ignore"):
        return src_key * np.int64(0x9E3779B1) + dst_key


def build_block(src: np.ndarray, dst: np.ndarray, num_src: int, num_dst: int,
                src_out_degree: np.ndarray, dst_in_degree: np.ndarray,
                self_loops: bool, src_keys: np.ndarray | None = None) -> GraphBlock:
    """Make a :class:`GraphBlock`.

    ``src``/``dst`` are block-local ids (``dst < num_dst``, ``src < num_src``, owned rows
    ``0..num_dst-1`` are the same nodes on both sides). Degrees are the global ones of
    the graph without self loops; with ``self_loops`` each gets ``+1`` and an explicit
    ``v -> v`` edge is added. ``src_keys`` (default ``0..num_src-1``) are the dataset's
    ids of the source rows.
    """
    src = np.asarray(src, dtype=np.int64)
    dst = np.asarray(dst, dtype=np.int64)
    if self_loops:
        loop = np.arange(num_dst, dtype=np.int64)
        src, dst = np.concatenate((src, loop)), np.concatenate((dst, loop))
    # dst-sorted edges give the same summation order in every process that sees the
    # same neighbourhood, and a CSC layout DGL's kernels like.
    order = np.lexsort((src, dst))
    src, dst = src[order], dst[order]
    if src_keys is None:
        src_keys = np.arange(num_src, dtype=np.int64)
    src_keys = np.ascontiguousarray(src_keys, dtype=np.int64)
    edge_keys = edge_key(src_keys[src], src_keys[dst])
    graph = dgl.create_block((torch.from_numpy(src), torch.from_numpy(dst)),
                             num_src_nodes=num_src, num_dst_nodes=num_dst)
    graph.create_formats_()
    extra = 1 if self_loops else 0
    return GraphBlock(graph=graph, num_src=num_src, num_dst=num_dst,
                      src_norm=degree_norm(src_out_degree, self_loops),
                      dst_norm=degree_norm(dst_in_degree, self_loops),
                      src_keys=torch.from_numpy(src_keys), edge_keys=torch.from_numpy(edge_keys),
                      src_degree=torch.from_numpy(np.asarray(src_out_degree, dtype=np.int64) + extra),
                      dst_degree=torch.from_numpy(np.asarray(dst_in_degree, dtype=np.int64) + extra))
