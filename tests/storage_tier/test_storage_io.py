"""Storage tier I/O engine: O_DIRECT round trips, buffered fallback, checksums, ENOSPC, cleanup."""
import errno
import gc
import os
import shutil
import tempfile

import numpy as np
import pytest

import dgl_sni  # noqa: F401
from storage_tier.io import (ALIGN, HEADER, BufferPool, IOEngine, StorageError, buffer_nbytes,
                             kvikio_available, padded)

from tests.helpers import ROOT


@pytest.fixture
def io(tmp_path):
    eng = IOEngine(str(tmp_path))
    yield eng
    eng.close()


def _fs_type(path):
    best, fstype = "", None
    with open("/proc/mounts") as fh:
        for line in fh:
            _, mnt, typ = line.split()[:3]
            if path.startswith(mnt) and len(mnt) > len(best):
                best, fstype = mnt, typ
    return fstype


def test_aligned_buffers():
    pool = BufferPool()
    a = pool.alloc((5, 3), np.float32)
    assert a.ctypes.data % ALIGN == 0 and a.shape == (5, 3) and not a.any()
    assert buffer_nbytes(a) == HEADER + ALIGN
    assert pool.as_tier_buffer(a) is a
    b = pool.as_tier_buffer(np.ones((2, 2)))
    assert b is not None and buffer_nbytes(b) == HEADER + ALIGN and (b == 1).all()
    assert padded(0) == 0 and padded(1) == ALIGN and padded(ALIGN) == ALIGN


@pytest.fixture
def disk_io(tmp_path):
    """An engine on a disk filesystem: tmp_path, or a folder in the checkout when /tmp is tmpfs."""
    path = str(tmp_path)
    if _fs_type(os.path.realpath(path)) in ("tmpfs", None):
        root = os.path.join(ROOT, "build")
        os.makedirs(root, exist_ok=True)
        path = tempfile.mkdtemp(prefix="test-io-", dir=root)
        if _fs_type(os.path.realpath(path)) in ("tmpfs", None):
            shutil.rmtree(path)
            pytest.skip("neither /tmp nor the checkout is on a disk filesystem (O_DIRECT untestable)")
    eng = IOEngine(path)
    yield eng
    eng.close()
    if path != str(tmp_path):
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.parametrize("shape,dtype", [((1000, 7), np.float32), ((0, 16), np.float32),
                                         ((3,), np.int64), ((1024, 1024), np.float32)])
def test_direct_round_trip(disk_io, shape, dtype):
    io = disk_io
    assert io.mode == "direct"
    rng = np.random.default_rng(0)
    arr = (rng.standard_normal(shape) * 100).astype(dtype)
    io.write(("act", 1, 2), arr)
    size = os.path.getsize(io.path(("act", 1, 2)))
    assert size == HEADER + padded(arr.nbytes) and size % ALIGN == 0
    back = io.read(("act", 1, 2))
    assert back.dtype == arr.dtype and back.shape == arr.shape and np.array_equal(back, arr)
    assert back.ctypes.data % ALIGN == 0
    assert io.stats["bytes_written"] == size and io.stats["bytes_read"] == size
    assert io.stats["payload_read"] == arr.nbytes


def test_buffered_fallback_when_o_direct_is_rejected(tmp_path, monkeypatch):
    real_open = os.open

    def no_direct(path, flags, *args, **kwargs):  # what e.g. older tmpfs or FUSE mounts answer
        if flags & getattr(os, "O_DIRECT", 0):
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_direct)
    with IOEngine(str(tmp_path)) as eng:
        assert eng.mode == "buffered"
        arr = np.arange(12, dtype=np.float32).reshape(3, 4)
        eng.write(("grad", 0, 0), arr)
        assert np.array_equal(eng.read(("grad", 0, 0)), arr)
        path = eng.dir
    assert not os.path.exists(path)
    with pytest.raises(StorageError, match="O_DIRECT"):
        IOEngine(str(tmp_path), io_mode="direct")
    monkeypatch.setattr(os, "open", real_open)
    with IOEngine(str(tmp_path), io_mode="buffered") as eng:
        assert eng.mode == "buffered"


def test_overwrite_in_place_shrinks_file(io):
    io.write(("act", 0, 0), np.ones((4096, 4), np.float32))
    io.write(("act", 0, 0), np.full((3, 4), 2, np.float32))
    assert os.path.getsize(io.path(("act", 0, 0))) == HEADER + ALIGN
    assert (io.read(("act", 0, 0)) == 2).all()


