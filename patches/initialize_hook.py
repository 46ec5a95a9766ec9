"""Run hooks around ``dgl.distributed.initialize``.

Wraps the ``dgl.distributed.initialize`` that scripts call: ``before()`` runs first in
every process (servers included: DGL's ``initialize`` never returns in a server), then
DGL's ``initialize``, then ``after()`` in the processes where it returns.
"""
import functools

from ._dgl_version import WRITTEN_FOR, check

DGL_VERSIONS = WRITTEN_FOR
_original = None  # DGL's initialize while installed
_hooks = None  # (before, after)


def install(before=None, after=None) -> None:
    """Wrap ``dgl.distributed.initialize`` to call ``before()`` and ``after()`` (each
    optional, no arguments) around it; ``after``'s return value is ignored. Installing
    the same hooks again is a no-op; other hooks need :func:`uninstall` first. Called by
    ``dgl_sni.sni.kvstore.install_autoenable``."""
    global _original, _hooks
    import dgl
    import dgl.distributed as dgld
    check(__name__, dgl.__version__, DGL_VERSIONS)
    if _original is not None:
        if (before, after) == _hooks:
            return
        raise RuntimeError(f"patch {__name__!r} is installed with other hooks; uninstall() first")
    original = dgld.initialize

    @functools.wraps(original)
    def initialize(*args, **kwargs):
        if before is not None:
            before()
        result = original(*args, **kwargs)  # servers never return from here
        if after is not None:
            after()
        return result

    _original, _hooks = original, (before, after)
    dgld.initialize = initialize


def uninstall() -> None:
    """Put DGL's ``initialize`` back (a no-op when not installed)."""
    global _original, _hooks
    if _original is None:
        return
    import dgl.distributed as dgld
    dgld.initialize = _original
    _original = _hooks = None


def is_installed() -> bool:
    """Whether ``dgl.distributed.initialize`` runs hooks."""
    return _original is not None


def hooks() -> tuple | None:
    """The installed ``(before, after)``, or ``None``."""
    return _hooks
