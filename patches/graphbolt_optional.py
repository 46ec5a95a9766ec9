"""Import hook that lets ``dgl.graphbolt`` import without its C++ library.

DGL 2.1.0's ``graphbolt/__init__.py`` ends with ``load_graphbolt()``, which raises
``FileNotFoundError`` when no ``libgraphbolt_pytorch_<torch version>.so`` exists
(torch 2.13 has none). The hook wraps that module's loader: the module body runs
unchanged, and only that specific failure is caught, leaving every Python name of
graphbolt defined and ``dgl.graphbolt.GRAPHBOLT_AVAILABLE = False``. Any other
import error propagates.

Installed by :func:`patches.apply` before ``import dgl``, so the DGL version is read
from the package metadata, not from ``dgl.__version__``.
"""
import importlib.abc
import importlib.machinery
from importlib import metadata

from . import _meta_path
from ._dgl_version import WRITTEN_FOR, check

TARGET = "dgl.graphbolt"
DGL_VERSIONS = WRITTEN_FOR


class _TolerantLoader(importlib.abc.Loader):
    def __init__(self, inner):
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        try:
            self._inner.exec_module(module)
            module.GRAPHBOLT_AVAILABLE = True
        except (FileNotFoundError, ImportError) as err:
            if "graphbolt" not in str(err).lower():
                raise
            module.GRAPHBOLT_AVAILABLE = False
            module.GRAPHBOLT_LOAD_ERROR = str(err)


class _GraphboltFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        return _meta_path.wrapped_spec(fullname, path, TARGET, _TolerantLoader)


_FINDER = _GraphboltFinder()


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (a no-op when it is there); run by
    :func:`patches.apply` before ``import dgl``."""
    check(__name__, metadata.version("dgl"), DGL_VERSIONS)
    _meta_path.insert_first(_FINDER)


def uninstall() -> None:
    """Take the finder off ``sys.meta_path``; an already imported ``dgl.graphbolt`` stays."""
    _meta_path.remove(_FINDER)


def is_installed() -> bool:
    """Whether the finder is on ``sys.meta_path``."""
    return _meta_path.present(_FINDER)
