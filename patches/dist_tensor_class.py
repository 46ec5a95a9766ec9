"""Make ``dgl.distributed.DistTensor`` (and what ``DistGraph`` constructs) a subclass.

``DistGraph`` builds its node/edge data as ``dist_graph.DistTensor(...)``, and scripts
write ``dgl.distributed.DistTensor(...)``; both names are looked up at call time, so
rebinding them to a subclass of DGL's ``DistTensor`` makes every tensor created
afterwards an instance of it. ``dgl.distributed.dist_tensor.DistTensor`` stays DGL's
class (the subclass derives from it).
"""
from ._dgl_version import WRITTEN_FOR, check

DGL_VERSIONS = WRITTEN_FOR
_originals = None  # (dgl.distributed.DistTensor, dist_graph.DistTensor) while installed
_installed = None  # the subclass now in their place


def install(cls) -> None:
    """Bind ``dgl.distributed.DistTensor`` and ``dist_graph.DistTensor`` to ``cls``, a
    subclass of DGL's ``DistTensor``. Installing the same class again is a no-op;
    another class needs :func:`uninstall` first. Called by ``dgl_sni.sni.kvstore.enable``."""
    global _originals, _installed
    import dgl
    import dgl.distributed as dgld
    from dgl.distributed import dist_graph, dist_tensor
    check(__name__, dgl.__version__, DGL_VERSIONS)
    if _installed is not None:
        if cls is _installed:
            return
        raise RuntimeError(f"patch {__name__!r} is installed with {_installed.__qualname__}; "
                           f"uninstall() before installing {cls.__qualname__}")
    if not issubclass(cls, dist_tensor.DistTensor):
        raise TypeError(f"patch {__name__!r}: {cls!r} is not a subclass of dgl.distributed.DistTensor")
    _originals = (dgld.DistTensor, dist_graph.DistTensor)
    _installed = cls
    dist_graph.DistTensor = cls  # what DistGraph constructs
    dgld.DistTensor = cls


def uninstall() -> None:
    """Put DGL's ``DistTensor`` back under both names (a no-op when not installed)."""
    global _originals, _installed
    if _installed is None:
        return
    import dgl.distributed as dgld
    from dgl.distributed import dist_graph
    dgld.DistTensor, dist_graph.DistTensor = _originals
    _originals = _installed = None


def is_installed() -> bool:
    """Whether a subclass stands in for ``DistTensor``."""
    return _installed is not None
