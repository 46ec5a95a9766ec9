"""Import hook that lets ``dgl.graphbolt`` import without its C++ library.

DGL 2.1.0's ``graphbolt/__init__.py`` ends with ``load_graphbolt()``, which raises
``FileNotFoundError`` when no ``libgraphbolt_pytorch_<torch version>.so`` exists
(torch 2.13 has none). The hook wraps that module's loader: the module body runs
unchanged, and only that specific failure is caught, leaving every Python name of
graphbolt defined and ``dgl.graphbolt.GRAPHBOLT_AVAILABLE = False``. Any other
import error propagates.
"""
import importlib.abc
import importlib.machinery
import sys

TARGET = "dgl.graphbolt"


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
        if fullname != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        spec.loader = _TolerantLoader(spec.loader)
        return spec


def install():
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, _GraphboltFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _GraphboltFinder())
