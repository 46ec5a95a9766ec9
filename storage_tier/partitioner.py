"""Switching-aware partitioning: a low-memory label-propagation partitioner (GriNNder, Sec. 6).

``dgl-sni partition --method switching``. METIS (DGL's) needs several times the graph in
working memory; this needs the CSR, the output, and one small int per CSR entry holding the
partition of that entry's destination (``uint8`` for up to 256 labels, ``uint16`` up to
65536), plus O(|V|) bytes and O(labels^2) scratch: measured 62 MB over a loaded
1M-node / 20M-edge graph (METIS: ~1.5 GB), 35 MB with ``levels=0``. The core is
C++ (``csrc/label_prop.hpp``, through ``_lp.pyx``), single-threaded, GIL released,
deterministic for a given seed.

Algorithm: balanced random start; every iteration visits the vertices in a random order and
moves each to the part maximising ``count_p/deg + lam * (1 - size_p/cap)`` with a hard cap
``cap = balance * n / p`` (a full part may not be entered); up to ``max_iter`` iterations, or
until the cut has not improved by a relative ``tol`` for ``patience`` iterations.

``levels`` (default ``"auto"``) runs the same propagation as a coarse-to-fine schedule over
*labels*: it starts with ``p * 2**levels`` labels (sub-parts of a few vertices), then halves
the label count ``levels`` times by pairing labels along the label graph's heaviest
connections, refining after each halving. Single-level propagation from a random p-way start
freezes a mixture of communities (about 2x METIS's cut on cora/citeseer); starting fine fixes
most of that at ~3-8x the iterations. ``levels=0`` is the plain single-level algorithm.

Entry points:

* :func:`switching_partition` -- CSR in, ``parts`` (int64, one per vertex) out;
* :func:`partition_from_edges` -- COO in (builds the CSR by counting sort, no copy of
  ``dst`` when ``src`` is sorted);
* :func:`partition_subgraph` -- sub-partitions of a node subset (e.g. inside a worker);
* :func:`evaluate_partition` / :func:`cut_stats` -- edge cut, expansion ratio alpha,
  balance, part sizes.

``dgl_sni.partition`` writes any assignment in DGL's partition format.
"""
from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass, field

import numpy as np

from . import _lp

DEFAULT_BALANCE = 1.1
DEFAULT_LAM = 0.5
DEFAULT_MAX_ITER = 50
DEFAULT_PATIENCE = 8
DEFAULT_REFINE_ITER = 10
DEFAULT_CHUNKS = 8
DEFAULT_TOL = 1e-3
DEFAULT_MAX_LABELS = 1024
DEFAULT_MIN_LABEL_SIZE = 2
LABEL_LIMIT = 2048  # the label-pairing step keeps a labels x labels matrix


class PartitionError(ValueError):
    """An argument or graph the partitioner cannot use; the message names the problem."""


@dataclass
class PartitionInfo:
    """What a :func:`switching_partition` run did.

    ``seed`` is the seed of the returned run, ``restart_cuts`` the cut fraction of each
    restart. ``history`` (of the returned run) rows are ``(labels, cut_entries, moves)``: a phase start (``moves == -1``:
    the random start, or labels just paired up) or one iteration. ``cut_history`` is the
    cut fraction of each row. Cuts count CSR entries crossing labels (for a symmetric CSR,
    twice the undirected cut edges); ``edge_cut`` is the final fraction.
    """

    num_parts: int
    num_nodes: int
    num_entries: int
    levels: int
    iterations: int
    seconds: float
    edge_cut: float
    start_edge_cut: float
    capacity: int
    part_sizes: list
    balance: float
    stop_reason: str
    restored_start: bool
    dstpart_dtype: str
    seed: int
    restart_cuts: list
    history: np.ndarray = field(repr=False)

    @property
    def cut_history(self) -> list:
        m = max(self.num_entries, 1)
        return [float(c) / m for c in self.history[:, 1]]

    def to_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k != "history"}
        out["history"] = self.history.tolist()
        out["cut_history"] = self.cut_history
        return out


# ----------------------------------------------------------------------------- validation

