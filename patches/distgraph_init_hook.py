"""Call a hook with every ``DistGraph`` once its constructor has finished.

Wraps ``dgl.distributed.dist_graph.DistGraph.__init__``: DGL's constructor runs
unchanged, then ``hook(graph)``, so code that never sees the script's graph object
(the SNI KVClient, which weighs halo rows by their edges) can find it.
"""
import functools

from ._dgl_version import WRITTEN_FOR, check

DGL_VERSIONS = WRITTEN_FOR
_original = None  # DGL's DistGraph.__init__ while installed
_hook = None


def install(hook) -> None:
    """Wrap ``DistGraph.__init__`` to call ``hook(graph)`` after it. Installing the same
    hook again is a no-op; another hook needs :func:`uninstall` first. Called by
    ``dgl_sni.sni.kvstore.enable``."""
    global _original, _hook
    import dgl
    from dgl.distributed import dist_graph
    check(__name__, dgl.__version__, DGL_VERSIONS)
    if _original is not None:
        if hook == _hook:
            return
        raise RuntimeError(f"patch {__name__!r} is installed with another hook; uninstall() first")
    original = dist_graph.DistGraph.__dict__["__init__"]

    @functools.wraps(original)
    def __init__(self, *args, **kwargs):
        original(self, *args, **kwargs)
        hook(self)

    _original, _hook = original, hook
    dist_graph.DistGraph.__init__ = __init__


def uninstall() -> None:
    """Put DGL's ``DistGraph.__init__`` back (a no-op when not installed)."""
    global _original, _hook
    if _original is None:
        return
    from dgl.distributed import dist_graph
    dist_graph.DistGraph.__init__ = _original
    _original = _hook = None


def is_installed() -> bool:
    """Whether ``DistGraph.__init__`` calls a hook."""
    return _original is not None
