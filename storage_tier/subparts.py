"""Sub-partitioning one worker's rows into P sub-partitions with their own compute blocks.

:class:`RowSpace` is what the tier needs of a worker's view, in the view's numbering:
its edges (``src -> dst`` block-local ids, no self loops), ``num_owned`` destination rows
and ``num_src = num_owned + num_halo`` source rows, the GCN norms over *global* degrees,
the dataset ids of the source rows (``src_keys``, they key dropout), the input features
and the labels/split masks of the owned rows. :func:`rowspace_from_view` takes it from a
trainer's view (``block``, ``x_src``, ``labels`` and the split masks);
:func:`rowspace_from_graph` builds it for one process owning a whole graph dataset
(``num_nodes``, ``src``/``dst``, ``degrees()``, ``masks()``, ``features``, ``labels``)
without building the whole-graph DGL block (so large runs do not pay for it).

:meth:`SubpartitionPlan.build` splits the owned rows into P parts -- the switching-aware
label-propagation partitioner of :mod:`storage_tier.partitioner` when it imports,
otherwise contiguous id ranges -- and renumbers rows so that each sub-partition is a
contiguous range of the tier's row space::

    tier rows  [offsets[0], offsets[1]) ... [offsets[P-1], offsets[P]=num_owned)  halo [num_owned, num_src)
    unit part      0                    ...        P-1                               P  (= plan.halo_part)

``perm[tier_row] = view_row`` for owned rows; halo rows keep their order. Each
:class:`SubPartition` gets a :class:`~storage_tier.block.GraphBlock` whose destination rows are
its own rows and whose source rows are its own rows first, then its *boundary* (the other
rows it reads, from any sub-partition or the halo) in ascending tier order, so the rows it
gathers from one unit form one contiguous slice of its source rows (:class:`Source`). Its
``src_keys`` are the dataset ids of those rows and its norms are the view's (global)
norms sliced, so every layer computes exactly what the whole-graph block computes for
those destination rows, with the same dropout masks. The expansion ratio is
``alpha = sum_s num_src(s) / num_owned``.

Called by the tier trainer and the benchmarks' baselines.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .block import MODELS_WITH_SELF_LOOPS, GraphBlock, ReverseBlock, build_block, degree_norm

import dgl  # noqa: E402  (after .block, which applies the DGL shims)


@dataclass
class RowSpace:
    """One worker's rows, edges and per-row data in its view's numbering (see module doc)."""

    src: np.ndarray
    dst: np.ndarray
    num_owned: int
    num_src: int
    src_norm: torch.Tensor
    dst_norm: torch.Tensor
    src_keys: np.ndarray
    self_loops: bool
    features: object  # [num_src, in_dim]: torch tensor, numpy array or np.memmap
    labels: np.ndarray
    train_mask: np.ndarray
    val_mask: np.ndarray
    test_mask: np.ndarray

    @property
    def num_halo(self) -> int:
        return self.num_src - self.num_owned


def rowspace_from_view(view, self_loops: bool) -> RowSpace:
    """The :class:`RowSpace` of a trainer's view (``block``, ``x_src``, ``labels``, split
    masks): its block's edges minus self loops."""
    block = view.block
    src, dst = (t.numpy().astype(np.int64) for t in block.graph.edges())
    if self_loops:  # build_block added exactly one v -> v per destination; datasets have none
        keep = src != dst
        src, dst = src[keep], dst[keep]
    return RowSpace(src=src, dst=dst, num_owned=block.num_dst, num_src=block.num_src,
                    src_norm=block.src_norm, dst_norm=block.dst_norm,
                    src_keys=block.src_keys.numpy(), self_loops=self_loops,
                    features=view.x_src, labels=view.labels.numpy(),
                    train_mask=view.train_mask.numpy(), val_mask=view.val_mask.numpy(),
                    test_mask=view.test_mask.numpy())


