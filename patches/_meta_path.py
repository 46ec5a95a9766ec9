"""A finder kept first on ``sys.meta_path`` (the import hooks of ``graphbolt_optional`` and
``dgl_import_hook``): put it there once, take every copy off, ask whether it is there."""
import sys


def insert_first(finder) -> None:
    if finder not in sys.meta_path:
        sys.meta_path.insert(0, finder)


def remove(finder) -> None:
    while finder in sys.meta_path:
        sys.meta_path.remove(finder)


def present(finder) -> bool:
    return finder in sys.meta_path
