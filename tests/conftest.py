"""Shared fixtures: small graphs on disk. The helpers the tests import are in tests/helpers.py."""
import pytest

import dgl_sni  # noqa: F401  (DGL shims first)
from dgl_sni.data import save_npz, synthetic


@pytest.fixture(scope="session")
def small_graph_npz(tmp_path_factory):
    """A 1500-node synthetic graph saved as npz (shared by the cluster tests)."""
    path = tmp_path_factory.mktemp("data") / "small.npz"
    save_npz(synthetic(num_nodes=1500, avg_degree=8, num_classes=5, feat_dim=24, seed=3), str(path))
    return str(path)
