"""Datasets: the synthetic generator, the npz and DGL loaders, and their error messages."""
import numpy as np
import pytest
import torch

from dgl_sni.data import (DatasetError, GraphData, load_dataset, load_dgl, load_npz, save_npz,
                          synthetic)
from storage_tier.partitioner import cut_stats

from tests.helpers import shared_dataset


def test_synthetic_is_deterministic_and_well_formed():
    a = synthetic(num_nodes=3000, avg_degree=12, num_classes=6, feat_dim=16, seed=7)
    b = synthetic(num_nodes=3000, avg_degree=12, num_classes=6, feat_dim=16, seed=7)
    c = synthetic(num_nodes=3000, avg_degree=12, num_classes=6, feat_dim=16, seed=8)
    assert np.array_equal(a.src, b.src) and np.array_equal(a.features, b.features)
    assert not np.array_equal(a.src, c.src)
    # symmetric, no self loops, no duplicates
    fwd = set(zip(a.src.tolist(), a.dst.tolist()))
    assert len(fwd) == a.num_edges
    assert all((d, s) in fwd for s, d in fwd)
    assert (a.src != a.dst).all()
    assert abs(a.num_edges / a.num_nodes - 12) < 1.0
    # disjoint seeded splits
    splits = [set(a.train_idx), set(a.val_idx), set(a.test_idx)]
    assert not (splits[0] & splits[1]) and not (splits[1] & splits[2])


def test_synthetic_degrees_are_heavy_tailed_and_homophilous():
    d = synthetic(num_nodes=20000, avg_degree=10, homophily=0.6, seed=1)
    deg = np.bincount(d.src, minlength=d.num_nodes)
    assert deg.max() > 8 * deg.mean()  # power law: hubs far above the mean
    same = (d.labels[d.src] == d.labels[d.dst]).mean()
    assert 0.55 < same < 0.75  # homophily 0.6 plus chance agreement of the other 40%


def test_synthetic_scales_to_a_million_nodes_in_linear_memory():
    d = synthetic(num_nodes=1_000_000, avg_degree=4, feat_dim=4, seed=0)
    assert d.num_nodes == 1_000_000
    assert 3.5e6 < d.num_edges < 4.1e6


def test_npz_roundtrip(tmp_path):
    d = synthetic(num_nodes=500, seed=2)
    save_npz(d, tmp_path / "g.npz")
    e = load_npz(str(tmp_path / "g.npz"))
    assert np.array_equal(d.src, e.src) and np.array_equal(d.labels, e.labels)
    assert e.features.dtype == np.float32


def test_shared_cora_loads():
    d = load_npz(shared_dataset("cora"))
    assert (d.num_nodes, d.num_edges, d.feat_dim, d.num_classes) == (2708, 10556, 1433, 7)
    assert (d.train_idx.size, d.val_idx.size, d.test_idx.size) == (140, 500, 1000)


def test_shared_pubmed_loads_with_its_published_sizes():
    d = load_npz(shared_dataset("pubmed"))  # 19,717 nodes, 44,324 undirected edges, 500 TF-IDF features
    assert (d.num_nodes, d.num_edges, d.feat_dim, d.num_classes) == (19717, 88648, 500, 3)
    assert (d.train_idx.size, d.val_idx.size, d.test_idx.size) == (60, 500, 1000)
    assert (d.features >= 0).all() and not np.isin(d.features, (0.0, 1.0)).all()  # TF-IDF, not bag-of-words


def test_citeseer_unlabelled_nodes_are_kept_out_of_splits():
    d = load_npz(shared_dataset("citeseer"))
    assert (d.labels == -1).sum() == 15
    assert (d.labels[d.test_idx] >= 0).all()


def _write(tmp_path, **arrays):
    base = dict(src=np.array([0, 1, 1, 2]), dst=np.array([1, 0, 2, 1]),
                features=np.zeros((3, 4), np.float32), labels=np.array([0, 1, 0]),
                train_idx=np.array([0]), val_idx=np.array([1]), test_idx=np.array([2]))
    base.update(arrays)
    base = {k: v for k, v in base.items() if v is not None}
    path = tmp_path / "bad.npz"
    np.savez(path, **base)
    return str(path)


@pytest.mark.parametrize("change, message", [
    (dict(features=None), "lacks required array(s) features"),
    (dict(dst=np.array([1, 0, 2, 9])), "'dst' has node ids outside [0, 3)"),
    (dict(src=np.array([0, 1, 1])), "'src' has 3 entries but 'dst' has 4"),
    (dict(labels=np.array([0, 1])), "'labels' must have shape [num_nodes], one per row of 'features' (3), got (2,)"),
    (dict(features=np.zeros((2, 4), np.float32)), "one per row of 'features' (2), got (3,)"),  # not the edges
    (dict(features=np.zeros(3, np.float32)), "'features' in"),
    (dict(src=np.array([0.0, 1, 1, 2])), "'src' must hold integer node ids"),
    (dict(test_idx=np.array([], dtype=np.int64)), "'test_idx' is empty"),
    (dict(labels=np.array([0, 1, -1])), "'test_idx' contains unlabelled nodes"),
    (dict(features=np.full((3, 4), np.nan, np.float32)), "NaN"),
])
def test_malformed_npz_is_rejected_with_the_reason(tmp_path, change, message):
    with pytest.raises(DatasetError) as err:
        load_npz(_write(tmp_path, **change))
    assert message in str(err.value)


def test_not_an_npz_file(tmp_path):
    path = tmp_path / "junk.npz"
    path.write_text("not a zip")
    with pytest.raises(DatasetError, match="not an npz file"):
        load_npz(str(path))


def test_unknown_dataset_name():
    with pytest.raises(DatasetError, match="unknown dataset 'ogbn-foo'"):
        load_dataset("ogbn-foo")


def test_dgl_binary_loader(tmp_path):
    import dgl
    d = synthetic(num_nodes=300, seed=4)
    g = dgl.graph((torch.from_numpy(d.src), torch.from_numpy(d.dst)), num_nodes=d.num_nodes)
    g.ndata["feat"] = torch.from_numpy(d.features)
    g.ndata["label"] = torch.from_numpy(d.labels)
    for key, mask in d.masks().items():
        g.ndata[key] = torch.from_numpy(mask)
    dgl.save_graphs(str(tmp_path / "g.bin"), [g])
    e = load_dataset(str(tmp_path / "g.bin"))
    assert np.array_equal(np.sort(e.src * 300 + e.dst), np.sort(d.src * 300 + d.dst))
    assert np.array_equal(e.test_idx, d.test_idx)
    del g.ndata["train_mask"]
    dgl.save_graphs(str(tmp_path / "h.bin"), [g])
    with pytest.raises(DatasetError, match="no ndata 'train_mask'"):
        load_dgl(str(tmp_path / "h.bin"))


def test_cut_stats_counts_halo_rows():
    # path 0-1-2-3 split {0,1} | {2,3}: one undirected edge crosses
    src, dst = np.array([0, 1, 1, 2, 2, 3]), np.array([1, 0, 2, 1, 3, 2])
    s = cut_stats(src, dst, np.array([0, 0, 1, 1]), 2)
    assert s["cut_edges"] == 2 and s["halo_nodes"] == [1, 1]
    assert s["alpha"] == pytest.approx(6 / 4)
