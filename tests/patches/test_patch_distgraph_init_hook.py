"""patches.distgraph_init_hook: DistGraph.__init__ calls the hook after DGL's, then is DGL's again."""
import pytest

import dgl
from dgl.distributed import dist_graph
from patches import distgraph_init_hook
from patches._dgl_version import UnsupportedDGLVersion

DistGraph = dist_graph.DistGraph


@pytest.fixture
def original(monkeypatch):  # monkeypatch undoes its stand-ins after uninstall
    assert not distgraph_init_hook.is_installed()
    yield DistGraph.__dict__["__init__"]
    distgraph_init_hook.uninstall()


def test_install_twice_then_uninstall(original):
    seen = []
    distgraph_init_hook.install(seen.append)
    wrapped = DistGraph.__dict__["__init__"]
    assert wrapped is not original and wrapped.__wrapped__ is original
    distgraph_init_hook.install(seen.append)  # an equal bound method: the same hook
    assert DistGraph.__dict__["__init__"] is wrapped
    with pytest.raises(RuntimeError, match="another hook"):
        distgraph_init_hook.install(print)
    distgraph_init_hook.uninstall()
    assert DistGraph.__dict__["__init__"] is original and not distgraph_init_hook.is_installed()
    distgraph_init_hook.uninstall()
    assert DistGraph.__dict__["__init__"] is original


def test_hook_gets_the_graph_after_dgl_constructed_it(original, monkeypatch):
    order = []

    def dgl_init(self, graph_name, gpb=None):  # stands in for DGL's (which needs a cluster)
        order.append(("dgl", graph_name, gpb))
        self.graph_name = graph_name

    monkeypatch.setattr(DistGraph, "__init__", dgl_init)
    distgraph_init_hook.install(lambda g: order.append(("hook", g.graph_name)))
    g = DistGraph.__new__(DistGraph)
    DistGraph.__init__(g, "graph", gpb=3)
    assert order == [("dgl", "graph", 3), ("hook", "graph")]
    distgraph_init_hook.uninstall()
    assert DistGraph.__dict__["__init__"] is dgl_init


def test_another_dgl_is_refused(original, monkeypatch):
    monkeypatch.setattr(dgl, "__version__", "2.0.0")
    with pytest.raises(UnsupportedDGLVersion, match=r"patches\.distgraph_init_hook.*DGL 2\.0\.0.*2\.1\.x"):
        distgraph_init_hook.install(print)
    assert DistGraph.__dict__["__init__"] is original
