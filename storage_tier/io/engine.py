"""Storage I/O for the tier: one checksummed file per unit, O_DIRECT when allowed, background threads.

A *unit* is one ``(kind, layer, part)`` array: the rows of one sub-partition (or the halo)
of one layer's activations (``act``), gradients (``grad``) or, for the snapshot baseline,
gathered inputs (``snap``). :class:`IOEngine` owns a private run directory under
``storage_dir`` holding one file per unit (format: :mod:`storage_tier.io.format`), a
writer thread and two reader threads, so writes of the previous sub-partition run while
the next one's inputs are prefetched and the main thread computes (two reads in flight
also overlap one read's checksum with the other's transfer), and the
:class:`~storage_tier.io.buffers.BufferPool` its reads and writes recycle buffers
through (``pool``). Python threads suffice: ``pwrite``/``preadv`` and ``zlib.crc32``
release the GIL. Called by :mod:`storage_tier.engine` (units), :mod:`storage_tier.shard`
and the benchmarks' baselines (saved tensors of the autograd baseline).

The payload's CRC-32 (``zlib.crc32``, ~4 GB/s here) is computed by a checksum thread chunk by
chunk (4 MiB) while the I/O threads transfer the next chunk, and verified on every read; a mismatch, a bad magic, a bad header checksum or
a truncated file raises :class:`StorageError` naming the file, the expected and the found
value. ``ENOSPC`` raises :class:`StorageError` saying how many bytes were needed and how
many were free; the partial file is removed. The run directory is removed by
:meth:`IOEngine.close` (the trainer calls it at the end and on any error) and, as a safety
net, when the engine is garbage collected or the interpreter exits.

O_DIRECT needs aligned addresses, sizes and offsets, which the tier buffers' layout gives;
the engine probes the directory once and falls back to buffered I/O if the filesystem
rejects O_DIRECT (``EINVAL``, e.g. tmpfs); ``mode`` records which one is used.

GPUDirect Storage: :func:`kvikio_available` is true only when ``kvikio`` imports *and*
CUDA is available; :meth:`IOEngine.read_to_device` then reads a payload straight into a
CUDA tensor through ``kvikio.CuFile``. Neither exists on the development machine, so that
path is small, clearly separated and **untested here**; everything else runs without it.
"""
from __future__ import annotations

import errno
import mmap
import os
import shutil
import tempfile
import threading
import time
import weakref
import zlib
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from .buffers import BufferPool, tier_buffer
from .format import ALIGN, HEADER, StorageError, encode_header, padded, parse_header, unit_name

READ_CHUNK = 4 << 20  # reads are issued in chunks so checksumming overlaps the transfer
_MAX_IO = 0x7FFFF000  # Linux caps one read/write call at this many bytes


def _crc_step(prev, view: memoryview, start: int, stop: int) -> int:
    """CRC-32 of ``view[start:stop]`` continuing ``prev`` (the Future of the previous chunk;
    the single checksum thread runs a file's chunks in order, so it is already done)."""
    return zlib.crc32(view[start:stop], prev.result() if prev is not None else 0)


def kvikio_available() -> bool:
    """True only when kvikio imports and CUDA is usable (GPUDirect Storage path; untested here)."""
    try:
        import kvikio  # noqa: F401
        import torch
        return bool(torch.cuda.is_available())
    except Exception:
        return False


