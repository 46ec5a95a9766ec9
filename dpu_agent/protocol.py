"""The agent's binary control protocol (Python side of ``csrc/protocol.hpp``).

Every message is a fixed 32-byte header -- magic ``SNIA``, version, op, table, flags, step,
payload length, status (little endian, :data:`HEADER`) -- and a payload whose layout the op
fixes. Requests go from the trainer to the agent, replies echo op/table/flags/step with a
status (0 ok; 1 error, payload = the error text). Nothing is pickled: every length and count
is checked against the limits before anything is allocated, and a malformed message raises
:class:`ProtocolError`.

Used by the host endpoints (``dpu_agent.shm``, ``dpu_agent.doca``) and by the Python DOCA
agent side; the ``sni-agent`` binary parses the same bytes in C++.
"""
from __future__ import annotations

import math
import struct

import numpy as np

from .predictors import PREDICTOR_NAMES, TREND_PARAMS

HEADER = struct.Struct("<IHHIIdII")  # magic, version, op, table, flags, step, length, status
MAGIC = 0x41494E53
VERSION = 1
OPS = dict(hello=1, add_table=2, observe=3, serve=4, drift=5, stats=6, close=7)
OP_NAMES = {code: name for name, code in OPS.items()}
PARTIAL, PREVIEW = 1, 2
OK, ERROR = 0, 1
KINDS = PREDICTOR_NAMES  # wire codes 0.. in this order (csrc/tables.hpp Kind, _core.KIND_CODES)
ADD_FIXED = struct.Struct("<QIIIIdd")  # num_rows, dim, kind, window, regions, beta, lam
STATS = struct.Struct("<dqqq")  # predictor_s, tables, tracked_rows, predicted_slots
BLOB_LEN = struct.Struct("<I")
COUNT = struct.Struct("<Q")

TOKEN_BYTES = 32
MAX_ROWS = 1 << 26
MAX_DIM = 1 << 16
MAX_CELLS = 1 << 33
MAX_BLOB = 1 << 16
NUM_REGIONS = 5
MAX_WINDOW = 4096
MAX_PAYLOAD = ADD_FIXED.size + MAX_ROWS + NUM_REGIONS * (4 + MAX_BLOB)
MAX_ERROR_TEXT = 1 << 16
STATS_KEYS = ("predictor_s", "tables", "tracked_rows", "predicted_slots")


class ProtocolError(ValueError):
    """A message does not follow the protocol (what is wrong is in the text)."""


def _header(op, table=0, flags=0, step=0.0, length=0, status=OK) -> bytes:
    return HEADER.pack(MAGIC, VERSION, op, table, flags, float(step), length, status)


# ----------------------------------------------------------------------------- requests
def encode(msg: dict) -> bytes:
    """The bytes of request ``msg`` (``op`` and the fields of that op)."""
    op = msg["op"]
    code = OPS.get(op)
    if code is None:
        raise ProtocolError(f"unknown agent operation '{op}'")
    table, step, flags, payload = int(msg.get("table", 0)), float(msg.get("step", 0.0)), 0, b""
    if op == "hello":
        payload = bytes(msg["token"])
        if len(payload) != TOKEN_BYTES:
            raise ProtocolError(f"the token must be {TOKEN_BYTES} bytes")
    elif op == "add_table":
        sampled = np.ascontiguousarray(msg["sampled"], dtype=bool)
        regions = [bytes(r) for r in msg["regions"]]
        params = dict(TREND_PARAMS, **msg.get("params", {}))
        payload = b"".join([ADD_FIXED.pack(int(msg["num_rows"]), int(msg["dim"]), KINDS.index(msg["kind"]),
                                           int(params["window"]), len(regions),
                                           float(params["beta"]), float(params["lam"])),
                            sampled.view(np.uint8).tobytes(),
                            *(BLOB_LEN.pack(len(r)) + r for r in regions)])
    elif op == "observe":
        payload = COUNT.pack(int(msg["count"]))
        flags = PARTIAL if msg.get("partial") else 0
    elif op == "serve":
        flags = PREVIEW if msg.get("preview") else 0
    if not 0 <= table < 2 ** 32:
        raise ProtocolError(f"table id {table} does not fit 32 bits")
    return _header(code, table, flags, step, len(payload)) + payload


def parse_header(buf: bytes, reply: bool) -> tuple:
    """``(op, table, flags, step, length, status)`` of a 32-byte header, checked."""
    if len(buf) != HEADER.size:
        raise ProtocolError(f"truncated header ({len(buf)} bytes)")
    magic, version, op, table, flags, step, length, status = HEADER.unpack(buf)
    if magic != MAGIC:
        raise ProtocolError("bad magic (not an sni-agent message)")
    if version != VERSION:
        raise ProtocolError(f"protocol version {version} (this side speaks {VERSION})")
    if op not in OP_NAMES:
        raise ProtocolError(f"unknown operation {op}")
    name = OP_NAMES[op]
    allowed = PARTIAL if name == "observe" else PREVIEW if name == "serve" else 0
    if flags & ~allowed:
        raise ProtocolError(f"flags {flags} invalid for {name}")
    if reply:
        if status not in (OK, ERROR):
            raise ProtocolError(f"unknown reply status {status}")
        limit = MAX_ERROR_TEXT if status == ERROR else (STATS.size if name == "stats" else 0)
        if length > limit or (status == OK and name == "stats" and length != STATS.size):
            raise ProtocolError(f"{name} reply payload of {length} bytes (limit {limit})")
    else:
        if status != OK:
            raise ProtocolError("a request must have status 0")
        limit = {"hello": TOKEN_BYTES, "add_table": MAX_PAYLOAD, "observe": COUNT.size}.get(name, 0)
        if length > limit:
            raise ProtocolError(f"{name} payload of {length} bytes exceeds the limit of {limit}")
        if (name == "hello" and length != TOKEN_BYTES) or (name == "observe" and length != COUNT.size) or \
                (name == "add_table" and length < ADD_FIXED.size):
            raise ProtocolError(f"{name} payload of {length} bytes has the wrong size")
        if name in ("observe", "serve", "drift") and not math.isfinite(step):
            raise ProtocolError(f"{name} needs a finite step")
    return name, table, flags, step, length, status


