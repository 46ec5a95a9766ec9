"""patches.graphbolt_optional: the finder on sys.meta_path, once; version from metadata."""
import sys
from importlib import metadata

import pytest

from patches import graphbolt_optional
from patches._dgl_version import UnsupportedDGLVersion


@pytest.fixture
def restore_meta_path():
    saved = list(sys.meta_path)
    yield
    sys.meta_path[:] = saved


def test_install_twice_then_uninstall(restore_meta_path):
    graphbolt_optional.uninstall()
    before = list(sys.meta_path)
    assert not graphbolt_optional.is_installed()
    graphbolt_optional.install()
    assert sys.meta_path[0] is graphbolt_optional._FINDER and sys.meta_path[1:] == before
    graphbolt_optional.install()
    assert sys.meta_path.count(graphbolt_optional._FINDER) == 1 and len(sys.meta_path) == len(before) + 1
    graphbolt_optional.uninstall()
    assert sys.meta_path == before and all(a is b for a, b in zip(sys.meta_path, before))
    graphbolt_optional.uninstall()  # a no-op when not installed
    assert sys.meta_path == before


def test_dgl_shim_is_installed_on_import():
    import dgl.graphbolt as gb
    assert graphbolt_optional.is_installed()
    assert gb.GRAPHBOLT_AVAILABLE in (True, False)


def test_another_dgl_is_refused_from_package_metadata(restore_meta_path, monkeypatch):
    graphbolt_optional.uninstall()
    before = list(sys.meta_path)
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: "2.3.0" if name == "dgl" else real(name))
    with pytest.raises(UnsupportedDGLVersion, match=r"patches\.graphbolt_optional.*DGL 2\.3\.0.*2\.1\.x"):
        graphbolt_optional.install()
    assert sys.meta_path == before
