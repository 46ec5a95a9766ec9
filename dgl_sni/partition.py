"""Partition a :class:`~dgl_sni.data.GraphData` into DGL's partition format.

Every method computes its node assignment here, deterministically (the same graph and
seed give the same partitions in every process), and DGL's own ``partition_graph``
writes it, with one halo hop so every partition holds all in-edges of its nodes:

* ``metis`` -- METIS k-way (through ``pymetis``, seeded) on the symmetrised graph,
  balancing in-edges as DGL's ``balance_edges=True`` does. DGL 2.1's own METIS call
  takes no seed and returns a different assignment from one process to the next for
  the same input, which made identical runs train on different partitions.
* ``random`` -- a uniform assignment from a seeded generator.
* ``switching`` -- the label-propagation partitioner of :mod:`storage_tier.partitioner`.

Besides the dataset's arrays the partitions carry the global degrees (``in_deg``,
``out_deg``) that GCN's normalisation needs for halo nodes, and ``sni_meta.json`` with
the dataset facts and the partition quality (edge cut, expansion ratio);
``orig_nids.npy`` maps DGL's reshuffled node ids back to the dataset's ids.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import numpy as np
import scipy.sparse as sp
import torch

import dgl_sni  # noqa: F401
import dgl

from patches.partition_assignment import fixed_assignment
from storage_tier.partitioner import cut_stats, partition_from_edges

from .data import DatasetError, GraphData

from .config import METHODS  # declared without DGL
NODE_FIELDS = ("features", "labels", "train_mask", "val_mask", "test_mask", "in_deg", "out_deg")
META_FILE = "sni_meta.json"


def to_dgl_graph(data: GraphData) -> dgl.DGLGraph:
    """A DGLGraph holding ``data``'s edges and the node fields trainers read."""
    g = dgl.graph((torch.from_numpy(data.src), torch.from_numpy(data.dst)), num_nodes=data.num_nodes)
    in_deg, out_deg = data.degrees()
    g.ndata["features"] = torch.from_numpy(data.features)
    g.ndata["labels"] = torch.from_numpy(np.maximum(data.labels, 0))
    for key, mask in data.masks().items():
        g.ndata[key] = torch.from_numpy(mask)
    g.ndata["in_deg"] = torch.from_numpy(in_deg.astype(np.float32))
    g.ndata["out_deg"] = torch.from_numpy(out_deg.astype(np.float32))
    return g


