"""Comch message framing of the DOCA transport: protocol messages <-> frames of at most ``max_msg`` bytes.

A control message is one binary protocol message (:mod:`dpu_agent.protocol`: header +
payload), split into frames of at most the Comch max message size; the first byte of a
frame says whether more frames follow (1) or it is the last (0). Comch keeps frames in
order, so a :class:`Reassembler` per connection rebuilds messages, refusing one whose size
exceeds the protocol's limit before buffering it. Used by
:class:`~dpu_agent.doca.side.DocaSide` (the trainer side); the agent's DOCA transport frames
the same way in C++ (``csrc/agent/doca_transport.cpp``, its reassembler in ``csrc/protocol.hpp``).
"""
from __future__ import annotations

from .. import protocol

MORE, LAST = b"\x01", b"\x00"
MAX_MESSAGE = protocol.HEADER.size + protocol.MAX_PAYLOAD


def frames(message: bytes, max_msg: int):
    """The frames that carry ``message`` (bytes), in order (each at most ``max_msg`` bytes)."""
    step = max_msg - 1
    count = max(1, -(-len(message) // step))
    for i in range(count):
        yield (LAST if i == count - 1 else MORE) + message[i * step:(i + 1) * step]


class Reassembler:
    """Joins the frames of one connection into whole messages. Owned by a ``DocaSide``;
    fed from its Comch receive callback."""

    def __init__(self):
        self._parts, self._size = [], 0

    def feed(self, frame: bytes) -> bytes | None:
        """Take one frame; the whole message once its last frame arrived, else None.
        Raises :class:`~dpu_agent.protocol.ProtocolError` for a bad or oversized frame."""
        if not frame or frame[:1] not in (MORE, LAST):
            self._parts, self._size = [], 0
            raise protocol.ProtocolError("bad Comch frame marker")
        self._size += len(frame) - 1
        if self._size > MAX_MESSAGE:
            self._parts, self._size = [], 0
            raise protocol.ProtocolError(f"message exceeds {MAX_MESSAGE} bytes")
        self._parts.append(frame[1:])
        if frame[:1] == LAST:
            message, self._parts, self._size = b"".join(self._parts), [], 0
            return message
        return None
