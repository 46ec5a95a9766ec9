"""Comch message framing of the DOCA transport: dicts <-> frames of at most ``max_msg`` bytes.

A control message is a pickled dict (the peer is the trainer's own agent, as trusted as a
``multiprocessing`` connection), split into frames of at most the Comch max message size;
the first byte of a frame says whether more frames follow (1) or it is the last (0).
Comch keeps frames in order, so a :class:`Reassembler` per connection rebuilds messages.
Used by :class:`~dpu_agent.doca.side.DocaSide` on both sides.
"""
from __future__ import annotations

import pickle

MORE, LAST = b"\x01", b"\x00"


def frames(msg: dict, max_msg: int):
    """The frames that carry ``msg``, in order (each at most ``max_msg`` bytes)."""
    payload = pickle.dumps(msg, protocol=5)  # host and DPU Pythons may differ
    step = max_msg - 1
    count = max(1, -(-len(payload) // step))
    for i in range(count):
        yield (LAST if i == count - 1 else MORE) + payload[i * step:(i + 1) * step]


def decode(payload: bytes) -> dict:
    """The message a reassembled payload carries."""
    return pickle.loads(payload)


class Reassembler:
    """Joins the frames of one connection into whole payloads (decoded by :func:`decode`).
    Owned by a ``DocaSide``; fed from its Comch receive callback."""

    def __init__(self):
        self._parts = []

    def feed(self, frame: bytes) -> bytes | None:
        """Take one frame; the whole payload once its last frame arrived, else None."""
        self._parts.append(frame[1:])
        if frame[:1] == LAST:
            payload, self._parts = b"".join(self._parts), []
            return payload
        return None