def _as_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise PartitionError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _as_float(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise PartitionError(f"{name} must be a finite number, got {value!r}")
    return float(value)


def _int_array(a, name: str, allow32: bool = True) -> np.ndarray:
    """``a`` as a 1-D C-contiguous int64 (or int32) array; copies only when it must."""
    arr = np.asarray(a)
    if arr.ndim != 1:
        raise PartitionError(f"{name} must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise PartitionError(f"{name} must hold integers, got {arr.dtype}")
    keep = (np.int64, np.int32) if allow32 else (np.int64,)
    dtype = arr.dtype if arr.dtype in keep else np.int64
    return np.ascontiguousarray(arr, dtype=dtype)


def auto_levels(num_nodes: int, num_parts: int, max_labels: int = DEFAULT_MAX_LABELS,
                min_label_size: int = DEFAULT_MIN_LABEL_SIZE) -> int:
    """The most label halvings with ``p * 2**levels <= max_labels`` labels of at least
    ``min_label_size`` vertices each (0 for p = 1)."""
    if num_parts <= 1:
        return 0
    levels = 0
    while (num_parts << (levels + 1)) <= max_labels and \
            num_nodes >= (num_parts << (levels + 1)) * min_label_size:
        levels += 1
    return levels


_CSR_ERRORS = {
    1: "indptr[0] must be 0",
    2: "indptr must be non-decreasing (it decreases after row {where})",
    3: "indptr[-1] must equal len(indices) ({m})",
    4: "indices[{where}] = {value} is not a vertex id in [0, {n})",
}


def check_csr(indptr: np.ndarray, indices: np.ndarray) -> None:
    """Raise :class:`PartitionError` unless ``(indptr, indices)`` is a well-formed CSR."""
    if indptr.shape[0] < 2:
        raise PartitionError("indptr must have num_nodes + 1 >= 2 entries (an empty graph "
                             "cannot be partitioned)")
    code, where = _lp.check_csr(indptr, indices)
    if code:
        n, m = indptr.shape[0] - 1, indices.shape[0]
        value = indices[where] if code == 4 else None
        raise PartitionError("malformed CSR: " + _CSR_ERRORS[code].format(
            where=where, m=m, n=n, value=value))


# ----------------------------------------------------------------------------- partitioning

def switching_partition(indptr, indices, num_parts: int, balance: float = DEFAULT_BALANCE,
                        max_iter: int = DEFAULT_MAX_ITER, seed: int = 0, lam: float = DEFAULT_LAM,
                        patience: int = DEFAULT_PATIENCE, *, levels="auto",
                        refine_iter: int = DEFAULT_REFINE_ITER, chunks: int = DEFAULT_CHUNKS,
                        tol: float = DEFAULT_TOL, init=None, max_labels: int = DEFAULT_MAX_LABELS,
                        min_label_size: int = DEFAULT_MIN_LABEL_SIZE, restarts: int = 1,
                        validate: bool = True, return_info: bool = False):
    """Partition the graph in CSR form into ``num_parts`` parts; returns ``parts`` (int64).

    The CSR (``indptr`` int64 ``[n + 1]``, ``indices`` int32/int64 ``[m]``) is read as
    given: store both directions of each undirected edge (the datasets do). Every part ends
    with at most ``cap = max(ceil(n/p), floor(balance * n / p))`` vertices.

    ``levels``: ``"auto"`` (:func:`auto_levels` with ``max_labels``/``min_label_size``),
    or the number of label halvings (0: plain single-level propagation); ``refine_iter``
    bounds each intermediate phase, ``max_iter`` the first and the final one. ``chunks``:
    visits per iteration between refreshes of the per-edge array (1..254). ``init``: start
    from this assignment instead of a random one (forces ``levels=0``; it is handed back if
    refinement made its cut worse and it respects the cap). ``restarts``: run seeds
    ``seed .. seed + restarts - 1`` and keep the lowest cut (time x restarts, one more
    ``parts`` array of memory; worthwhile on small graphs). ``validate=False`` skips the
    O(|E|) CSR check. With ``return_info`` returns ``(parts, PartitionInfo)``.
    """
    if validate:
        indptr = _int_array(indptr, "indptr", allow32=False)
        indices = _int_array(indices, "indices")
    n = indptr.shape[0] - 1
    if n < 1:
        raise PartitionError("indptr must have num_nodes + 1 >= 2 entries (an empty graph "
                             "cannot be partitioned)")
    p = _as_int(num_parts, "num_parts")
    if p < 1:
        raise PartitionError(f"num_parts must be at least 1, got {p}")
    if p > n:
        raise PartitionError(f"cannot split {n} nodes into {p} parts: num_parts must not exceed "
                             "the number of nodes")
    balance = _as_float(balance, "balance")
    if balance < 1.0:
        raise PartitionError(f"balance must be at least 1.0 (1.0 = perfectly equal parts), got {balance}")
    lam = _as_float(lam, "lam")
    if lam < 0:
        raise PartitionError(f"lam (the size penalty weight) must be >= 0, got {lam}")
    tol = _as_float(tol, "tol")
    if tol < 0:
        raise PartitionError(f"tol must be >= 0, got {tol}")
    max_iter = _as_int(max_iter, "max_iter")
    refine_iter = _as_int(refine_iter, "refine_iter")
    if max_iter < 0 or refine_iter < 0:
        raise PartitionError(f"max_iter and refine_iter must be >= 0, got {max_iter}, {refine_iter}")
    patience = _as_int(patience, "patience")
    if patience < 1:
        raise PartitionError(f"patience must be at least 1, got {patience}")
    chunks = _as_int(chunks, "chunks")
    if not 1 <= chunks <= 254:
        raise PartitionError(f"chunks must lie in [1, 254], got {chunks}")
    seed = _as_int(seed, "seed")
    if seed < 0:
        raise PartitionError(f"seed must be >= 0, got {seed}")
    restarts = _as_int(restarts, "restarts")
    if restarts < 1:
        raise PartitionError(f"restarts must be at least 1, got {restarts}")
    if validate:
        check_csr(indptr, indices)
    if init is not None:
        levels = 0
        init = _int_array(init, "init", allow32=False)
        if init.shape[0] != n:
            raise PartitionError(f"init must hold one part id per node ({n}), got {init.shape[0]}")
        if n and (init.min() < 0 or init.max() >= p):
            raise PartitionError(f"init holds part ids outside [0, {p})")
    if levels == "auto":
        max_labels = _as_int(max_labels, "max_labels")
        if not 1 <= max_labels <= LABEL_LIMIT:
            raise PartitionError(f"max_labels must lie in [1, {LABEL_LIMIT}], got {max_labels}")
        levels = auto_levels(n, p, max_labels, _as_int(min_label_size, "min_label_size"))
    levels = _as_int(levels, "levels")
    if levels < 0:
        raise PartitionError(f"levels must be 'auto' or >= 0, got {levels}")
    if p == 1:
        levels = 0
    if (p << levels) > max(LABEL_LIMIT, p):
        raise PartitionError(f"levels={levels} would start with {p << levels} labels; the label "
                             f"pairing supports at most {LABEL_LIMIT}")

    start = time.perf_counter()
    best, restart_cuts = None, []
    for run_seed in range(seed, seed + (1 if init is not None else restarts)):
        result = _lp.run(indptr, indices, p, levels=levels, balance=balance, lam=lam,
                         max_iter=max_iter, refine_iter=refine_iter, patience=patience,
                         tol=tol, chunks=chunks, seed=run_seed, init=init)
        restart_cuts.append(result[2]["final_cut"])
        if best is None or result[2]["final_cut"] < best[2]["final_cut"]:
            best = result + (run_seed,)
        del result
    parts, history, stats, best_seed = best
    del best
    seconds = time.perf_counter() - start
    m = indices.shape[0]
    final_cut = stats["final_cut"]
    sizes = np.bincount(parts, minlength=p)
    if init is not None and final_cut > stats["start_cut"] and \
            np.bincount(init, minlength=p).max() <= stats["capacity"]:
        parts, final_cut = init.copy(), stats["start_cut"]
        sizes = np.bincount(parts, minlength=p)
        stats["restored_start"], stats["stop_reason"] = True, "restored_start"
    if not return_info:
        return parts
    info = PartitionInfo(
        num_parts=p, num_nodes=n, num_entries=m, levels=levels, iterations=stats["iterations"],
        seconds=seconds, edge_cut=final_cut / max(m, 1), start_edge_cut=stats["start_cut"] / max(m, 1),
        capacity=stats["capacity"], part_sizes=sizes.tolist(),
        balance=float(sizes.max() / max(n / p, 1e-9)), stop_reason=stats["stop_reason"],
        restored_start=stats["restored_start"], dstpart_dtype=stats["dstpart_dtype"], seed=best_seed,
        restart_cuts=[c / max(m, 1) for c in restart_cuts], history=history)
    return parts, info


def edges_to_csr(src, dst, num_nodes: int, symmetrize: bool = False, index_dtype=None):
    """CSR ``(indptr, indices)`` of COO edges by counting sort: O(|V|) scratch, no sort.

    When ``src`` is already sorted (the datasets' order) and ``symmetrize`` is off,
    ``indices`` *is* ``dst`` (no copy). Otherwise ``indices`` is built as ``index_dtype``
    (default int32 when node ids fit). ``symmetrize`` adds every edge's reverse.
    """
    num_nodes = _as_int(num_nodes, "num_nodes")
    if num_nodes < 1:
        raise PartitionError(f"num_nodes must be at least 1, got {num_nodes}")
    src, dst = _int_array(src, "src"), _int_array(dst, "dst")
    if src.shape[0] != dst.shape[0]:
        raise PartitionError(f"src has {src.shape[0]} entries but dst has {dst.shape[0]}")
    if src.dtype != dst.dtype:
        src, dst = src.astype(np.int64, copy=False), dst.astype(np.int64, copy=False)
    try:
        return _lp.coo_to_csr(src, dst, num_nodes, bool(symmetrize), index_dtype)
    except (ValueError, TypeError) as err:
        raise PartitionError(str(err)) from err


def partition_from_edges(src, dst, num_nodes: int, num_parts: int, symmetrize: bool = False,
                         index_dtype=None, **kw):
    """:func:`switching_partition` of the graph given as COO ``src -> dst`` edges.

    Keywords are :func:`switching_partition`'s (``return_info=True`` for the info).
    """
    indptr, indices = edges_to_csr(src, dst, num_nodes, symmetrize, index_dtype)
    kw.setdefault("validate", False)  # edges_to_csr built it and checked the ids
    return switching_partition(indptr, indices, num_parts, **kw)


def partition_subgraph(src, dst, nodes, num_parts: int, **kw):
    """Sub-partition the node subset ``nodes`` (e.g. a worker's own nodes) by the edges among them.

    ``src``/``dst`` may hold ids of any graph (say a worker's local graph including halo
    nodes); only edges with both ends in ``nodes`` count. Returns ``parts`` aligned with
    ``nodes`` (``(parts, info)`` with ``return_info=True``).
    """
    nodes = _int_array(nodes, "nodes", allow32=False)
    if nodes.size == 0:
        raise PartitionError("nodes is empty")
    if np.unique(nodes).size != nodes.size:
        raise PartitionError("nodes holds duplicate ids")
    src, dst = _int_array(src, "src", allow32=False), _int_array(dst, "dst", allow32=False)
    if src.shape[0] != dst.shape[0]:
        raise PartitionError(f"src has {src.shape[0]} entries but dst has {dst.shape[0]}")
    order = np.argsort(nodes, kind="stable")
    sorted_nodes = nodes[order]

    def local(ids):
        pos = np.searchsorted(sorted_nodes, ids)
        pos = np.minimum(pos, sorted_nodes.size - 1)
        inside = sorted_nodes[pos] == ids
        return order[pos], inside

    ls, ins = local(src)
    ld, ind = local(dst)
    keep = ins & ind
    return partition_from_edges(ls[keep], ld[keep], nodes.size, num_parts, **kw)


def evaluate_partition(src, dst, parts, num_parts: int) -> dict:
    """:func:`cut_stats` of an assignment, after checking the arrays."""
    parts = _int_array(parts, "parts", allow32=False)
    src, dst = _int_array(src, "src", allow32=False), _int_array(dst, "dst", allow32=False)
    if parts.size and (parts.min() < 0 or parts.max() >= num_parts):
        raise PartitionError(f"parts holds ids outside [0, {num_parts})")
    return cut_stats(src, dst, parts, int(num_parts))


def cut_stats(src: np.ndarray, dst: np.ndarray, parts: np.ndarray, num_parts: int) -> dict:
    """Edge cut (fraction of edges between parts) and expansion ratio alpha.

    alpha = (rows a part needs: its own nodes plus distinct remote in-neighbours) /
    (rows it owns), averaged over parts weighted by owned rows, i.e. total needed rows
    over total nodes. Also the halo and owned rows of every part and the balance
    (largest part / mean part).
    """
    ps, pd = parts[src], parts[dst]
    crossing = ps != pd
    owned = np.bincount(parts, minlength=num_parts)
    # distinct (part of dst, remote src) pairs = halo rows per part
    key = np.unique(pd[crossing].astype(np.int64) * (parts.shape[0]) + src[crossing])
    halo = np.bincount(key // parts.shape[0], minlength=num_parts)
    return dict(edge_cut=float(crossing.mean()) if crossing.size else 0.0,
                cut_edges=int(crossing.sum()),
                alpha=float((owned.sum() + halo.sum()) / max(owned.sum(), 1)),
                halo_nodes=halo.tolist(), part_sizes=owned.tolist(),
                balance=float(owned.max() / max(owned.mean(), 1e-9)))
