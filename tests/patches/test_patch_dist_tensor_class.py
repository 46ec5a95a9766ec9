"""patches.dist_tensor_class: both DistTensor names become the subclass, then DGL's again."""
import pytest

import dgl
import dgl.distributed as dgld
from dgl.distributed import dist_graph, dist_tensor
from patches import dist_tensor_class
from patches._dgl_version import UnsupportedDGLVersion


class _Sub(dist_tensor.DistTensor):
    pass


class _Other(dist_tensor.DistTensor):
    pass


@pytest.fixture
def original(monkeypatch):  # monkeypatch undoes its stand-ins after uninstall
    assert not dist_tensor_class.is_installed()
    assert dgld.DistTensor is dist_tensor.DistTensor and dist_graph.DistTensor is dist_tensor.DistTensor
    yield dist_tensor.DistTensor
    dist_tensor_class.uninstall()


def test_install_twice_then_uninstall(original):
    dist_tensor_class.install(_Sub)
    assert dgld.DistTensor is _Sub and dist_graph.DistTensor is _Sub
    assert dist_tensor.DistTensor is original  # the base class stays DGL's
    dist_tensor_class.install(_Sub)
    assert dgld.DistTensor is _Sub and dist_graph.DistTensor is _Sub
    with pytest.raises(RuntimeError, match="_Sub"):
        dist_tensor_class.install(_Other)
    assert dgld.DistTensor is _Sub
    dist_tensor_class.uninstall()
    assert dgld.DistTensor is original and dist_graph.DistTensor is original
    assert not dist_tensor_class.is_installed()
    dist_tensor_class.uninstall()
    assert dgld.DistTensor is original and dist_graph.DistTensor is original


def test_only_a_subclass_is_accepted(original):
    with pytest.raises(TypeError, match="not a subclass"):
        dist_tensor_class.install(dict)
    assert dgld.DistTensor is original and not dist_tensor_class.is_installed()


def test_another_dgl_is_refused(original, monkeypatch):
    monkeypatch.setattr(dgl, "__version__", "2.4.0")
    with pytest.raises(UnsupportedDGLVersion, match=r"patches\.dist_tensor_class.*DGL 2\.4\.0.*2\.1\.x"):
        dist_tensor_class.install(_Sub)
    assert dgld.DistTensor is original and dist_graph.DistTensor is original
