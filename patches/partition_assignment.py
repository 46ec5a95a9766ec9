"""Let ``dgl.distributed.partition_graph`` write a node assignment computed elsewhere.

DGL 2.1's ``partition_graph`` only knows METIS and random assignments. Its random
branch asks ``dgl.distributed.partition.random_choice(num_parts, num_nodes)`` for the
assignment; while :func:`install` is in effect (or inside :func:`fixed_assignment`)
that call returns ours, so DGL's own code reshuffles and writes the partitions in its
format.
"""
import contextlib

import torch

from ._dgl_version import WRITTEN_FOR, check

DGL_VERSIONS = WRITTEN_FOR
_original = None  # DGL's random_choice while installed
_parts = None  # the assignment it returns instead


def _fixed_choice(num_parts, num_nodes):
    assignment = torch.as_tensor(_parts, dtype=torch.int64).contiguous()
    if num_nodes != assignment.shape[0]:
        raise RuntimeError(f"partition_graph asked for {num_nodes} nodes, the assignment has "
                           f"{assignment.shape[0]}")
    return assignment


def install(parts) -> None:
    """Make ``partition_graph(..., part_method="random")`` use ``parts`` (one part id per
    node, a 1-D integer array or tensor). Installing the same ``parts`` again is a no-op;
    another assignment needs :func:`uninstall` first. Used by :func:`fixed_assignment`."""
    global _original, _parts
    import dgl
    from dgl.distributed import partition as dist_partition
    check(__name__, dgl.__version__, DGL_VERSIONS)
    if _original is not None:
        if parts is _parts:
            return
        raise RuntimeError(f"patch {__name__!r} is installed with another assignment; uninstall() first")
    _original, _parts = dist_partition.random_choice, parts
    dist_partition.random_choice = _fixed_choice


def uninstall() -> None:
    """Put DGL's ``random_choice`` back (a no-op when not installed)."""
    global _original, _parts
    if _original is None:
        return
    from dgl.distributed import partition as dist_partition
    dist_partition.random_choice, _original, _parts = _original, None, None


def is_installed() -> bool:
    """Whether ``random_choice`` returns a fixed assignment."""
    return _original is not None


@contextlib.contextmanager
def fixed_assignment(parts):
    """Within the block, ``partition_graph(..., part_method="random")`` uses ``parts``
    (``dgl_sni.partition.write_partitions`` calls it)."""
    installed_here = not is_installed()
    install(parts)
    try:
        yield
    finally:
        if installed_here:
            uninstall()
