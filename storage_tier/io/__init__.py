"""Storage I/O of the tier: unit file format, recycled aligned buffers, the threaded engine.

* :mod:`.format` -- the checksummed unit file layout, :class:`StorageError`, :func:`read_unit`;
* :mod:`.buffers` -- :class:`BufferPool` (each :class:`IOEngine` owns one, ``io.pool``);
* :mod:`.engine` -- :class:`IOEngine`, the run directory and its I/O threads.
"""
from .buffers import BufferPool, buffer_nbytes, tier_buffer
from .engine import READ_CHUNK, IOEngine, kvikio_available
from .format import (ALIGN, HEADER, MAGIC, StorageError, encode_header, padded, parse_header, read_unit,
                     unit_name)

__all__ = ["ALIGN", "HEADER", "MAGIC", "READ_CHUNK", "BufferPool", "IOEngine", "StorageError",
           "buffer_nbytes", "encode_header", "kvikio_available", "padded", "parse_header",
           "read_unit", "tier_buffer", "unit_name"]