def rowspace_from_graph(data, model: str) -> RowSpace:
    """A :class:`RowSpace` in which one process owns every node of ``data`` (no DGL block built)."""
    in_deg, out_deg = data.degrees()
    loops = model in MODELS_WITH_SELF_LOOPS
    masks = data.masks()
    n = data.num_nodes
    return RowSpace(src=data.src, dst=data.dst, num_owned=n, num_src=n,
                    src_norm=degree_norm(out_deg, loops), dst_norm=degree_norm(in_deg, loops),
                    src_keys=np.arange(n, dtype=np.int64), self_loops=loops,
                    features=data.features, labels=np.maximum(data.labels, 0),
                    train_mask=masks["train_mask"], val_mask=masks["val_mask"],
                    test_mask=masks["test_mask"])


@dataclass
class Source:
    """Rows a sub-partition gathers from one unit: ``rows`` of unit ``part`` (None: all of
    them) land in its source rows ``[start, stop)``."""

    part: int
    rows: np.ndarray | None
    start: int
    stop: int

    def __post_init__(self):
        # torch view of ``rows`` for the engine's index_select/index_add_ (shares memory)
        self.index = None if self.rows is None else torch.from_numpy(
            np.ascontiguousarray(self.rows, dtype=np.int64))


@dataclass
class SubPartition:
    """One sub-partition: tier rows ``[start, stop)``, its block and what it gathers."""

    index: int
    start: int
    stop: int
    block: GraphBlock
    sources: list
    labels: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor

    @property
    def num_rows(self) -> int:
        return self.stop - self.start

    @property
    def num_src(self) -> int:
        return self.block.num_src


@dataclass
class ReversePart:
    """One unit as the destination of the backward edges (see :class:`~storage_tier.block.ReverseBlock`).

    ``unit``: the unit part id (a sub-partition or the halo); ``block``: the reversed edges
    into its rows; ``sources``: what it gathers from the owned units of a gradient layer
    (:class:`Source`, in the block's source order); ``keys``: the dataset ids of the
    unit's rows (they key dropout). Built by :meth:`SubpartitionPlan.reverse_parts`, used
    by the engine's source-major backward.
    """

    unit: int
    block: ReverseBlock
    sources: list
    keys: torch.Tensor


def assign_parts(rs: RowSpace, num_parts: int, method: str = "auto", seed: int = 0) -> tuple:
    """Sub-partition id of every owned row, and the method used ('switching' or 'range')."""
    n = rs.num_owned
    if num_parts <= 1 or n <= 1:
        return np.zeros(n, dtype=np.int64), "single"
    if method not in ("auto", "switching", "range"):
        raise ValueError(f"sub-partition method must be auto, switching or range, got {method!r}")
    if method in ("auto", "switching"):
        try:
            from .partitioner import partition_from_edges
        except (ImportError, AttributeError):
            if method == "switching":
                raise
        else:
            keep = (rs.src < n) & (rs.dst < n)
            parts = partition_from_edges(rs.src[keep], rs.dst[keep], n, num_parts, seed=seed)
            return np.asarray(parts, dtype=np.int64), "switching"
    return (np.arange(n, dtype=np.int64) * num_parts) // n, "range"


