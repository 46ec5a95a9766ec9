"""patches.initialize_hook: dgl.distributed.initialize runs the hooks around DGL's, then is DGL's again."""
import pytest

import dgl
import dgl.distributed as dgld
from dgl.distributed import dist_context
from patches import initialize_hook
from patches._dgl_version import UnsupportedDGLVersion


@pytest.fixture
def autoenable_kept():
    """With DGL_SNI=1 in this process the autoenable hooks are installed: set them aside
    for the test and put them back after everything else (monkeypatch included) is undone."""
    saved = initialize_hook.hooks()
    initialize_hook.uninstall()
    yield
    initialize_hook.uninstall()
    if saved is not None:
        initialize_hook.install(*saved)


@pytest.fixture
def original(autoenable_kept, monkeypatch):  # monkeypatch undoes its stand-ins after uninstall
    assert dgld.initialize is dist_context.initialize
    yield dgld.initialize
    initialize_hook.uninstall()


def _before():
    pass


def _after():
    pass


def test_install_twice_then_uninstall(original):
    initialize_hook.install(before=_before, after=_after)
    wrapped = dgld.initialize
    assert wrapped is not original and wrapped.__wrapped__ is original
    initialize_hook.install(before=_before, after=_after)
    assert dgld.initialize is wrapped
    with pytest.raises(RuntimeError, match="other hooks"):
        initialize_hook.install(before=_before)
    initialize_hook.uninstall()
    assert dgld.initialize is original and not initialize_hook.is_installed()
    initialize_hook.uninstall()
    assert dgld.initialize is original


def test_hooks_run_around_dgls_initialize(original, monkeypatch):
    order = []

    def dgl_initialize(ip_config, **kwargs):  # stands in for DGL's (which needs a cluster)
        order.append(("dgl", ip_config, kwargs))
        return "result"

    monkeypatch.setattr(dgld, "initialize", dgl_initialize)
    initialize_hook.install(before=lambda: order.append("before"), after=lambda: order.append("after"))
    assert dgld.initialize("ip.txt", net_type="socket") == "result"
    assert order == ["before", ("dgl", "ip.txt", {"net_type": "socket"}), "after"]
    initialize_hook.uninstall()
    assert dgld.initialize is dgl_initialize


def test_hooks_are_optional(original, monkeypatch):
    monkeypatch.setattr(dgld, "initialize", lambda *a: a)
    initialize_hook.install()
    assert dgld.initialize(1, 2) == (1, 2)


def test_another_dgl_is_refused(original, monkeypatch):
    monkeypatch.setattr(dgl, "__version__", "2.2.0")
    with pytest.raises(UnsupportedDGLVersion, match=r"patches\.initialize_hook.*DGL 2\.2\.0.*2\.1\.x"):
        initialize_hook.install(before=_before, after=_after)
    assert dgld.initialize is original
