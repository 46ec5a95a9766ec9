"""Trainer side of the DOCA transport (x86 host): :class:`DocaHostEndpoint`."""
from __future__ import annotations

import ctypes
from ctypes import byref, c_size_t, c_void_p

import numpy as np

from .. import protocol
from ..transport import HostEndpoint, region_layout
from .memory import REGION_BLOB
from .bindings import (ACCESS_PCI_READ_WRITE, CTX_RUNNING, DOCA_ERROR_IN_PROGRESS, DOCA_ERROR_NO_MEMORY,
                       DOCA_ERROR_TIME_OUT, DOCA_SUCCESS, DocaError)
from .memory import Pages
from .side import DocaSide


class DocaHostEndpoint(DocaSide, HostEndpoint):
    """Trainer side of the DOCA transport (x86 host), driven by ``RemoteAgentClient``.

    Owns the device, a Comch client connected to the agent's server ``name``, and every
    table's regions: page-aligned host memory registered in mmaps exported for PCI
    read-write access by the DPU. Implements :class:`~dpu_agent.transport.HostEndpoint`.
    """

    def __init__(self, pci_addr: str, name: str, connect_timeout: float = 60.0):
        super().__init__(pci_addr, name)
        self.client = None
        self.tables = {}  # table -> {region: (Pages, mmap)}
        try:
            self._open_device()
            self._start_client(connect_timeout)
        except BaseException:
            self.close()
            raise

    def _start_client(self, timeout: float) -> None:
        d, cli = self.doca, c_void_p()
        d.doca_comch_cap_client_is_supported(self.devinfo)
        d.doca_comch_client_create(self.dev, self.name.encode(), byref(cli))
        self.client = cli.value
        d.doca_comch_client_set_max_msg_size(self.client, self.max_msg)
        d.doca_comch_client_set_recv_queue_size(self.client, self.RECV_QUEUE_SIZE)
        self.ctx = d.doca_comch_client_as_ctx(self.client)
        d.doca_pe_connect_ctx(self.pe, self.ctx)
        d.doca_comch_client_task_send_set_conf(self.client, self._send_cb, self._send_cb, self.NUM_SEND_TASKS)
        d.doca_comch_client_event_msg_recv_register(self.client, self._recv_cb)
        d.doca_ctx_start(self.ctx, ok=(DOCA_SUCCESS, DOCA_ERROR_IN_PROGRESS))
        if not self._progress_until(lambda: self._state(self.ctx) == CTX_RUNNING, timeout):
            raise DocaError("doca_ctx_start", DOCA_ERROR_TIME_OUT,
                            f"no Comch server '{self.name}' accepted the connection within {timeout} s")
        conn = c_void_p()
        d.doca_comch_client_get_connection(self.client, byref(conn))
        self._conn = conn.value

    def _connected(self) -> bool:
        return self.ctx is not None and self._state(self.ctx) == CTX_RUNNING

    def _send_alloc(self, frame, length, task) -> int:
        return self.doca.doca_comch_client_task_send_alloc_init(
            self.client, self._conn, frame, length, task, ok=(DOCA_SUCCESS, DOCA_ERROR_NO_MEMORY))

    # ------------------------------------------------------------ HostEndpoint
    def new_table(self, table: int, num_rows: int, dim: int) -> list:
        """Allocate and export the table's regions; returns what the agent needs to import
        them: per region (``REGIONS`` order) host address and size (``REGION_BLOB``), then
        the export descriptor."""
        if table in self.tables:
            raise ValueError(f"table {table} already has regions")
        owned, regions = {}, {}
        self.tables[table] = owned  # closed with the endpoint even if this fails half-way
        for name, (dtype, shape) in region_layout(num_rows, dim).items():
            pages = Pages(dtype, shape)
            mm = self._register(pages.addr, pages.length, ACCESS_PCI_READ_WRITE)
            owned[name] = (pages, mm)
            desc, desc_len = c_void_p(), c_size_t()
            self.doca.doca_mmap_export_pci(mm, self.dev, byref(desc), byref(desc_len))
            regions[name] = (REGION_BLOB.pack(pages.addr, pages.nbytes)
                             + ctypes.string_at(desc, desc_len.value))
        return list(regions.values())

    def region(self, table: int, name: str) -> np.ndarray:
        return self.tables[table][name][0].array

    def send(self, msg: dict) -> None:
        self._send_msg(protocol.encode(msg))

    def recv(self, timeout: float | None = None) -> dict:
        msg = self._next_msg(timeout)
        if msg is None:
            if timeout is not None and self._connected():
                raise TimeoutError(f"the agent behind Comch service '{self.name}' did not answer in {timeout} s")
            raise EOFError(f"the agent behind Comch service '{self.name}' went away")
        return protocol.decode_reply(msg[:protocol.HEADER.size], msg[protocol.HEADER.size:])

    def poll(self, timeout: float) -> bool:
        """True when a message (or the end of the connection) is ready for :meth:`recv`."""
        return bool(self._progress_until(lambda: self._inbox or not self._connected(), timeout))

    def close(self) -> None:
        """Disconnect (client stop, destroy), then release the regions and the device."""
        if self._closed:
            return
        self._closed = True
        d = self.doca

        def client():
            if self.client is not None:
                try:
                    self._stop_ctx(self.ctx)
                finally:
                    cli, self.client = self.client, None
                    d.doca_comch_client_destroy(cli)

        def regions():
            for owned in self.tables.values():
                for pages, mm in owned.values():
                    try:
                        d.doca_mmap_destroy(mm)
                    finally:
                        pages.close()
            self.tables.clear()
        self._teardown([client, regions, *self._close_engine()])

