"""Page-aligned memory for DOCA mmaps (the trainer's regions on the DOCA path)."""
from __future__ import annotations

import mmap
import struct

import numpy as np

PAGE = mmap.PAGESIZE
# a DOCA region descriptor in add_table: u64 host address, u64 bytes, then the export descriptor
REGION_BLOB = struct.Struct("<QQ")


class Pages:
    """Page-aligned anonymous memory viewed as one numpy array (DMA-able, registrable)."""

    def __init__(self, dtype, shape):
        self.nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        self.length = max(PAGE, -(-self.nbytes // PAGE) * PAGE)
        self._map = mmap.mmap(-1, self.length)
        self.array = np.frombuffer(self._map, dtype=dtype, count=int(np.prod(shape))).reshape(shape)
        self.addr = self.array.ctypes.data if self.array.size else \
            np.frombuffer(self._map, dtype=np.uint8, count=1).ctypes.data

    def close(self):
        self.array = None
        try:
            self._map.close()
        except BufferError:  # a caller still holds a view; the mapping goes with it
            pass

