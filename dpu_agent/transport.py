"""How the trainer talks to its agent: the trainer's half of every transport.

Every transport has two halves. Control: small messages in order, each answered by one
reply (dicts here, the binary protocol of :mod:`dpu_agent.protocol` on the wire). Data:
named *regions* of the trainer's memory per table (``fresh`` rows the trainer
synchronised, ``ids`` of a partial sync, ``served`` rows and their ``weight`` for a stale
step, ``drift``), which the agent reads and writes.

* :class:`HostEndpoint` -- the trainer's half, driven by
  :class:`dpu_agent.client.RemoteAgentClient`;
* the agent's half is the ``sni-agent`` binary's C++, declared in
  ``csrc/agent/transport.hpp``.

Implementations of the trainer's half: ``dpu_agent.shm`` (``ShmHostEndpoint``: a Unix socket
for control and POSIX shared memory for the regions, the host emulation) and
``dpu_agent.doca`` (``DocaHostEndpoint``: DOCA Comch for control and DOCA DMA for the
regions, BlueField DPU); the binary implements the agent's half of both
(``shm_transport.cpp``, ``doca_transport.cpp``).
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
