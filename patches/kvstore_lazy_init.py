"""Let a DistTensor's shared-memory shard stay untouched when it starts as zeros.

DGL's KVServer creates a shard in fresh shared memory (which the kernel zero-fills)
and then copies ``init_func(shape, dtype)`` into it with
``dgl.distributed.rpc.copy_data_to_shared_memory``, touching every page. A shard whose
rows live elsewhere (the storage tier, :mod:`storage_tier.shard`) should hold no
memory, so :func:`lazy_zeros` returns a zero-stride broadcast of one zero row, and the
patched copy skips such a source: the shard is already zeros, and no page is touched.
"""
import torch

from ._dgl_version import WRITTEN_FOR, check

DGL_VERSIONS = WRITTEN_FOR
_original = None  # DGL's copy_data_to_shared_memory while installed


def lazy_zeros(shape, dtype):
    """A zero tensor of ``shape`` that allocates one row (DistTensor ``init_func``)."""
    return torch.zeros((1,) + tuple(shape[1:]), dtype=dtype).expand(*shape)


def _is_lazy_zeros(t) -> bool:
    return isinstance(t, torch.Tensor) and t.dim() >= 1 and t.shape[0] > 1 and t.stride(0) == 0 \
        and not bool(t[:1].any())


def _copy_data_to_shared_memory(dst, source):
    if _is_lazy_zeros(source):
        return  # fresh shared memory is already zero
    return _original(dst, source)


def install() -> None:
    """Wrap ``dgl.distributed.rpc.copy_data_to_shared_memory`` (a no-op when wrapped);
    called in servers by ``dgl_sni.worker``, the autoenabled ``initialize`` and scripts."""
    import dgl
    from dgl.distributed import rpc
    global _original
    check(__name__, dgl.__version__, DGL_VERSIONS)
    if _original is not None:
        return
    _original = rpc.copy_data_to_shared_memory
    rpc.copy_data_to_shared_memory = _copy_data_to_shared_memory  # KVServer calls rpc.copy_...


def uninstall() -> None:
    """Put DGL's ``copy_data_to_shared_memory`` back (a no-op when not installed)."""
    global _original
    if _original is None:
        return
    from dgl.distributed import rpc
    rpc.copy_data_to_shared_memory, _original = _original, None


def is_installed() -> bool:
    """Whether ``copy_data_to_shared_memory`` is wrapped."""
    return _original is not None