@contextlib.contextmanager
def _silenced():
    """Send stdout and stderr (DGL's Python and C++ logs) to /dev/null for a while."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved + [devnull]:
            os.close(fd)


def partition(data: GraphData, num_parts: int, out_dir: str, method: str = "metis",
              graph_name: str | None = None, quiet: bool = True, seed: int = 0) -> str:
    """Write ``num_parts`` partitions of ``data`` to ``out_dir``; return the config JSON path.

    The assignment depends only on ``data``, ``method`` and ``seed`` (see the module
    docstring).
    """
    if method not in METHODS:
        raise ValueError(f"unknown partition method '{method}': choose one of {', '.join(METHODS)}")
    if num_parts < 1:
        raise ValueError(f"number of partitions must be at least 1, got {num_parts}")
    if num_parts > data.num_nodes:
        raise DatasetError(
            f"cannot split {data.num_nodes} nodes into {num_parts} partitions: "
            "--workers must not exceed the number of nodes")
    start = time.perf_counter()
    extra = {}
    if num_parts == 1:
        parts = np.zeros(data.num_nodes, dtype=np.int64)
    elif method == "metis":
        parts = metis_assignment(data, num_parts, seed)
    elif method == "random":
        parts = np.random.default_rng(seed).integers(0, num_parts, data.num_nodes, dtype=np.int64)
    else:
        parts, info = partition_from_edges(data.src, data.dst, data.num_nodes, num_parts,
                                           seed=seed, return_info=True)
        extra["partitioner"] = dict(levels=info.levels, iterations=info.iterations,
                                    stop_reason=info.stop_reason, capacity=info.capacity,
                                    cut_history=info.cut_history)
    extra["assignment_seconds"] = time.perf_counter() - start
    return write_partitions(data, num_parts, out_dir, method, graph_name, quiet,
                            assignment=parts, extra_meta=extra)


def metis_assignment(data: GraphData, num_parts: int, seed: int = 0) -> np.ndarray:
    """METIS k-way assignment of ``data``'s nodes (int64, one part id per node).

    METIS runs on the symmetrised graph without self-loops or duplicate edges, with each
    node weighted by its in-degree (so parts hold similar numbers of in-edges, as with
    DGL's ``balance_edges=True``) and a fixed ``seed``.
    """
    import pymetis

    n = data.num_nodes
    adj = sp.coo_matrix((np.ones(data.src.size, dtype=np.int8), (data.src, data.dst)), shape=(n, n)).tocsr()
    adj = (adj + adj.T).tocsr()
    adj.setdiag(0)
    adj.eliminate_zeros()
    adj.sort_indices()
    in_deg, _ = data.degrees()
    csr = pymetis.CSRAdjacency(adj.indptr.astype(np.int64), adj.indices.astype(np.int64))
    _, parts = pymetis.part_graph(num_parts, adjacency=csr, vweights=np.asarray(in_deg, dtype=np.int64),
                                  options=pymetis.Options(seed=int(seed)))
    return np.asarray(parts, dtype=np.int64)


def write_partitions(data: GraphData, num_parts: int, out_dir: str, method: str,
                     graph_name: str | None, quiet: bool, assignment: np.ndarray,
                     extra_meta: dict | None = None) -> str:
    """Have DGL's ``partition_graph`` write ``assignment`` (one part id per node), then add
    ``orig_nids.npy`` and ``sni_meta.json``; returns the config path."""
    graph_name = graph_name or data.name
    os.makedirs(out_dir, exist_ok=True)
    g = to_dgl_graph(data)
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if quiet:
            stack.enter_context(_silenced())
        stack.enter_context(fixed_assignment(assignment))
        orig_nids, _ = dgl.distributed.partition_graph(
            g, graph_name, num_parts, out_dir, num_hops=1, part_method="random",
            return_mapping=True)
    seconds = time.perf_counter() - start + (extra_meta or {}).get("assignment_seconds", 0.0)
    orig_nids = orig_nids.numpy()
    np.save(os.path.join(out_dir, "orig_nids.npy"), orig_nids)
    config_path = os.path.join(out_dir, f"{graph_name}.json")
    with open(config_path) as fh:
        config = json.load(fh)
    parts = np.empty(data.num_nodes, dtype=np.int64)
    for pid, (lo, hi) in enumerate(config["node_map"]["_N"]):
        parts[orig_nids[lo:hi]] = pid
    if not np.array_equal(parts, assignment):
        raise RuntimeError("DGL wrote a different assignment than the one given")
    config["part_method"] = method
    with open(config_path, "w") as fh:
        json.dump(config, fh, sort_keys=True, indent=4)
    meta = dict(dataset=data.name, dataset_meta=data.meta, num_nodes=data.num_nodes,
                num_edges=data.num_edges, num_classes=data.num_classes, feat_dim=data.feat_dim,
                num_parts=num_parts, method=method, seconds=seconds,
                num_train=int(data.train_idx.size), **cut_stats(data.src, data.dst, parts, num_parts))
    meta.update(extra_meta or {})  # e.g. the assignment's own time and iterations
    with open(os.path.join(out_dir, META_FILE), "w") as fh:
        json.dump(meta, fh, indent=1)
    return config_path


def read_meta(part_config: str) -> dict:
    """The ``sni_meta.json`` next to a partition config (empty if the partitions are foreign)."""
    path = os.path.join(os.path.dirname(os.path.abspath(part_config)), META_FILE)
    if not os.path.exists(path):
        return {}
    with open(path) as fh:
        return json.load(fh)


def load_orig_nids(part_config: str) -> np.ndarray:
    return np.load(os.path.join(os.path.dirname(os.path.abspath(part_config)), "orig_nids.npy"))
