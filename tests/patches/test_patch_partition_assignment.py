"""patches.partition_assignment: random_choice returns the given assignment, bit for bit."""
import numpy as np
import pytest
import torch

import dgl
from dgl.distributed import partition as dist_partition
from patches import partition_assignment
from patches._dgl_version import UnsupportedDGLVersion


@pytest.fixture
def original(monkeypatch):  # monkeypatch undoes its stand-ins after uninstall
    assert not partition_assignment.is_installed()
    yield dist_partition.random_choice
    partition_assignment.uninstall()


def test_install_twice_then_uninstall(original):
    parts = np.array([1, 0, 1, 1], dtype=np.int64)
    partition_assignment.install(parts)
    patched = dist_partition.random_choice
    assert patched is not original
    partition_assignment.install(parts)
    assert dist_partition.random_choice is patched
    with pytest.raises(RuntimeError, match="another assignment"):
        partition_assignment.install(parts.copy())
    partition_assignment.uninstall()
    assert dist_partition.random_choice is original and not partition_assignment.is_installed()
    partition_assignment.uninstall()
    assert dist_partition.random_choice is original


@pytest.mark.parametrize("parts", [
    np.array([1, 0, 2, 1, 0], dtype=np.int64),
    np.array([1, 0, 2, 1, 0], dtype=np.int32),
    np.arange(20, dtype=np.int64)[::4] % 3,  # contiguous result of an op
    np.arange(10, dtype=np.int64)[::2],  # a strided view
    np.zeros(0, dtype=np.int64),
])
def test_assignment_is_the_int64_tensor_numpy_gave(original, parts):
    expected = torch.from_numpy(np.ascontiguousarray(parts, dtype=np.int64))  # before: numpy
    with partition_assignment.fixed_assignment(parts):
        got = dist_partition.random_choice(3, parts.shape[0])
    assert dist_partition.random_choice is original
    assert got.dtype == torch.int64 and got.is_contiguous() and got.shape == expected.shape
    assert torch.equal(got, expected)
    shares = np.shares_memory(expected.numpy(), parts)
    assert np.shares_memory(got.numpy(), parts) == shares


def test_wrong_node_count_is_reported(original):
    with partition_assignment.fixed_assignment(np.zeros(4, dtype=np.int64)):
        with pytest.raises(RuntimeError, match="asked for 5 nodes, the assignment has 4"):
            dist_partition.random_choice(2, 5)


def test_fixed_assignment_restores_on_error(original):
    with pytest.raises(KeyError):
        with partition_assignment.fixed_assignment(np.zeros(3, dtype=np.int64)):
            raise KeyError("boom")
    assert dist_partition.random_choice is original


def test_partition_graph_writes_the_assignment(original, tmp_path):
    g = dgl.graph((torch.tensor([0, 1, 2, 3, 4, 5]), torch.tensor([1, 2, 3, 4, 5, 0])))
    parts = np.array([0, 0, 1, 1, 0, 1], dtype=np.int64)
    with partition_assignment.fixed_assignment(parts):
        orig_nids, _ = dgl.distributed.partition_graph(g, "g", 2, str(tmp_path), num_hops=1,
                                                       part_method="random", return_mapping=True)
    assert dist_partition.random_choice is original
    written = np.empty(6, dtype=np.int64)
    written[orig_nids.numpy()] = np.repeat([0, 1], [3, 3])
    assert np.array_equal(written, parts)


def test_another_dgl_is_refused(original, monkeypatch):
    monkeypatch.setattr(dgl, "__version__", "1.1.3")
    with pytest.raises(UnsupportedDGLVersion, match=r"patches\.partition_assignment.*DGL 1\.1\.3.*2\.1\.x"):
        partition_assignment.install(np.zeros(2, dtype=np.int64))
    assert dist_partition.random_choice is original