class IOEngine:
    """Reads and writes unit files under a private run directory; owns the I/O threads.

    ``storage_dir``: parent directory (default: the system temp dir); the engine creates
    ``sni-tier-XXXX`` inside and removes it on :meth:`close`. ``io_mode``: ``auto``
    (O_DIRECT if the filesystem accepts it), ``direct`` or ``buffered``.
    ``max_pending_writes`` bounds the buffers queued for writing (host memory held by
    in-flight writes). Keys are any hashable tuple ``(kind, layer, part)``. ``pool``: the
    :class:`~storage_tier.io.buffers.BufferPool` its reads fill and its users allocate
    from (``io.pool.alloc``) and release to (``io.pool.release``).
    """

    def __init__(self, storage_dir: str | None = None, io_mode: str = "auto",
                 max_pending_writes: int = 2):
        if io_mode not in ("auto", "direct", "buffered"):
            raise ValueError(f"io_mode must be auto, direct or buffered, got {io_mode!r}")
        self.pool = BufferPool()  # the tier trainer sizes it to a few of its largest units
        parent = storage_dir or tempfile.gettempdir()
        try:
            os.makedirs(parent, exist_ok=True)
            self.dir = tempfile.mkdtemp(prefix="sni-tier-", dir=parent)
        except OSError as err:
            raise StorageError(f"cannot create a run directory in {parent}: {err}") from err
        self._finalizer = weakref.finalize(self, shutil.rmtree, self.dir, True)
        self.mode = self._probe_direct() if io_mode != "buffered" else "buffered"
        if io_mode == "direct" and self.mode != "direct":
            self.close()
            raise StorageError(f"O_DIRECT was requested but {parent} does not support it")
        self._writer = ThreadPoolExecutor(1, thread_name_prefix="sni-tier-write")
        self._reader = ThreadPoolExecutor(2, thread_name_prefix="sni-tier-read")
        self._crc = ThreadPoolExecutor(1, thread_name_prefix="sni-tier-crc")
        self._lock = threading.Lock()
        self._pending: "OrderedDict[tuple, tuple]" = OrderedDict()  # key -> (future, array)
        self._errors: list = []
        self.max_pending_writes = max(1, int(max_pending_writes))
        self.closed = False
        self.reset_stats()

    # ------------------------------------------------------------------ setup
    def _probe_direct(self) -> str:
        probe = os.path.join(self.dir, ".probe")
        try:
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | getattr(os, "O_DIRECT", 0), 0o600)
        except OSError as err:
            if err.errno == errno.EINVAL:
                return "buffered"
            raise StorageError(f"cannot create files in {self.dir}: {err}") from err
        try:
            buf = mmap.mmap(-1, ALIGN)
            os.pwrite(fd, buf, 0)
            return "direct" if hasattr(os, "O_DIRECT") else "buffered"
        except OSError as err:
            if err.errno == errno.EINVAL:
                return "buffered"
            raise StorageError(f"cannot write to {self.dir}: {err}") from err
        finally:
            os.close(fd)
            os.unlink(probe)

    def _flags(self) -> int:
        return getattr(os, "O_DIRECT", 0) if self.mode == "direct" else 0

    def path(self, key) -> str:
        return os.path.join(self.dir, unit_name(key))

    def reset_stats(self) -> None:
        self.stats = dict(bytes_read=0, bytes_written=0, payload_read=0, payload_written=0,
                          reads=0, writes=0, read_s=0.0, write_s=0.0)

    def free_bytes(self) -> int:
        return shutil.disk_usage(self.dir).free

    def check_space(self, needed: int, what: str = "the run") -> None:
        """Raise :class:`StorageError` if the run directory's filesystem lacks ``needed`` bytes."""
        free = self.free_bytes()
        if needed > free:
            raise StorageError(
                f"not enough free space in {self.dir} for {what}: needs {needed} bytes "
                f"({needed / 2**30:.2f} GiB), {free} bytes ({free / 2**30:.2f} GiB) free")

    # ------------------------------------------------------------------ writes
    def write_async(self, key, arr: np.ndarray) -> Future:
        """Queue ``arr`` for writing as unit ``key``; returns a Future.

        ``arr`` is copied into an aligned buffer unless it already is one; the caller
        must not modify a tier buffer until the write completes (:meth:`wait`).
        Blocks while ``max_pending_writes`` writes are queued.
        """
        self._raise_errors()
        arr = self.pool.as_tier_buffer(np.ascontiguousarray(arr))
        while True:
            with self._lock:
                oldest = next(iter(self._pending.values()), None) \
                    if len(self._pending) >= self.max_pending_writes else None
            if oldest is None:
                break
            self._wait_future(oldest[0])
        with self._lock:  # same-key writes stay ordered: one writer thread, FIFO
            fut = self._writer.submit(self._write, key, arr)
            self._pending[key] = (fut, arr)
            self._pending.move_to_end(key)
        fut.add_done_callback(lambda f, key=key: self._write_done(key, f))
        return fut

    def write(self, key, arr: np.ndarray) -> None:
        """Write synchronously (raises :class:`StorageError` on failure)."""
        self._wait_future(self.write_async(key, arr))

    def _write_done(self, key, fut: Future) -> None:
        with self._lock:
            cur = self._pending.get(key)
            if cur is not None and cur[0] is fut:
                del self._pending[key]
        if fut.exception() is not None:
            with self._lock:
                self._errors.append(fut.exception())

    def _write(self, key, arr: np.ndarray) -> int:
        """Payload first, chunk by chunk (checksummed in the checksum thread while written),
        then the header block with the checksum: a torn write never verifies."""
        start = time.perf_counter()
        mm = tier_buffer(arr)
        nbytes = int(arr.nbytes)
        view = memoryview(mm)
        total = HEADER + padded(nbytes)
        end = HEADER + nbytes
        path = self.path(key)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | self._flags(), 0o600)
        except OSError as err:
            raise self._os_error("creating", path, err, total) from err
        try:
            pos, crc_fut = HEADER, None
            while pos < total:
                stop = min(total, pos + READ_CHUNK)
                if pos < end:
                    crc_fut = self._crc.submit(_crc_step, crc_fut, view, pos, min(stop, end))
                self._pwrite_all(fd, view, pos, stop)
                pos = stop
            crc = crc_fut.result() if crc_fut is not None else zlib.crc32(b"")
            head = encode_header(key, arr, nbytes, crc)
            view[: len(head)] = head
            view[len(head): HEADER] = bytes(HEADER - len(head))
            self._pwrite_all(fd, view, 0, HEADER)
            if os.fstat(fd).st_size > total:
                os.ftruncate(fd, total)
        except (OSError, StorageError) as err:
            os.close(fd)
            fd = -1
            try:
                os.unlink(path)
            except OSError:
                pass
            if isinstance(err, StorageError):
                raise
            raise self._os_error("writing", path, err, total) from err
        finally:
            if fd >= 0:
                os.close(fd)
        self._count("write", total, nbytes, start)
        return total

    def _count(self, kind: str, nbytes: int, payload: int, start: float) -> None:
        """Add one finished ``read``/``write`` to :attr:`stats` (thread-safe)."""
        done = "read" if kind == "read" else "written"
        with self._lock:
            s = self.stats
            s[f"bytes_{done}"] += nbytes
            s[f"payload_{done}"] += payload
            s[f"{kind}s"] += 1
            s[f"{kind}_s"] += time.perf_counter() - start

    @staticmethod
    def _pwrite_all(fd: int, view: memoryview, start: int, stop: int) -> None:
        done = start
        while done < stop:
            n = os.pwrite(fd, view[done: min(stop, done + _MAX_IO)], done)
            if n <= 0:
                raise OSError(errno.EIO, "short write")
            done += n

    def _os_error(self, action: str, path: str, err: OSError, needed: int) -> StorageError:
        if err.errno == errno.ENOSPC:
            try:
                free = self.free_bytes()
            except OSError:
                free = -1
            return StorageError(
                f"no space left on device while {action} {path}: the write needed {needed} bytes, "
                f"{free} bytes are free on that filesystem (ENOSPC); free space or point "
                f"--storage-dir at a larger disk")
        return StorageError(f"I/O error while {action} {path}: {err}")

    # ------------------------------------------------------------------ reads
    def read_async(self, key) -> Future:
        """Read unit ``key`` in the reader thread; the Future gives a tier-buffer array.

        A unit whose write is still queued is not read back: the Future waits for that
        write and returns the very buffer being written (no bytes counted).
        """
        self._raise_errors()
        with self._lock:
            pending = self._pending.get(key)
        if pending is not None:
            wfut, arr = pending
            return self._reader.submit(lambda: (wfut.result(), arr)[1])
        return self._reader.submit(self._read, key)

    def read(self, key) -> np.ndarray:
        return self._wait_future(self.read_async(key))

    def _read(self, key) -> np.ndarray:
        start = time.perf_counter()
        path = self.path(key)
        try:
            fd = os.open(path, os.O_RDONLY | self._flags())
        except FileNotFoundError as err:
            raise StorageError(f"missing storage file {path} (unit {key} was never written "
                               f"or was deleted)") from err
        except OSError as err:
            raise StorageError(f"cannot open {path}: {err}") from err
        try:
            size = os.fstat(fd).st_size
            if size < HEADER:
                raise StorageError(f"corrupt storage file {path}: truncated, {size} bytes, "
                                   f"expected at least the {HEADER}-byte header")
            mm, _ = self.pool.get(padded(size))
            view = memoryview(mm)
            total = padded(size)
            done = self._pread(fd, view, 0, min(total, HEADER + READ_CHUNK))
            meta = parse_header(path, view)
            nbytes = int(meta["nbytes"])
            if size < HEADER + nbytes:
                raise StorageError(f"corrupt storage file {path}: truncated, {size} bytes on "
                                   f"disk, header says {HEADER + nbytes}")
            # checksum chunk i in the checksum thread while chunk i+1 is read (pipelined)
            end, pos, crc_fut = HEADER + nbytes, HEADER, None
            while True:
                if min(done, end) > pos:
                    crc_fut = self._crc.submit(_crc_step, crc_fut, view, pos, min(done, end))
                    pos = min(done, end)
                if done >= total or pos >= end:
                    break
                got = self._pread(fd, view, done, min(total, done + READ_CHUNK))
                if got == done:
                    break
                done = got
        except OSError as err:
            raise StorageError(f"I/O error while reading {path}: {err}") from err
        finally:
            os.close(fd)
        crc = crc_fut.result() if crc_fut is not None else zlib.crc32(b"")
        if crc != meta["crc32"]:
            raise StorageError(f"corrupt storage file {path}: payload checksum mismatch, expected "
                               f"crc32 0x{meta['crc32']:08x}, found 0x{crc:08x}")
        arr = np.ndarray(tuple(meta["shape"]), np.dtype(meta["dtype"]), buffer=mm, offset=HEADER)
        self._count("read", done, nbytes, start)
        return arr

    @staticmethod
    def _pread(fd: int, view: memoryview, start: int, stop: int) -> int:
        """Fill ``view[start:stop]`` from the file; returns the new end (short at EOF)."""
        done = start
        while done < stop:
            n = os.preadv(fd, [view[done: min(stop, done + _MAX_IO)]], done)
            if n <= 0:
                break
            done += n
        return done

    # ------------------------------------------------------------------ GPUDirect (untested here)
    def read_to_device(self, key, device):
        """Read a unit's payload straight into a CUDA tensor via kvikio (GDS).

        UNTESTED on the development machine (no CUDA, no kvikio): only called when
        :func:`kvikio_available` is true. The header is read and verified on the host;
        the payload checksum is verified on a host copy only in debug use, not here.
        """
        import kvikio
        import torch
        path = self.path(key)
        with open(path, "rb") as fh:
            head = memoryview(bytearray(fh.read(HEADER)))
        meta = parse_header(path, head)
        out = torch.empty(meta["shape"], dtype=getattr(torch, np.dtype(meta["dtype"]).name),
                          device=device)
        with kvikio.CuFile(path, "r") as f:
            n = f.read(out, meta["nbytes"], HEADER)
        if n != meta["nbytes"]:
            raise StorageError(f"short GPUDirect read of {path}: {n} of {meta['nbytes']} bytes")
        with self._lock:
            self.stats["bytes_read"] += n
            self.stats["reads"] += 1
        return out

    # ------------------------------------------------------------------ housekeeping
    def _wait_future(self, fut: Future):
        try:
            return fut.result()
        except StorageError:
            raise
        except OSError as err:
            raise StorageError(f"I/O error in {self.dir}: {err}") from err

    def _raise_errors(self) -> None:
        with self._lock:
            errors, self._errors = self._errors, []
        if errors:
            raise errors[0]

    def wait(self, key=None) -> None:
        """Wait for the queued write of ``key`` (or all queued writes); raise the first error."""
        with self._lock:
            futs = [v[0] for k, v in self._pending.items() if key is None or k == key]
        for fut in futs:
            self._wait_future(fut)
        self._raise_errors()

    def delete(self, key) -> None:
        """Remove a unit's file (after any queued write of it)."""
        self.wait(key)
        try:
            os.unlink(self.path(key))
        except FileNotFoundError:
            pass

    def exists(self, key) -> bool:
        return os.path.exists(self.path(key))

    def disk_bytes(self) -> int:
        """Bytes of unit files currently in the run directory."""
        total = 0
        for entry in os.scandir(self.dir):
            if entry.is_file():
                total += entry.stat().st_size
        return total

    def close(self) -> None:
        """Stop the I/O threads and remove the run directory (idempotent)."""
        if getattr(self, "closed", False):
            return
        self.closed = True
        for ex in (getattr(self, "_writer", None), getattr(self, "_reader", None),
                   getattr(self, "_crc", None)):
            if ex is not None:
                ex.shutdown(wait=True, cancel_futures=True)
        self.pool.clear()
        self._finalizer()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


__all__ = ["IOEngine", "READ_CHUNK", "kvikio_available"]