class SubpartitionPlan:
    """The row renumbering, the P sub-partitions and their blocks (see module docstring)."""

    def __init__(self, num_owned, num_halo, offsets, perm, parts, method):
        self.num_owned, self.num_halo = int(num_owned), int(num_halo)
        self.offsets = offsets
        self.perm = perm
        self.inv_perm = np.empty_like(perm)
        self.inv_perm[perm] = np.arange(perm.shape[0], dtype=np.int64)
        self.parts = parts
        self.method = method
        self._reverse = None  # {unit: ReversePart}, built on first use

    @property
    def num_parts(self) -> int:
        return len(self.offsets) - 1

    @property
    def halo_part(self) -> int:
        return len(self.offsets) - 1

    @property
    def unit_parts(self) -> list:
        """Unit part ids of a layer: the sub-partitions, then the halo if there is one."""
        return list(range(self.num_parts)) + ([self.halo_part] if self.num_halo else [])

    def unit_rows(self, part: int) -> int:
        if part == self.halo_part:
            return self.num_halo
        return int(self.offsets[part + 1] - self.offsets[part])

    def unit_range(self, part: int) -> tuple:
        if part == self.halo_part:
            return self.num_owned, self.num_owned + self.num_halo
        return int(self.offsets[part]), int(self.offsets[part + 1])

    @property
    def alpha(self) -> float:
        """Expansion ratio: gathered source rows over owned rows."""
        return sum(p.num_src for p in self.parts) / max(1, self.num_owned)

    def locate(self, tier_rows: np.ndarray) -> tuple:
        """(unit part, row within unit) of tier rows."""
        tier_rows = np.asarray(tier_rows, dtype=np.int64)
        part = np.searchsorted(self.offsets, tier_rows, side="right") - 1
        part = np.minimum(part, self.halo_part)
        base = np.where(part == self.halo_part, self.num_owned, self.offsets[np.minimum(part, self.num_parts - 1)])
        return part, tier_rows - base

    def stats(self) -> dict:
        sizes = [p.num_rows for p in self.parts]
        return dict(num_subparts=self.num_parts, subpart_method=self.method, alpha=self.alpha,
                    subpart_rows_min=min(sizes), subpart_rows_max=max(sizes),
                    num_owned=self.num_owned, num_halo=self.num_halo)

    def sources_of(self, tier_rows: np.ndarray, start: int) -> list:
        """The :class:`Source` list gathering sorted unique ``tier_rows`` into rows
        ``start, start+1, ...`` of a block: one per unit they fall in (``rows=None`` where
        they are the whole unit)."""
        if not tier_rows.shape[0]:
            return []
        upart, urow = self.locate(tier_rows)
        starts = np.flatnonzero(np.diff(upart, prepend=-1))
        ends = np.append(starts[1:], upart.shape[0])
        out = []
        for a, b in zip(starts, ends):
            p = int(upart[a])
            whole = b - a == self.unit_rows(p)  # sorted unique rows of the unit: all of them
            out.append(Source(p, None if whole else urow[a:b].copy(), start + int(a), start + int(b)))
        return out

    def reverse_parts(self) -> dict:
        """``{unit part: ReversePart}`` for every unit, built from the forward blocks on
        first use (an engine whose model backpropagates source-major asks for them)."""
        if self._reverse is None:
            self._reverse = self._build_reverse()
        return self._reverse

    def _build_reverse(self) -> dict:
        total = self.num_owned + self.num_halo
        u_norm = torch.zeros(total, 1)
        keys = np.zeros(total, dtype=np.int64)
        v_norm = torch.zeros(self.num_owned, 1)
        v_degree = torch.ones(self.num_owned, 1)
        us, vs = [], []
        for part in self.parts:
            tier_src = np.empty(part.num_src, dtype=np.int64)
            for src in part.sources:
                lo = self.unit_range(src.part)[0]
                tier_src[src.start: src.stop] = (lo + np.arange(src.stop - src.start) if src.rows is None
                                                 else lo + src.rows)
            e_src, e_dst = (t.numpy() for t in part.block.graph.edges())
            us.append(tier_src[e_src])
            vs.append(part.start + e_dst.astype(np.int64))
            index = torch.from_numpy(tier_src)
            u_norm[index] = part.block.src_norm
            keys[tier_src] = part.block.src_keys.numpy()
            v_norm[part.start: part.stop] = part.block.dst_norm
            v_degree[part.start: part.stop, 0] = part.block.graph.in_degrees().float().clamp(min=1)
        u = np.concatenate(us) if us else np.zeros(0, dtype=np.int64)
        v = np.concatenate(vs) if vs else np.zeros(0, dtype=np.int64)
        del us, vs
        order = np.lexsort((v, u))  # by destination row (u), then source: a fixed summation order
        u, v = u[order], v[order]
        del order
        out = {}
        for q in self.unit_parts:
            lo, hi = self.unit_range(q)
            a, b = np.searchsorted(u, [lo, hi])
            e_u, e_v = u[a:b] - lo, v[a:b]
            gathered, local = np.unique(e_v, return_inverse=True)
            graph = dgl.create_block((torch.from_numpy(local.astype(np.int64)), torch.from_numpy(e_u)),
                                     num_src_nodes=gathered.shape[0], num_dst_nodes=hi - lo)
            graph.create_formats_()
            sources = self.sources_of(gathered, 0)
            index = torch.from_numpy(gathered)
            block = ReverseBlock(graph=graph, num_src=int(gathered.shape[0]), num_dst=hi - lo,
                                 v_norm=v_norm[index], v_degree=v_degree[index],
                                 u_norm=u_norm[lo:hi].clone())
            out[q] = ReversePart(unit=q, block=block, sources=sources,
                                 keys=torch.from_numpy(keys[lo:hi].copy()))
        return out

    @classmethod
    def build(cls, rs: RowSpace, num_parts: int, method: str = "auto", seed: int = 0) -> "SubpartitionPlan":
        n, num_src = rs.num_owned, rs.num_src
        if n < 1:
            raise ValueError("the tier needs at least one owned row")
        assignment, used = assign_parts(rs, num_parts, method, seed)
        _, assignment = np.unique(assignment, return_inverse=True)  # drop empty parts
        assignment = assignment.astype(np.int64)
        perm = np.argsort(assignment, kind="stable").astype(np.int64)
        counts = np.bincount(assignment)
        offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
        plan = cls(n, num_src - n, offsets, perm, [], used)

        to_tier = np.concatenate((plan.inv_perm, np.arange(n, num_src, dtype=np.int64)))
        from_tier = np.concatenate((perm, np.arange(n, num_src, dtype=np.int64)))
        tdst = plan.inv_perm[rs.dst]
        order = np.argsort(tdst, kind="stable")
        tdst = tdst[order]
        tsrc = to_tier[rs.src[order]]
        del order
        cuts = np.searchsorted(tdst, offsets)
        src_keys = np.asarray(rs.src_keys, dtype=np.int64)
        zeros = np.zeros(0, dtype=np.int64)
        for s in range(len(counts)):
            lo, hi = int(offsets[s]), int(offsets[s + 1])
            e_src, e_dst = tsrc[cuts[s]: cuts[s + 1]], tdst[cuts[s]: cuts[s + 1]] - lo
            own = (e_src >= lo) & (e_src < hi)
            boundary = np.unique(e_src[~own]) if (~own).any() else zeros
            n_s = hi - lo
            local = np.where(own, e_src - lo, n_s + np.searchsorted(boundary, e_src))
            view_src = np.concatenate((perm[lo:hi], from_tier[boundary]))
            num_src_s = n_s + boundary.shape[0]
            block = build_block(local, e_dst, num_src_s, n_s, np.zeros(num_src_s), np.zeros(n_s),
                                self_loops=rs.self_loops, src_keys=src_keys[view_src])
            # the view's norms come from global degrees: slice them (bit-identical values)
            block.src_norm = rs.src_norm[torch.from_numpy(view_src)]
            block.dst_norm = rs.dst_norm[torch.from_numpy(perm[lo:hi])]
            sources = [Source(s, None, 0, n_s)]
            sources.extend(plan.sources_of(boundary, n_s))
            rows = perm[lo:hi]
            plan.parts.append(SubPartition(
                index=s, start=lo, stop=hi, block=block, sources=sources,
                labels=torch.from_numpy(np.asarray(rs.labels)[rows].astype(np.int64)),
                train_mask=torch.from_numpy(np.asarray(rs.train_mask)[rows]),
                val_mask=torch.from_numpy(np.asarray(rs.val_mask)[rows]),
                test_mask=torch.from_numpy(np.asarray(rs.test_mask)[rows])))
        return plan
