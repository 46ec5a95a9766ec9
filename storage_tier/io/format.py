"""The on-disk format of one unit file: a checksummed header block, then the padded payload.

A file is a 4096-byte header block, then the payload padded to a multiple of 4096::

    b"SNITIER\\x01" | u32 n | n bytes of JSON {key, dtype, shape, nbytes, crc32} | u32 crc32(JSON)

The payload is written first and the header last, so a torn write never verifies
(:class:`storage_tier.io.engine.IOEngine` does the writing). This module owns the layout
constants, :func:`encode_header`/:func:`parse_header`, the file names of units, and
:func:`read_unit`, the engine-free reader a DGL server uses to answer pulls from a
trainer's tier files (:mod:`storage_tier.shard`).
"""
from __future__ import annotations

import json
import struct
import zlib

import numpy as np

HEADER = 4096
ALIGN = 4096
MAGIC = b"SNITIER\x01"
_U32 = struct.Struct("<I")


class StorageError(RuntimeError):
    """A storage failure that must stop the run; the message names the file and the problem."""


def padded(nbytes: int) -> int:
    return -(-int(nbytes) // ALIGN) * ALIGN


def unit_name(key) -> str:
    kind, layer, part = key
    return f"{kind}_l{layer}_p{part}.bin"


def encode_header(key, arr: np.ndarray, nbytes: int, crc: int) -> bytes:
    """The header bytes of unit ``key`` holding ``arr`` (payload ``nbytes``, CRC-32 ``crc``);
    shorter than :data:`HEADER` (the caller zero-fills the rest of the block)."""
    meta = json.dumps(dict(key=list(key), dtype=arr.dtype.str, shape=list(arr.shape),
                           nbytes=nbytes, crc32=crc)).encode()
    head = MAGIC + _U32.pack(len(meta)) + meta + _U32.pack(zlib.crc32(meta))
    if len(head) > HEADER:
        raise StorageError(f"header of {unit_name(key)} does not fit in {HEADER} bytes")
    return head


def parse_header(path: str, view: memoryview) -> dict:
    """The verified header fields of file ``path`` from its first bytes ``view``."""
    if bytes(view[:8]) != MAGIC:
        raise StorageError(f"corrupt storage file {path}: bad magic, expected {MAGIC!r}, "
                           f"found {bytes(view[:8])!r}")
    (n,) = _U32.unpack(view[8:12])
    if n > HEADER - 16:
        raise StorageError(f"corrupt storage file {path}: header length {n} out of range")
    meta = bytes(view[12: 12 + n])
    (want,) = _U32.unpack(view[12 + n: 16 + n])
    got = zlib.crc32(meta)
    if got != want:
        raise StorageError(f"corrupt storage file {path}: header checksum mismatch, expected "
                           f"crc32 0x{want:08x}, found 0x{got:08x}")
    return json.loads(meta)


def read_unit(path: str) -> np.ndarray:
    """Read one unit file synchronously (buffered, checksum verified); no engine needed.

    Used where no :class:`~storage_tier.io.engine.IOEngine` runs, e.g. in a DGL server
    answering remote pulls from a trainer's tier files (:mod:`storage_tier.shard`).
    """
    try:
        with open(path, "rb") as fh:
            head = memoryview(fh.read(HEADER))
            if len(head) < HEADER:
                raise StorageError(f"corrupt storage file {path}: truncated header ({len(head)} bytes)")
            meta = parse_header(path, head)
            payload = fh.read(int(meta["nbytes"]))
    except FileNotFoundError as err:
        raise StorageError(f"missing storage file {path}") from err
    except OSError as err:
        raise StorageError(f"cannot read {path}: {err}") from err
    if len(payload) != int(meta["nbytes"]):
        raise StorageError(f"corrupt storage file {path}: truncated, payload {len(payload)} bytes, "
                           f"header says {meta['nbytes']}")
    crc = zlib.crc32(payload)
    if crc != int(meta["crc32"]):
        raise StorageError(f"corrupt storage file {path}: checksum mismatch, expected crc32 "
                           f"0x{int(meta['crc32']):08x}, found 0x{crc:08x}")
    return np.frombuffer(payload, dtype=np.dtype(meta["dtype"])).reshape(meta["shape"])


__all__ = ["ALIGN", "HEADER", "MAGIC", "StorageError", "encode_header", "padded", "parse_header",
           "read_unit", "unit_name"]