def _flip(path, offset):
    with open(path, "r+b") as fh:
        fh.seek(offset)
        b = fh.read(1)
        fh.seek(offset)
        fh.write(bytes([b[0] ^ 0xFF]))


def test_corrupt_payload_detected(io):
    key = ("act", 2, 3)
    io.write(key, np.arange(3000, dtype=np.float32))
    _flip(io.path(key), HEADER + 123)
    with pytest.raises(StorageError) as err:
        io.read(key)
    msg = str(err.value)
    assert io.path(key) in msg and "payload checksum" in msg and "expected crc32 0x" in msg and "found 0x" in msg


def test_corrupt_header_truncation_magic_missing(io):
    key = ("grad", 1, 0)
    io.write(key, np.arange(100, dtype=np.float32))
    _flip(io.path(key), 20)  # inside the JSON header
    with pytest.raises(StorageError, match="header checksum mismatch"):
        io.read(key)
    io.write(key, np.arange(5000, dtype=np.float32))
    with open(io.path(key), "r+b") as fh:
        fh.truncate(HEADER + 4096)
    with pytest.raises(StorageError, match="truncated"):
        io.read(key)
    _flip(io.path(key), 0)
    with pytest.raises(StorageError, match="bad magic"):
        io.read(key)
    with pytest.raises(StorageError, match="missing storage file"):
        io.read(("act", 9, 9))


def test_enospc_is_clear_and_removes_partial_file(io, monkeypatch):
    real = os.pwrite
    calls = []

    def full_disk(fd, data, offset):
        calls.append(offset)
        if offset > 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data[: min(len(data), 8192)], offset)  # first chunk lands, then the disk is full

    monkeypatch.setattr(os, "pwrite", full_disk)
    key = ("act", 1, 0)
    with pytest.raises(StorageError) as err:
        io.write(key, np.ones((10000, 8), np.float32))
    msg = str(err.value)
    assert "no space left on device" in msg and io.path(key) in msg
    assert f"needed {HEADER + padded(10000 * 8 * 4)} bytes" in msg and "bytes are free" in msg
    assert not os.path.exists(io.path(key))
    with pytest.raises(StorageError, match="not enough free space"):
        io.check_space(1 << 60, "a test")


def test_async_pipeline_and_pending_reads(io):
    arrays = {("act", 1, p): np.full((2000, 16), p, np.float32) for p in range(12)}
    futs = [io.write_async(k, v) for k, v in arrays.items()]
    reads = {k: io.read_async(k) for k in arrays}  # some still queued: served from the buffer
    for k, fut in reads.items():
        assert np.array_equal(fut.result(), arrays[k])
    io.wait()
    assert all(f.done() for f in futs)
    assert io.stats["writes"] == 12
    for k in arrays:
        io.delete(k)
    assert io.disk_bytes() == 0


def test_close_and_gc_remove_run_directory(tmp_path):
    eng = IOEngine(str(tmp_path))
    eng.write(("act", 0, 0), np.ones(10, np.float32))
    path = eng.dir
    eng.close()
    eng.close()  # idempotent
    assert not os.path.exists(path)
    eng = IOEngine(str(tmp_path))
    eng.write(("act", 0, 0), np.ones(10, np.float32))
    path = eng.dir
    eng._writer.shutdown()
    eng._reader.shutdown()
    del eng
    gc.collect()
    assert not os.path.exists(path)


def test_kvikio_only_with_cuda():
    import torch
    if not torch.cuda.is_available():
        assert kvikio_available() is False


def test_buffer_pool_reuses_only_unreferenced_buffers():
    pool = BufferPool(capacity=1 << 20)
    a = pool.alloc((100, 10))
    a[...] = 7
    pool.release(a)  # still referenced by `a`: must not be handed out
    b = pool.alloc((100, 10))
    assert b.base is not a.base and (a == 7).all() and not b.any()
    mm_id = id(a.base)  # (holding a.base itself would keep it in use)
    del a
    c = pool.alloc((100, 10))  # now free: reused, and zero-filled again
    assert id(c.base) == mm_id and not c.any() and pool.reused == 1
    d = pool.alloc((100, 10), zero=False)
    assert id(d.base) != mm_id
