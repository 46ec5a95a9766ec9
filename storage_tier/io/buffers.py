"""Tier buffers: page-aligned arrays with header room in front, recycled by a pool.

:meth:`BufferPool.alloc` returns a numpy array living at offset 4096 of an anonymous
``mmap`` (page aligned), leaving room for the header, so a unit allocated this way is
written with one ``pwrite`` and no copy, and is read with one ``preadv`` into such a
buffer; other arrays are copied into one first (:meth:`BufferPool.as_tier_buffer`).
Dropped buffers are recycled (:meth:`BufferPool.release`): fresh anonymous memory costs a
page fault per 4 KiB, which here halved the bandwidth of reads into new buffers. There
is no process-wide pool: each :class:`~storage_tier.io.engine.IOEngine` owns one
(``io.pool``), and its users (the tier engine, the host cache) allocate and release
through it.
"""
from __future__ import annotations

import mmap
import sys
import threading

import numpy as np

from .format import ALIGN, HEADER, padded


def _anonymous(size: int) -> mmap.mmap:
    """Private anonymous memory, with transparent huge pages requested for large buffers
    (as numpy does for its own arrays). ``mmap.mmap(-1, n)`` alone would map it *shared*
    (shmem), and without the hint THP in ``madvise`` mode stays off: either way each 4 KiB
    page then costs a fault, about 3x slower to fill here."""
    mm = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    if size >= (2 << 20) and hasattr(mmap, "MADV_HUGEPAGE"):
        try:
            mm.madvise(mmap.MADV_HUGEPAGE)
        except OSError:
            pass
    return mm


def _free_refcount() -> int:
    """What ``sys.getrefcount(lst[i])`` reads for an object only a list holds (calibrated,
    so interpreters that count borrowed references differently stay safe)."""
    lst = [_anonymous(ALIGN)]
    return sys.getrefcount(lst[0])


_FREE_REFS = _free_refcount()


class BufferPool:
    """Recycles the anonymous mmaps behind tier buffers (bounded bytes of free buffers).

    Owned by an :class:`~storage_tier.io.engine.IOEngine` (``io.pool``; the tier trainer
    sizes it to a few of its largest units); the tier engine and the host cache allocate
    and release through it. Touching fresh anonymous memory costs a page fault per 4 KiB
    -- here that halves the bandwidth of a read into a fresh buffer -- so dropped buffers
    are kept for reuse, up to ``capacity`` bytes. A pooled mmap is handed out again only
    when nothing references it any more (its reference count shows no array, view or
    pending write using it), so releasing a buffer early is harmless. Sizes are rounded
    up to classes of 1/64 of a power of two (<= 1.6% slack) so units of slightly
    different row counts share buffers.
    """

    def __init__(self, capacity: int = 64 << 20):
        self.capacity = int(capacity)
        self._free: dict = {}
        self._bytes = 0
        self._lock = threading.Lock()
        self.reused = self.created = 0

    @staticmethod
    def size_class(nbytes: int) -> int:
        nbytes = max(ALIGN, int(nbytes))
        step = max(ALIGN, 1 << max(0, nbytes.bit_length() - 7))
        return -(-nbytes // step) * step

    def get(self, nbytes: int) -> tuple:
        """(mmap of at least ``nbytes``, whether it is a reused one, i.e. not zero-filled)."""
        size = self.size_class(nbytes)
        with self._lock:
            lst = self._free.get(size)
            if lst:
                for i in range(len(lst)):
                    if sys.getrefcount(lst[i]) == _FREE_REFS:  # only this list holds it
                        mm = lst.pop(i)
                        self._bytes -= size
                        self.reused += 1
                        return mm, True
        self.created += 1
        return _anonymous(size), False

    def put(self, mm: mmap.mmap) -> None:
        size = len(mm)
        with self._lock:
            if self._bytes + size > self.capacity or size != self.size_class(size):
                return
            lst = self._free.setdefault(size, [])
            if any(x is mm for x in lst):
                return
            lst.append(mm)
            self._bytes += size

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._bytes = 0

    @property
    def free_bytes(self) -> int:
        return self._bytes

    # ------------------------------------------------------------------ tier arrays
    def alloc(self, shape, dtype=np.float32, zero: bool = True) -> np.ndarray:
        """An array at offset 4096 of a page-aligned anonymous mmap (header room in front).

        Zero-filled unless ``zero=False`` (the caller overwrites every element).
        """
        dtype = np.dtype(dtype)
        shape = tuple(int(x) for x in shape)
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        mm, reused = self.get(HEADER + padded(nbytes))
        arr = np.ndarray(shape, dtype, buffer=mm, offset=HEADER)
        if zero and reused:
            arr[...] = 0
        return arr

    def release(self, arr) -> None:
        """Offer the buffer behind a tier array to the pool (safe even if it is still in use)."""
        mm = arr.base if isinstance(arr, np.ndarray) else None
        if isinstance(mm, mmap.mmap):
            self.put(mm)

    def as_tier_buffer(self, arr: np.ndarray) -> np.ndarray:
        """``arr`` itself if it is already an aligned tier buffer, else a copy in one."""
        if tier_buffer(arr) is not None:
            return arr
        out = self.alloc(arr.shape, arr.dtype)
        np.copyto(out, arr)
        return out


def tier_buffer(arr: np.ndarray):
    """The mmap behind ``arr`` if ``arr`` was made by :meth:`BufferPool.alloc` (and is whole), else None."""
    mm = arr.base
    if not isinstance(mm, mmap.mmap) or not arr.flags.c_contiguous:
        return None
    if len(mm) < HEADER + arr.nbytes:
        return None
    if arr.ctypes.data - np.frombuffer(mm, np.uint8, count=1).ctypes.data != HEADER:
        return None
    return mm


def buffer_nbytes(arr: np.ndarray) -> int:
    """Host bytes an array occupies (the whole aligned buffer for tier buffers)."""
    mm = tier_buffer(arr)
    return len(mm) if mm is not None else int(arr.nbytes)


__all__ = ["BufferPool", "buffer_nbytes", "tier_buffer"]
