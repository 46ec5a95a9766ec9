"""Host emulation of the transport, trainer side: a Unix socket for control, POSIX shared memory
for the regions. The agent side is the ``sni-agent`` binary (``csrc/agent/shm_transport.cpp``).

* :class:`ShmHostEndpoint` -- owned by its :class:`~dpu_agent.client.RemoteAgentClient`:
  connects to the agent's socket and authenticates with the token (``hello``), creates every
  region of a table as a shared-memory segment (mode 0600, unique name) and announces the
  names in ``add_table``.
"""
from __future__ import annotations

import os
import secrets
import socket
from multiprocessing import shared_memory

import numpy as np

from . import protocol
from .transport import AgentError, HostEndpoint, region_layout


class _ShmRegions:
    """The shared-memory segments of one table (created and unlinked by the trainer)."""

    def __init__(self, num_rows: int, dim: int):
        self.segments, self.arrays = {}, {}
        try:
            for region, (dtype, shape) in region_layout(num_rows, dim).items():
                nbytes = max(int(np.prod(shape)) * np.dtype(dtype).itemsize, 1)
                name = f"sni-{os.getpid()}-{secrets.token_hex(8)}"
                seg = shared_memory.SharedMemory(name=name, create=True, size=nbytes)  # mode 0600
                self.segments[region] = seg
                self.arrays[region] = np.ndarray(shape, dtype=dtype, buffer=seg.buf)
        except BaseException:
            self.close()
            raise

    def blobs(self) -> list:
        """The region descriptors of ``add_table``: ``/name`` of each segment, in region order."""
        return [("/" + self.segments[r].name.lstrip("/")).encode() for r in self.arrays]

    def close(self) -> None:
        self.arrays.clear()
        for seg in self.segments.values():
            try:
                seg.close()
            except BufferError:
                pass
            try:
                seg.unlink()
            except FileNotFoundError:
                pass
        self.segments.clear()


class ShmHostEndpoint(HostEndpoint):
    """Trainer side of the host emulation: owns the control socket and the segments."""

    def __init__(self, path: str, token: bytes, timeout: float = 10.0):
        self.path, self.tables = path, {}
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout)
            self.sock.connect(path)
            self.sock.sendall(protocol.encode(dict(op="hello", token=token)))
            reply = protocol.recv_reply(self.sock)
            if reply.get("error"):
                raise AgentError(f"the agent at {path} refused the connection: {reply['error']}")
            self.sock.settimeout(None)
        except BaseException:
            self.sock.close()
            raise

    def new_table(self, table: int, num_rows: int, dim: int) -> list:
        if table in self.tables:
            raise ValueError(f"table {table} already has regions")
        self.tables[table] = _ShmRegions(num_rows, dim)
        return self.tables[table].blobs()

    def region(self, table: int, name: str) -> np.ndarray:
        return self.tables[table].arrays[name]

    def send(self, msg: dict) -> None:
        self.sock.sendall(protocol.encode(msg))

    def recv(self, timeout: float | None = None) -> dict:
        self.sock.settimeout(timeout)
        try:
            return protocol.recv_reply(self.sock)
        except socket.timeout as err:
            raise TimeoutError(f"the agent did not answer within {timeout} s") from err
        finally:
            self.sock.settimeout(None)

    def poll(self, timeout: float) -> bool:
        import select
        return bool(select.select([self.sock], [], [], timeout)[0])

    def close(self) -> None:
        for regions in self.tables.values():
            regions.close()
        self.tables.clear()
        self.sock.close()
