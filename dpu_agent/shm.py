"""Host emulation of the transport: a socket pair for control, POSIX shared memory for regions.

* :class:`ShmAgentTransport` -- agent side, in the ``python -m dpu_agent.agent --fd``
  process started by :func:`dpu_agent.client.spawn_agent`;
* :class:`ShmHostEndpoint` -- trainer side, owned by its
  :class:`~dpu_agent.client.RemoteAgentClient`.
"""
from __future__ import annotations

from multiprocessing import shared_memory
from multiprocessing.connection import Connection

import numpy as np

from .transport import AgentTransport, HostEndpoint, region_layout


class _ShmRegions:
    """Shared-memory segments of one table, created by the host, attached by the agent."""

    def __init__(self, num_rows: int, dim: int, names: dict | None = None):
        self.segments, self.arrays = {}, {}
        for region, (dtype, shape) in region_layout(num_rows, dim).items():
            nbytes = max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)
            if names is None:
                seg = shared_memory.SharedMemory(create=True, size=nbytes)
            else:
                seg = shared_memory.SharedMemory(name=names[region])
                _forget(seg)
            self.segments[region] = seg
            self.arrays[region] = np.ndarray(shape, dtype=dtype, buffer=seg.buf)

    def names(self) -> dict:
        return {k: s.name for k, s in self.segments.items()}

    def close(self, unlink: bool) -> None:
        self.arrays.clear()
        for seg in self.segments.values():
            try:
                seg.close()
                if unlink:
                    seg.unlink()
            except (FileNotFoundError, BufferError):
                pass
        self.segments.clear()


def _forget(seg) -> None:
    """Stop Python's resource tracker from unlinking a segment another process owns."""
    try:
        from multiprocessing import resource_tracker
        resource_tracker.unregister(seg._name, "shared_memory")  # noqa: SLF001
    except Exception:
        pass


class ShmAgentTransport(AgentTransport):
    """Agent side of the host emulation: control over a socket, regions in /dev/shm."""

    def __init__(self, fd: int):
        self.conn = Connection(fd)
        self.tables = {}

    def recv(self):
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None

    def send(self, msg: dict) -> None:
        self.conn.send(msg)

    def attach(self, table, num_rows, dim, regions):
        self.tables[table] = _ShmRegions(num_rows, dim, names=regions)

    def read(self, table, region, count=None):
        src = self.tables[table].arrays[region]
        return np.array(src if count is None else src[:count])

    def write(self, table, region, src):
        self.tables[table].arrays[region][: src.shape[0]] = src

    def close(self):
        for regions in self.tables.values():
            regions.close(unlink=False)
        self.conn.close()


class ShmHostEndpoint(HostEndpoint):
    """Trainer side of the host emulation: owns the segments and the control socket."""

    def __init__(self, conn: Connection):
        self.conn = conn
        self.tables = {}

    def new_table(self, table: int, num_rows: int, dim: int) -> dict:
        """Allocate the regions; returns what the agent needs to attach them."""
        self.tables[table] = _ShmRegions(num_rows, dim)
        return self.tables[table].names()

    def region(self, table: int, name: str) -> np.ndarray:
        return self.tables[table].arrays[name]

    def send(self, msg: dict) -> None:
        self.conn.send(msg)

    def recv(self):
        return self.conn.recv()

    def poll(self, timeout: float) -> bool:
        return self.conn.poll(timeout)

    def close(self) -> None:
        for regions in self.tables.values():
            regions.close(unlink=True)
        self.tables.clear()
        self.conn.close()
