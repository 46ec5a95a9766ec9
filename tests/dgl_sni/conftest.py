"""Fixtures shared by the dgl_sni tests."""
import pytest

from dgl_sni.data import synthetic


@pytest.fixture(scope="module")
def data():
    """A small synthetic graph (400 nodes) the model tests partition."""
    return synthetic(num_nodes=400, avg_degree=6, num_classes=4, feat_dim=12, seed=2)