def decode_request(buf: bytes) -> dict:
    """The request dict of a whole message (header + payload); raises ProtocolError."""
    buf = bytes(buf)
    name, table, flags, step, length, _ = parse_header(buf[:HEADER.size], reply=False)
    payload = buf[HEADER.size:]
    if len(payload) != length:
        raise ProtocolError("payload length does not match the header")
    msg = dict(op=name, table=table, step=step)
    if name == "hello":
        msg["token"] = payload
    elif name == "add_table":
        num_rows, dim, kind, window, nregions, beta, lam = ADD_FIXED.unpack_from(payload)
        if num_rows > MAX_ROWS or not 1 <= dim <= MAX_DIM or num_rows * dim > MAX_CELLS:
            raise ProtocolError(f"add_table: {num_rows} x {dim} outside the limits")
        if kind >= len(KINDS) or not 1 <= window <= MAX_WINDOW or nregions != NUM_REGIONS:
            raise ProtocolError(f"add_table: kind {kind}, window {window}, {nregions} regions invalid")
        if not (math.isfinite(beta) and math.isfinite(lam)):
            raise ProtocolError("add_table: beta and lam must be finite")
        off = ADD_FIXED.size
        if len(payload) - off < num_rows:
            raise ProtocolError("add_table: sampled mask truncated")
        mask = np.frombuffer(payload, dtype=np.uint8, count=num_rows, offset=off)
        if (mask > 1).any():
            raise ProtocolError("add_table: sampled mask bytes must be 0 or 1")
        off += num_rows
        regions = []
        for k in range(NUM_REGIONS):
            if len(payload) - off < BLOB_LEN.size:
                raise ProtocolError(f"add_table: region {k} truncated")
            (size,) = BLOB_LEN.unpack_from(payload, off)
            off += BLOB_LEN.size
            if not 1 <= size <= MAX_BLOB or len(payload) - off < size:
                raise ProtocolError(f"add_table: region {k} descriptor of {size} bytes invalid")
            regions.append(payload[off:off + size])
            off += size
        if off != len(payload):
            raise ProtocolError(f"add_table: {len(payload) - off} trailing bytes")
        msg.update(num_rows=num_rows, dim=dim, kind=KINDS[kind], sampled=mask.astype(bool),
                   regions=regions, params=dict(window=window, beta=beta, lam=lam))
    elif name == "observe":
        (count,) = COUNT.unpack(payload)
        if count > MAX_ROWS:
            raise ProtocolError(f"observe: count {count} exceeds the row limit")
        msg.update(count=count, partial=bool(flags & PARTIAL))
    elif name == "serve":
        msg["preview"] = bool(flags & PREVIEW)
    return msg


# ----------------------------------------------------------------------------- replies
def encode_reply(request: dict, error: str | None = None, stats: dict | None = None) -> bytes:
    """The reply to ``request`` (a decoded request dict): ok, an error text, or stats."""
    code = OPS[request["op"]]
    flags = (PARTIAL if request.get("partial") else 0) | (PREVIEW if request.get("preview") else 0)
    payload = b""
    if error is not None:
        payload = error.encode("utf-8", "replace")[:MAX_ERROR_TEXT]
    elif stats is not None:
        payload = STATS.pack(float(stats["predictor_s"]), *(int(stats[k]) for k in STATS_KEYS[1:]))
    return _header(code, request.get("table", 0), flags, request.get("step", 0.0), len(payload),
                   ERROR if error is not None else OK) + payload


def decode_reply(header: bytes, payload: bytes) -> dict:
    """The reply dict (``op``, ``table``, ``step``, ``preview``, and ``error`` or ``stats``)."""
    name, table, flags, step, length, status = parse_header(bytes(header), reply=True)
    if len(payload) != length:
        raise ProtocolError("payload length does not match the header")
    reply = dict(op=name, table=table, step=step, preview=bool(flags & PREVIEW))
    if status == ERROR:
        reply["error"] = bytes(payload).decode("utf-8", "replace") or "unknown error"
    elif name == "stats":
        reply["stats"] = dict(zip(STATS_KEYS, STATS.unpack(payload)))
    return reply


def recv_exact(sock, n: int) -> bytes:
    """Exactly ``n`` bytes from a stream socket; EOFError if it closes first."""
    chunks, left = [], n
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the connection closed mid-message" if chunks else "the connection closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_reply(sock) -> dict:
    """Read one reply from a stream socket (header, then its checked payload)."""
    header = recv_exact(sock, HEADER.size)
    length = parse_header(header, reply=True)[4]
    return decode_reply(header, recv_exact(sock, length) if length else b"")
