"""Let ``dgl.distributed.partition_graph`` write a node assignment computed elsewhere.

DGL 2.1's ``partition_graph`` only knows METIS and random assignments. Its random
branch asks ``dgl.distributed.partition.random_choice(num_parts, num_nodes)`` for the
assignment; inside :func:`fixed_assignment` that call returns ours, so DGL's own code
reshuffles and writes the partitions in its format.
"""
import contextlib

import numpy as np


@contextlib.contextmanager
def fixed_assignment(parts: np.ndarray):
    """Within the block, ``partition_graph(..., part_method="random")`` uses ``parts``."""
    import torch
    from dgl.distributed import partition as dist_partition

    original = dist_partition.random_choice

    def fixed(num_parts, num_nodes):
        if num_nodes != parts.shape[0]:
            raise RuntimeError(f"partition_graph asked for {num_nodes} nodes, the assignment has {parts.shape[0]}")
        return torch.from_numpy(np.ascontiguousarray(parts, dtype=np.int64))

    dist_partition.random_choice = fixed
    try:
        yield
    finally:
        dist_partition.random_choice = original
