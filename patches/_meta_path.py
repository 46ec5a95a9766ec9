"""A finder kept first on ``sys.meta_path`` (the import hooks of ``graphbolt_optional`` and
``dgl_import_hook``): put it there once, take every copy off, ask whether it is there, and
the spec both finders answer with (the module's own, its loader wrapped)."""
import importlib.machinery
import sys


def wrapped_spec(fullname: str, path, target: str, wrap):
    """For ``target`` only: the spec the normal path finder gives, with ``wrap(loader)`` as
    its loader (``None`` otherwise, so the next finder answers)."""
    if fullname != target:
        return None
    spec = importlib.machinery.PathFinder.find_spec(fullname, path)
    if spec is None or spec.loader is None:
        return None
    spec.loader = wrap(spec.loader)
    return spec


def insert_first(finder) -> None:
    if finder not in sys.meta_path:
        sys.meta_path.insert(0, finder)


def remove(finder) -> None:
    while finder in sys.meta_path:
        sys.meta_path.remove(finder)


def present(finder) -> bool:
    return finder in sys.meta_path
