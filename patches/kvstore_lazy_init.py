"""Let a DistTensor's shared-memory shard stay untouched when it starts as zeros.

DGL's KVServer creates a shard in fresh shared memory (which the kernel zero-fills)
and then copies ``init_func(shape, dtype)`` into it, touching every page. A shard whose
rows live elsewhere (the storage tier, :mod:`storage_tier.shard`) should hold no
memory, so :func:`lazy_zeros` returns a zero-stride broadcast of one zero row, and the
patched copy skips such a source: the shard is already zeros, and no page is touched.
"""
import torch

_INSTALLED = False


def lazy_zeros(shape, dtype):
    """A zero tensor of ``shape`` that allocates one row (DistTensor ``init_func``)."""
    return torch.zeros((1,) + tuple(shape[1:]), dtype=dtype).expand(*shape)


def _is_lazy_zeros(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] > 1 and t.stride(0) == 0 \
        and not bool(t[:1].any())


def install() -> None:
    """Wrap ``dgl.distributed.rpc.copy_data_to_shared_memory`` (idempotent)."""
    global _INSTALLED
    if _INSTALLED:
        return
    from dgl.distributed import kvstore, rpc
    original = rpc.copy_data_to_shared_memory

    def copy_data_to_shared_memory(dst, source):
        if _is_lazy_zeros(source):
            return  # fresh shared memory is already zero
        return original(dst, source)

    rpc.copy_data_to_shared_memory = copy_data_to_shared_memory
    kvstore.rpc.copy_data_to_shared_memory = copy_data_to_shared_memory
    _INSTALLED = True
