"""The switching-aware partitioner (storage_tier.partitioner): validity, determinism, quality."""
import json
import math
import os

import numpy as np
import pytest

import dgl_sni  # noqa: F401  (DGL shims first)
from dgl_sni.data import load_npz, synthetic
from storage_tier import _lp
from storage_tier.partitioner import (PartitionError, auto_levels, edges_to_csr, evaluate_partition,
                                      partition_from_edges, partition_subgraph,
                                      switching_partition)

from tests.helpers import shared_dataset


def cap_of(n, p, balance=1.1):
    return max(math.ceil(n / p), math.floor(balance * n / p + 1e-9))


@pytest.fixture(scope="module")
def small():
    return synthetic(num_nodes=3000, avg_degree=8, num_classes=5, feat_dim=4, seed=1)


@pytest.fixture(scope="module")
def planted():
    return synthetic(num_nodes=20000, homophily=0.9, num_classes=4, feat_dim=4, seed=0)


def csr(data):
    return edges_to_csr(data.src, data.dst, data.num_nodes)


def assert_valid(parts, n, p, balance=1.1):
    assert parts.dtype == np.int64 and parts.shape == (n,)
    assert parts.min() >= 0 and parts.max() < p
    sizes = np.bincount(parts, minlength=p)
    assert sizes.sum() == n
    assert sizes.max() <= cap_of(n, p, balance), (sizes, cap_of(n, p, balance))


# ----------------------------------------------------------------------------- validity

@pytest.mark.parametrize("levels", [0, "auto"])
@pytest.mark.parametrize("p", [1, 2, 5, 16])
def test_valid_assignment_within_cap(small, p, levels):
    parts, info = partition_from_edges(small.src, small.dst, small.num_nodes, p, levels=levels,
                                       return_info=True)
    assert_valid(parts, small.num_nodes, p)
    assert info.capacity == (cap_of(small.num_nodes, p) if p > 1 else small.num_nodes)
    assert info.part_sizes == np.bincount(parts, minlength=p).tolist()
    if p == 1:
        assert not parts.any() and info.edge_cut == 0.0


@pytest.mark.parametrize("balance", [1.0, 1.05, 1.5])
def test_balance_respected(small, balance):
    parts = partition_from_edges(small.src, small.dst, small.num_nodes, 7, balance=balance)
    assert_valid(parts, small.num_nodes, 7, balance)


def test_isolated_vertices_and_int32_csr():
    # a ring over 0..199 plus 100 isolated vertices, CSR with int32 indices
    n, ring = 300, np.arange(200)
    src = np.concatenate([ring, (ring + 1) % 200]).astype(np.int32)
    dst = np.concatenate([(ring + 1) % 200, ring]).astype(np.int32)
    indptr, indices = edges_to_csr(src, dst, n)
    assert indices.dtype == np.int32
    parts, info = switching_partition(indptr, indices, 4, return_info=True)
    assert_valid(parts, n, 4)
    assert info.edge_cut < 0.5 * info.start_edge_cut  # (LP's worst case: all degrees 2)


def test_grid_cut():
    k = 40
    idx = np.arange(k * k).reshape(k, k)
    a = np.concatenate([idx[:, :-1].ravel(), idx[:-1, :].ravel()])
    b = np.concatenate([idx[:, 1:].ravel(), idx[1:, :].ravel()])
    src, dst = np.concatenate([a, b]), np.concatenate([b, a])
    best = 2 * 2 * k / src.size  # two straight cuts
    auto = partition_from_edges(src, dst, k * k, 4, return_info=True)[1]
    plain = partition_from_edges(src, dst, k * k, 4, levels=0, return_info=True)[1]
    assert auto.edge_cut < 4 * best and plain.edge_cut < 8 * best


