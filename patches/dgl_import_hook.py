"""Run hooks around the first ``import dgl`` of a process (the start-up ``.pth`` installs it).

DGL 2.1 cannot be imported with torch 2.13 unless the graphbolt shim is in place first,
and the stock-script switch (``DGL_SNI=1``) has to wrap ``dgl.distributed.initialize``
before a script calls it. A script that does not import ``dgl_sni`` gets both through
this hook: a finder on ``sys.meta_path`` that answers only for ``dgl``. When ``dgl`` is
first imported it calls ``before()``, lets DGL's own loader run the package unchanged,
then calls ``after()`` (with ``dgl`` complete in ``sys.modules``) and takes itself off
``sys.meta_path``. Until then it does nothing; a process that never imports DGL never
runs either hook.

Installed by the ``dgl_sni_startup.pth`` file that installing the package puts in
site-packages (see ``setup.py``); the hooks come from that line, not from here.
"""
import importlib
import importlib.abc
import importlib.machinery
import sys

from . import _meta_path
from ._dgl_version import WRITTEN_FOR, check

TARGET = "dgl"
DGL_VERSIONS = WRITTEN_FOR


class _HookedLoader(importlib.abc.Loader):
    """DGL's loader with ``before``/``after`` around the package body."""

    def __init__(self, inner, finder):
        self._inner, self._finder = inner, finder

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        from importlib import metadata  # here, not at start-up: every process imports this module
        self._finder.fired = True
        uninstall()
        check(__name__, metadata.version(TARGET), DGL_VERSIONS)
        before, after = self._finder.hooks
        self._finder.loading = True  # ``dgl`` is in sys.modules but its body has not run
        try:
            if before is not None:
                before()
            self._inner.exec_module(module)
        finally:
            self._finder.loading = False
        if isinstance(after, str):
            importlib.import_module(after)
        elif after is not None:
            after()


class _DGLFinder(importlib.abc.MetaPathFinder):
    """Answers ``find_spec('dgl')`` with DGL's own spec and a hooked loader."""

    def __init__(self):
        self.hooks = (None, None)
        self.fired = False
        self.loading = False

    def find_spec(self, fullname, path, target=None):
        return _meta_path.wrapped_spec(fullname, path, TARGET, lambda loader: _HookedLoader(loader, self))


_FINDER = _DGLFinder()


def install(before=None, after=None) -> None:
    """Call ``before()`` just before and ``after()`` just after the first ``import dgl``.

    ``after`` may also be a module name, imported then (the start-up line names
    ``dgl_sni``, so the hook itself imports nothing above ``patches``).

    A no-op when ``dgl`` is already imported or the same hooks are installed; other
    hooks need :func:`uninstall` first. The DGL version is checked when ``dgl`` is
    imported (a DGL other than 2.1.x then fails that import, naming this patch), so
    start-up reads no package metadata. Called by the start-up ``.pth`` line."""
    if TARGET in sys.modules:
        return
    if is_installed():
        if _FINDER.hooks == (before, after):
            return
        raise RuntimeError(f"patch {__name__!r} is installed with other hooks; uninstall() first")
    _FINDER.hooks, _FINDER.fired = (before, after), False
    _meta_path.insert_first(_FINDER)


def uninstall() -> None:
    """Take the finder off ``sys.meta_path`` (an imported ``dgl`` stays as it is)."""
    _meta_path.remove(_FINDER)


def is_installed() -> bool:
    """Whether the next ``import dgl`` runs the hooks."""
    return _meta_path.present(_FINDER)


def fired() -> bool:
    """Whether the hooks ran in this process (``dgl`` was imported through the finder)."""
    return _FINDER.fired


def loading() -> bool:
    """Whether this process is inside the hooked first ``import dgl`` (before DGL's body ends)."""
    return _FINDER.loading
