"""Boundary importance sampling: which halo rows the predictor refines."""
from __future__ import annotations

import numpy as np


def importance_mask(edge_counts: np.ndarray, ids: np.ndarray, ratio: float) -> np.ndarray:
    """Boolean mask over rows: the top ``ratio`` fraction by ``edge_counts``.

    ``edge_counts[i]`` is the number of edges from halo row ``i`` into the local
    partition. Ties are broken by the smaller global id (``ids``), so every run picks
    the same rows. ``ceil(ratio * n)`` rows are selected.
    """
    edge_counts = np.asarray(edge_counts)
    n = edge_counts.shape[0]
    if ids.shape[0] != n:
        raise ValueError(f"{n} edge counts but {ids.shape[0]} ids")
    k = int(np.ceil(ratio * n - 1e-9))
    mask = np.zeros(n, dtype=bool)
    if k > 0:
        order = np.lexsort((ids, -edge_counts.astype(np.int64)))  # most edges first, then id
        mask[order[:k]] = True
    return mask


def halo_edge_counts(block_src: np.ndarray, num_owned: int, num_src: int) -> np.ndarray:
    """Edges from each halo row (block rows ``num_owned..num_src-1``) into owned rows."""
    counts = np.bincount(np.asarray(block_src), minlength=num_src)
    return counts[num_owned:]