def test_history_and_info(small):
    indptr, indices = csr(small)
    parts, info = switching_partition(indptr, indices, 4, max_iter=30, return_info=True)
    hist = info.history
    assert hist.shape[1] == 3 and hist[0, 2] == -1  # starts with the random start
    assert hist[0, 0] == 4 << info.levels
    assert hist[-1, 0] == 4 and hist[-1, 1] == round(info.edge_cut * indices.size)
    assert info.iterations == int((hist[:, 2] >= 0).sum())
    assert len(info.cut_history) == len(hist) and info.seconds > 0
    assert info.edge_cut == pytest.approx(evaluate_partition(small.src, small.dst, parts, 4)["edge_cut"])
    json.dumps(info.to_dict())
    plain = switching_partition(indptr, indices, 4, max_iter=30, levels=0, return_info=True)[1]
    assert plain.levels == 0 and plain.iterations <= 30
    assert plain.history[0, 0] == 4 and plain.dstpart_dtype == "uint8"


def test_max_iter_zero_is_the_balanced_random_start(small):
    indptr, indices = csr(small)
    parts, info = switching_partition(indptr, indices, 6, max_iter=0, levels=0, return_info=True)
    sizes = np.bincount(parts, minlength=6)
    assert sizes.max() - sizes.min() <= 1
    assert info.iterations == 0 and info.edge_cut == info.start_edge_cut
    # a random start cuts about (1 - 1/p) of the edges
    assert info.start_edge_cut == pytest.approx(1 - 1 / 6, abs=0.03)


def test_auto_levels():
    assert auto_levels(2708, 4) == 8          # 1024 labels of >= 2 vertices
    assert auto_levels(1_000_000, 16) == 6    # 1024 labels
    assert auto_levels(100, 4) == 3           # 32 labels of >= 2 vertices
    assert auto_levels(10, 1) == 0 and auto_levels(5, 4) == 0


# ----------------------------------------------------------------------------- determinism

@pytest.mark.parametrize("levels", [0, "auto"])
def test_deterministic_per_seed(small, levels):
    indptr, indices = csr(small)
    a = switching_partition(indptr, indices, 5, seed=3, levels=levels)
    b = switching_partition(indptr, indices, 5, seed=3, levels=levels)
    c = switching_partition(indptr, indices, 5, seed=4, levels=levels)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_restarts_keep_the_best(small):
    indptr, indices = csr(small)
    cuts = [switching_partition(indptr, indices, 4, seed=s, return_info=True)[1].edge_cut
            for s in (5, 6, 7)]
    parts, info = switching_partition(indptr, indices, 4, seed=5, restarts=3, return_info=True)
    assert info.restart_cuts == pytest.approx(cuts)
    assert info.edge_cut == min(cuts) and info.seed == 5 + int(np.argmin(cuts))
    np.testing.assert_array_equal(parts, switching_partition(indptr, indices, 4, seed=info.seed))
    with pytest.raises(PartitionError, match="restarts"):
        switching_partition(indptr, indices, 4, restarts=0)


# ----------------------------------------------------------------------------- quality

def test_planted_partition_found(planted):
    random_cut = partition_from_edges(planted.src, planted.dst, planted.num_nodes, 4, max_iter=0,
                                      levels=0, return_info=True)[1].edge_cut
    planted_cut = float((planted.labels[planted.src] != planted.labels[planted.dst]).mean())
    parts, info = partition_from_edges(planted.src, planted.dst, planted.num_nodes, 4, return_info=True)
    assert_valid(parts, planted.num_nodes, 4)
    assert info.edge_cut < 0.5 * random_cut
    assert info.edge_cut < 1.1 * planted_cut  # the planted split itself (~0.075)
    # and the plain single-level algorithm, from any seed
    for seed in (0, 1):
        plain = partition_from_edges(planted.src, planted.dst, planted.num_nodes, 4, levels=0,
                                     seed=seed, return_info=True)[1]
        assert plain.edge_cut < 0.5 * random_cut


