"""Partition a :class:`~dgl_sni.data.GraphData` into DGL's partition format.

Uses DGL's own ``partition_graph`` (METIS or random), with one halo hop so every
partition holds all in-edges of its nodes. Besides the dataset's arrays the
partitions carry the global degrees (``in_deg``, ``out_deg``) that GCN's
normalisation needs for halo nodes, and ``sni_meta.json`` with the dataset facts
and the partition quality (edge cut, expansion ratio); ``orig_nids.npy`` maps DGL's
reshuffled node ids back to the dataset's ids.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import time

import numpy as np
import torch

import dgl_sni  # noqa: F401
import dgl

from patches.partition_assignment import fixed_assignment

from .data import DatasetError, GraphData

METHODS = ("metis", "random", "switching")
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


def cut_stats(src: np.ndarray, dst: np.ndarray, parts: np.ndarray, num_parts: int) -> dict:
    """Edge cut (fraction of edges between parts) and expansion ratio alpha.

    alpha = (rows a part needs: its own nodes plus distinct remote in-neighbours) /
    (rows it owns), averaged over parts weighted by owned rows, i.e. total needed rows
    over total nodes.
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


def partition(data: GraphData, num_parts: int, out_dir: str, method: str = "metis",
              graph_name: str | None = None, quiet: bool = True) -> str:
    """Write ``num_parts`` partitions of ``data`` to ``out_dir``; return the config JSON path.

    ``metis`` and ``random`` are DGL's own; ``switching`` is the label-propagation
    partitioner of :mod:`storage_tier.partitioner` (its assignment, DGL's format).
    """
    if method not in METHODS:
        raise ValueError(f"unknown partition method '{method}': choose one of {', '.join(METHODS)}")
    if num_parts < 1:
        raise ValueError(f"number of partitions must be at least 1, got {num_parts}")
    if num_parts > data.num_nodes:
        raise DatasetError(
            f"cannot split {data.num_nodes} nodes into {num_parts} partitions: "
            "--workers must not exceed the number of nodes")
    if method == "switching":
        from storage_tier.partitioner import partition_to_dgl
        return partition_to_dgl(data, num_parts, out_dir, graph_name, quiet)
    return write_partitions(data, num_parts, out_dir, method, graph_name, quiet)


def write_partitions(data: GraphData, num_parts: int, out_dir: str, method: str,
                     graph_name: str | None = None, quiet: bool = True,
                     assignment: np.ndarray | None = None, extra_meta: dict | None = None) -> str:
    """Run DGL's ``partition_graph`` (METIS, random, or the given ``assignment``) and add
    ``orig_nids.npy`` and ``sni_meta.json``; returns the config path."""
    graph_name = graph_name or data.name
    os.makedirs(out_dir, exist_ok=True)
    g = to_dgl_graph(data)
    dgl_method = "random" if assignment is not None else method
    start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        if quiet:
            stack.enter_context(_silenced())
        if assignment is not None:
            stack.enter_context(fixed_assignment(assignment))
        orig_nids, _ = dgl.distributed.partition_graph(
            g, graph_name, num_parts, out_dir, num_hops=1, part_method=dgl_method,
            balance_edges=dgl_method == "metis", return_mapping=True)
    seconds = time.perf_counter() - start
    orig_nids = orig_nids.numpy()
    np.save(os.path.join(out_dir, "orig_nids.npy"), orig_nids)
    config_path = os.path.join(out_dir, f"{graph_name}.json")
    with open(config_path) as fh:
        config = json.load(fh)
    parts = np.empty(data.num_nodes, dtype=np.int64)
    for pid, (lo, hi) in enumerate(config["node_map"]["_N"]):
        parts[orig_nids[lo:hi]] = pid
    if assignment is not None:
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
