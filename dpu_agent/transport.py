"""How the agent talks to its trainer: the two declared halves of every transport.

Every transport has the same two halves. Control: small messages in order, each
answered by one reply (dicts here, the binary protocol of :mod:`dpu_agent.protocol` on the
wire). Data: named *regions* of the trainer's memory per table
(``fresh`` rows the trainer synchronised, ``ids`` of a partial sync, ``served`` rows
and their ``weight`` for a stale step, ``drift``), which the agent reads and writes.

* :class:`AgentTransport` -- the agent's half (the agent itself is the ``sni-agent`` binary,
  whose ``csrc/agent/transport.hpp`` declares the same half in C++);
* :class:`HostEndpoint` -- the trainer's half, driven by
  :class:`dpu_agent.client.RemoteAgentClient`.

Implementations: ``dpu_agent.shm`` (``ShmHostEndpoint``: a Unix socket for control and
POSIX shared memory for the regions, the host emulation; its agent side is the ``sni-agent``
binary) and ``dpu_agent.doca`` (``DocaAgentTransport`` / ``DocaHostEndpoint``: DOCA Comch
for control and DOCA DMA for the regions, BlueField DPU).
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np

REGIONS = ("fresh", "ids", "served", "weight", "drift")


def region_layout(num_rows: int, dim: int) -> dict:
    """(dtype, shape) of every region of a table."""
    return dict(fresh=(np.float32, (num_rows, dim)), ids=(np.int64, (num_rows,)),
                served=(np.float32, (num_rows, dim)), weight=(np.float32, (num_rows,)),
                drift=(np.float32, (num_rows,)))


class AgentError(RuntimeError):
    """The agent failed an operation (its message says why) or went away."""


class AgentTransport(ABC):
    """Agent side of a transport: receives control messages, answers them, and moves rows
    between the trainer's regions and agent memory. The ``sni-agent`` binary serves trainers
    through its C++ twin (``csrc/agent/transport.hpp``); the Python implementation,
    :class:`~dpu_agent.doca.DocaAgentTransport`, is driven directly (tests)."""

    @abstractmethod
    def recv(self):
        """Next control message, or ``None`` when the trainer has gone."""

    @abstractmethod
    def send(self, msg: dict) -> None:
        """Send one reply."""

    @abstractmethod
    def attach(self, table: int, num_rows: int, dim: int, regions: list) -> None:
        """Map the regions the trainer announced for ``table``."""

    @abstractmethod
    def read(self, table: int, region: str, count: int | None = None) -> np.ndarray:
        """Copy (the first ``count`` rows of) a trainer region into agent memory."""

    @abstractmethod
    def write(self, table: int, region: str, src: np.ndarray) -> None:
        """Copy agent rows into a trainer region (from its first row)."""

    @abstractmethod
    def close(self) -> None:
        """Release the regions and the control channel."""


class HostEndpoint(ABC):
    """Trainer side of a transport: owns the regions of every table and the control
    channel to the agent. Driven by :class:`dpu_agent.client.RemoteAgentClient`."""

    @abstractmethod
    def new_table(self, table: int, num_rows: int, dim: int) -> list:
        """Allocate the regions of ``table``; returns what the agent needs to attach them:
        one descriptor (bytes) per region in ``REGIONS`` order, sent in ``add_table``."""

    @abstractmethod
    def region(self, table: int, name: str) -> np.ndarray:
        """The trainer's view of one region (rows are written and read in place)."""

    @abstractmethod
    def send(self, msg: dict) -> None:
        """Send one control message."""

    @abstractmethod
    def recv(self, timeout: float | None = None) -> dict:
        """The next reply (waits, at most ``timeout`` s: then ``TimeoutError``); raises
        ``EOFError`` or ``OSError`` once the agent is gone."""

    @abstractmethod
    def poll(self, timeout: float) -> bool:
        """True when a reply (or the end of the connection) is ready for :meth:`recv`."""

    @abstractmethod
    def close(self) -> None:
        """Release the regions and the control channel."""