@pytest.mark.parametrize("levels", [0, "auto"])
def test_never_worse_than_random_start(levels):
    # graphs with little (Erdos-Renyi) or no structure to find: a clique
    rng = np.random.default_rng(0)
    n = 2000
    a, b = rng.integers(0, n, 12000), rng.integers(0, n, 12000)
    keep = a != b
    er = (np.concatenate([a[keep], b[keep]]), np.concatenate([b[keep], a[keep]]))
    k = np.arange(40)
    clique = (np.repeat(k, 40), np.tile(k, 40))
    clique = tuple(x[clique[0] != clique[1]] for x in clique)
    for (src, dst), nn in ((er, n), (clique, 40)):
        for p in (2, 8):
            parts, info = partition_from_edges(src, dst, nn, p, levels=levels, return_info=True)
            assert_valid(parts, nn, p)
            assert info.edge_cut <= info.start_edge_cut + 1e-12
            stats = evaluate_partition(src, dst, parts, p)
            assert stats["edge_cut"] == pytest.approx(info.edge_cut)


def test_init_refines_and_is_repaired(small):
    indptr, indices = csr(small)
    n = small.num_nodes
    rng = np.random.default_rng(0)
    init = rng.integers(0, 4, n)
    start_cut = evaluate_partition(small.src, small.dst, init, 4)["edge_cut"]
    parts, info = switching_partition(indptr, indices, 4, init=init, return_info=True)
    assert info.levels == 0 and info.edge_cut <= start_cut
    assert_valid(parts, n, 4)
    # an init far over the cap is brought within it
    lopsided = np.zeros(n, dtype=np.int64)
    lopsided[: n // 10] = 1
    parts = switching_partition(indptr, indices, 4, init=lopsided)
    assert_valid(parts, n, 4)


# ----------------------------------------------------------------------------- CSR building

def test_edges_to_csr_matches_scipy_and_shares_sorted_dst(small):
    import scipy.sparse as sp

    n = small.num_nodes
    indptr, indices = edges_to_csr(small.src, small.dst, n)
    assert indices is small.dst  # sorted src: no copy
    rng = np.random.default_rng(0)
    perm = rng.permutation(small.num_edges)
    src, dst = small.src[perm], small.dst[perm]
    ip2, ix2 = edges_to_csr(src, dst, n)
    assert ix2.dtype == np.int32
    ref = sp.csr_matrix((np.ones(src.size), (src, dst)), shape=(n, n))
    np.testing.assert_array_equal(ip2, ref.indptr)
    for v in rng.integers(0, n, 50):
        np.testing.assert_array_equal(np.sort(ix2[ip2[v]:ip2[v + 1]]), ref.indices[ref.indptr[v]:ref.indptr[v + 1]])
    # symmetrize: one direction in, both out
    half = small.src < small.dst
    ip3, ix3 = edges_to_csr(small.src[half], small.dst[half], n, symmetrize=True)
    np.testing.assert_array_equal(ip3, indptr)


def test_partition_subgraph(small):
    nodes = np.arange(small.num_nodes)[::3][::-1].copy()  # unsorted subset
    parts = partition_subgraph(small.src, small.dst, nodes, 3)
    assert_valid(parts, nodes.size, 3)
    with pytest.raises(PartitionError, match="duplicate"):
        partition_subgraph(small.src, small.dst, np.array([1, 1, 2]), 2)


# ----------------------------------------------------------------------------- errors

def test_errors():
    indptr = np.array([0, 1, 2, 3], dtype=np.int64)
    indices = np.array([1, 2, 0], dtype=np.int64)
    with pytest.raises(PartitionError, match="num_parts must be at least 1"):
        switching_partition(indptr, indices, 0)
    with pytest.raises(PartitionError, match="cannot split 3 nodes into 4 parts"):
        switching_partition(indptr, indices, 4)
    with pytest.raises(PartitionError, match="balance must be at least 1.0"):
        switching_partition(indptr, indices, 2, balance=0.9)
    with pytest.raises(PartitionError, match="num_parts must be an integer"):
        switching_partition(indptr, indices, 2.5)
    with pytest.raises(PartitionError, match="patience must be at least 1"):
        switching_partition(indptr, indices, 2, patience=0)
    with pytest.raises(PartitionError, match="chunks"):
        switching_partition(indptr, indices, 2, chunks=0)
    with pytest.raises(PartitionError, match="empty graph"):
        switching_partition(np.array([0]), np.array([], dtype=np.int64), 1)
    with pytest.raises(PartitionError, match=r"indptr\[0\] must be 0"):
        switching_partition(np.array([1, 1, 2, 3]), indices, 2)
    with pytest.raises(PartitionError, match="non-decreasing .* after row 1"):
        switching_partition(np.array([0, 2, 1, 3]), indices, 2)
    with pytest.raises(PartitionError, match=r"indptr\[-1\] must equal len\(indices\)"):
        switching_partition(np.array([0, 1, 2, 2]), indices, 2)
    with pytest.raises(PartitionError, match=r"indices\[1\] = 7 is not a vertex id in \[0, 3\)"):
        switching_partition(indptr, np.array([1, 7, 0]), 2)
    with pytest.raises(PartitionError, match="must hold integers"):
        switching_partition(indptr, np.array([1.0, 2.0, 0.0]), 2)
    with pytest.raises(PartitionError, match="must be 1-D"):
        switching_partition(indptr.reshape(2, 2), indices, 2)
    with pytest.raises(PartitionError, match="outside"):
        switching_partition(indptr, indices, 2, init=np.array([0, 1, 2]))
    with pytest.raises(PartitionError, match="src has 2 entries but dst has 1"):
        partition_from_edges([0, 1], [1], 3, 2)
    with pytest.raises(PartitionError, match=r"edge 1 \(1 -> 5\) has a node id outside \[0, 3\)"):
        partition_from_edges([0, 1], [1, 5], 3, 2)
    with pytest.raises(PartitionError, match="levels"):
        switching_partition(indptr, indices, 2, levels=-1)
    assert isinstance(PartitionError("x"), ValueError)


def test_low_level_guards():
    with pytest.raises(TypeError, match="C-contiguous"):
        _lp.run(np.arange(8, dtype=np.int64)[::2], np.array([1, 2, 0]), 2)
    with pytest.raises(TypeError, match="dtype int64"):
        _lp.run(np.array([0, 1, 2, 3], dtype=np.int32), np.array([1, 2, 0]), 2)
    assert _lp.part_dtype(256) == np.uint8 and _lp.part_dtype(257) == np.uint16
    assert _lp.part_dtype(70000) == np.int32


# ----------------------------------------------------------------------------- real graphs

@pytest.mark.parametrize("name", ["cora", "citeseer", "pubmed"])
def test_real_graph_balanced_and_cut(name):
    data = load_npz(shared_dataset(name))
    parts, info = partition_from_edges(data.src, data.dst, data.num_nodes, 4, return_info=True)
    assert_valid(parts, data.num_nodes, 4)
    assert info.balance <= 1.1 + 1e-9
    stats = evaluate_partition(data.src, data.dst, parts, 4)
    assert stats["edge_cut"] == pytest.approx(info.edge_cut)
    assert stats["edge_cut"] < 0.25 * info.start_edge_cut  # random: ~0.75
    assert stats["alpha"] < 1.5


# ----------------------------------------------------------------------------- DGL format

def test_switching_partitions_in_dgl_format(tmp_path):
    from dgl_sni.partition import load_orig_nids, partition, read_meta

    data = synthetic(num_nodes=1200, avg_degree=6, num_classes=3, feat_dim=8, seed=2)
    config = partition(data, 3, str(tmp_path / "parts"), method="switching", graph_name="g")
    assert os.path.exists(config)
    with open(config) as fh:
        cfg = json.load(fh)
    assert cfg["num_parts"] == 3 and cfg["part_method"] == "switching"
    meta = read_meta(config)
    assert meta["method"] == "switching" and meta["num_parts"] == 3
    orig = load_orig_nids(config)
    parts = np.empty(data.num_nodes, dtype=np.int64)
    for pid, (lo, hi) in enumerate(cfg["node_map"]["_N"]):
        parts[orig[lo:hi]] = pid
    assert_valid(parts, data.num_nodes, 3)
    assert meta["edge_cut"] == pytest.approx(evaluate_partition(data.src, data.dst, parts, 3)["edge_cut"])
    for pid in range(3):
        assert os.path.exists(tmp_path / "parts" / f"part{pid}" / "graph.dgl")
