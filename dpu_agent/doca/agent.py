"""Agent side of the DOCA transport (the DPU's Arm cores): :class:`DocaAgentTransport`."""
from __future__ import annotations

import os
from ctypes import byref, c_uint8, c_uint32, c_uint64, c_void_p

import numpy as np

from ..transport import AgentTransport, region_layout
from .bindings import (ACCESS_LOCAL_READ_WRITE, CONN_CB, DOCA_ERROR_NO_MEMORY, DOCA_ERROR_NOT_FOUND,
                       DOCA_ERROR_TIME_OUT, DOCA_SUCCESS, PTR_LIST, REP_FILTER_NET, TASK_CB, DocaError)
from .memory import REGION_BLOB, Pages
from .side import DocaSide


class _Region:
    """One trainer region as the agent sees it: the imported remote mmap and a local
    staging buffer of the same layout registered in a local mmap."""

    def __init__(self, remote_mmap, remote_addr, nbytes, pages, local_mmap):
        self.remote_mmap, self.remote_addr, self.nbytes = remote_mmap, remote_addr, nbytes
        self.pages, self.local_mmap = pages, local_mmap
        self.local = pages.array
        self.row_bytes = self.local.itemsize * int(np.prod(self.local.shape[1:]))


class DocaAgentTransport(DocaSide, AgentTransport):
    """Agent side of the DOCA transport in Python (ctypes); the agent that runs on the DPU is
    the binary's C++ twin (``csrc/agent/doca_transport.cpp``).

    Owns the device and its representor, a Comch server named ``name`` (serving the first
    trainer that connects), a DMA context with a buffer inventory, and per table the
    imported trainer regions plus local staging buffers. Implements
    :class:`~dpu_agent.transport.AgentTransport`.
    """

    NUM_DMA_TASKS = 16
    DMA_TIMEOUT_S = 60.0

    def __init__(self, pci_addr: str, name: str, rep_pci: str | None = None):
        super().__init__(pci_addr, name)
        self.rep_pci = rep_pci or os.environ.get("SNI_DOCA_REP_PCI") or None
        self.rep = self.server = self.dma = self.dma_ctx = self.inventory = None
        self.max_dma = 0
        self.tables = {}  # table -> {region: _Region}
        self._peer_gone = False
        self._dma_done = {}  # chunk id -> task status
        self._dma_cb = TASK_CB(self._on_dma_done)
        self._connect_cb = CONN_CB(self._on_connect)
        self._disconnect_cb = CONN_CB(self._on_disconnect)
        try:
            self._open_device()
            self._open_representor()
            self._start_server()
            self._start_dma()
        except BaseException:
            self.close()
            raise

    def _open_representor(self) -> None:
        d, reps, count = self.doca, PTR_LIST(), c_uint32()
        d.doca_devinfo_rep_create_list(self.dev, REP_FILTER_NET, byref(reps), byref(count))

        def wanted(info) -> bool:
            if self.rep_pci is None:
                return True
            equal = c_uint8()
            d.doca_devinfo_rep_is_equal_pci_addr(info, self.rep_pci.encode(), byref(equal))
            return bool(equal.value)

        def open_rep(info) -> None:
            rep = c_void_p()
            d.doca_dev_rep_open(info, byref(rep))
            self.rep = rep.value

        self._open_first(reps, count.value, d.doca_devinfo_rep_destroy_list, wanted, open_rep)
        if self.rep is None:
            want = f"with PCI address {self.rep_pci}" if self.rep_pci else "at all"
            raise DocaError("doca_devinfo_rep_is_equal_pci_addr", DOCA_ERROR_NOT_FOUND,
                            f"device {self.pci_addr} has no network representor {want} "
                            f"({count.value} found); the Comch server needs the host function's representor")

    def _start_server(self) -> None:
        d, srv = self.doca, c_void_p()
        d.doca_comch_cap_server_is_supported(self.devinfo)
        d.doca_comch_server_create(self.dev, self.rep, self.name.encode(), byref(srv))
        self.server = srv.value
        d.doca_comch_server_set_max_msg_size(self.server, self.max_msg)
        d.doca_comch_server_set_recv_queue_size(self.server, self.RECV_QUEUE_SIZE)
        self.ctx = d.doca_comch_server_as_ctx(self.server)
        d.doca_pe_connect_ctx(self.pe, self.ctx)
        d.doca_comch_server_task_send_set_conf(self.server, self._send_cb, self._send_cb, self.NUM_SEND_TASKS)
        d.doca_comch_server_event_msg_recv_register(self.server, self._recv_cb)
        d.doca_comch_server_event_connection_status_changed_register(self.server, self._connect_cb,
                                                                     self._disconnect_cb)
        d.doca_ctx_start(self.ctx)

    def _start_dma(self) -> None:
        d, dma, inv, size = self.doca, c_void_p(), c_void_p(), c_uint64()
        d.doca_dma_cap_task_memcpy_get_max_buf_size(self.devinfo, byref(size))
        self.max_dma = size.value
        d.doca_dma_create(self.dev, byref(dma))
        self.dma = dma.value
        self.dma_ctx = d.doca_dma_as_ctx(self.dma)
        d.doca_pe_connect_ctx(self.pe, self.dma_ctx)
        d.doca_dma_task_memcpy_set_conf(self.dma, self._dma_cb, self._dma_cb, self.NUM_DMA_TASKS)
        d.doca_ctx_start(self.dma_ctx)
        d.doca_buf_inventory_create(2 * self.NUM_DMA_TASKS, byref(inv))
        self.inventory = inv.value
        d.doca_buf_inventory_start(self.inventory)

    # ------------------------------------------------------------ Comch events
    def _on_connect(self, event, conn, ok):
        try:
            if not ok:
                return
            if self._conn is None and not self._peer_gone:
                self._conn = conn
            else:  # one trainer per agent
                self.doca.doca_comch_server_disconnect(self.server, conn)
        except BaseException as err:  # noqa: BLE001
            self._cb_errors.append(err)

    def _on_disconnect(self, event, conn, ok):
        if conn == self._conn:
            self._peer_gone = True

    def _connected(self) -> bool:
        return self._conn is not None and not self._peer_gone

    def _send_alloc(self, frame, length, task) -> int:
        return self.doca.doca_comch_server_task_send_alloc_init(
            self.server, self._conn, frame, length, task, ok=(DOCA_SUCCESS, DOCA_ERROR_NO_MEMORY))

    # ------------------------------------------------------------ AgentTransport
    def recv(self):
        """Next message; waits for a trainer to connect; None once it has gone."""
        while True:
            if self._inbox:
                return self._inbox.popleft()
            if self._peer_gone:
                return None
            self._progress_until(lambda: self._inbox or self._peer_gone)

    def send(self, msg: bytes) -> None:
        self._send_msg(msg)

    def attach(self, table, num_rows, dim, regions):
        """Import the trainer's exported regions and set up local staging buffers."""
        if table in self.tables:
            raise ValueError(f"table {table} is already attached")
        attached = {}
        self.tables[table] = attached  # released by close() even if this fails half-way
        for (name, (dtype, shape)), blob in zip(region_layout(num_rows, dim).items(), regions):
            if len(blob) <= REGION_BLOB.size:
                raise ValueError(f"region '{name}' of table {table}: descriptor of {len(blob)} bytes")
            addr, nbytes = REGION_BLOB.unpack_from(blob)
            desc = bytes(blob[REGION_BLOB.size:])
            want = int(np.prod(shape)) * np.dtype(dtype).itemsize
            if nbytes != want:
                raise ValueError(f"region '{name}' of table {table}: trainer announced {nbytes} bytes, "
                                 f"expected {want}")
            remote = c_void_p()
            self.doca.doca_mmap_create_from_export(None, desc, len(desc), self.dev, byref(remote))
            pages = Pages(dtype, shape)
            try:
                local = self._register(pages.addr, pages.length, ACCESS_LOCAL_READ_WRITE)
            except BaseException:
                self.doca.doca_mmap_destroy(remote)
                pages.close()
                raise
            attached[name] = _Region(remote.value, int(addr), int(nbytes), pages, local)

    def _region(self, table, name) -> _Region:
        try:
            return self.tables[table][name]
        except KeyError:
            raise ValueError(f"no region '{name}' attached for table {table}") from None

    def read(self, table, region, count=None):
        r = self._region(table, region)
        rows = r.local.shape[0] if count is None else int(count)
        if not 0 <= rows <= r.local.shape[0]:
            raise ValueError(f"cannot read {rows} rows of region '{region}' ({r.local.shape[0]} rows)")
        self._dma(r.remote_mmap, r.remote_addr, r.local_mmap, r.pages.addr, rows * r.row_bytes)
        return np.array(r.local[:rows])

    def write(self, table, region, src):
        r = self._region(table, region)
        src = np.asarray(src)
        if src.shape[1:] != r.local.shape[1:] or src.shape[0] > r.local.shape[0]:
            raise ValueError(f"cannot write rows of shape {src.shape} into region '{region}' {r.local.shape}")
        rows = src.shape[0]
        r.local[:rows] = src  # same casting as the shared-memory transport
        self._dma(r.local_mmap, r.pages.addr, r.remote_mmap, r.remote_addr, rows * r.row_bytes)

    # ------------------------------------------------------------ DMA
    def _buf_by_addr(self, mm, addr, length) -> int:
        """doca_buf_inventory_buf_get_by_addr (a static inline in the SDK): empty data section."""
        buf = c_void_p()
        self.doca.doca_buf_inventory_buf_get_by_args(self.inventory, mm, addr, length, addr, 0, byref(buf))
        return buf.value

    def _dma(self, src_mmap, src_addr, dst_mmap, dst_addr, nbytes) -> None:
        """Copy ``nbytes`` with DMA memcpy tasks of at most the device's max buffer size,
        up to NUM_DMA_TASKS in flight; raises DocaError if any task fails."""
        if nbytes <= 0:
            return
        d = self.doca
        chunks = [(off, min(self.max_dma, nbytes - off)) for off in range(0, nbytes, self.max_dma)]
        inflight, failures, nxt = {}, [], 0
        self._dma_done.clear()
        try:
            while nxt < len(chunks) or inflight:
                while nxt < len(chunks) and len(inflight) < self.NUM_DMA_TASKS:
                    off, n = chunks[nxt]
                    src = self._buf_by_addr(src_mmap, src_addr + off, n)
                    try:
                        d.doca_buf_set_data(src, src_addr + off, n)
                        dst = self._buf_by_addr(dst_mmap, dst_addr + off, n)
                    except BaseException:
                        d.doca_buf_dec_refcount(src, None)
                        raise
                    bufs = (src, dst)
                    task = c_void_p()
                    try:
                        d.doca_dma_task_memcpy_alloc_init(self.dma, src, dst, nxt, byref(task))
                        base = d.doca_dma_task_memcpy_as_task(task)
                        try:
                            d.doca_task_submit(base)
                        except BaseException:
                            d.doca_task_free(base)
                            raise
                    except BaseException:
                        for buf in bufs:
                            d.doca_buf_dec_refcount(buf, None)
                        raise
                    inflight[nxt] = bufs
                    nxt += 1
                self._collect(inflight, failures)
        finally:
            while inflight:  # an error above: let what is in flight finish, release its buffers
                self._collect(inflight, failures)
        if failures:
            raise DocaError("DMA memcpy task (doca_task_get_status)", failures[0],
                            f"copying {nbytes} bytes in {len(chunks)} chunk(s)")

    def _collect(self, inflight, failures) -> None:
        if not self._progress_until(lambda: self._dma_done, self.DMA_TIMEOUT_S):
            raise DocaError("doca_pe_progress", DOCA_ERROR_TIME_OUT,
                            f"{len(inflight)} DMA task(s) did not complete in {self.DMA_TIMEOUT_S} s")
        while self._dma_done:
            chunk, status = self._dma_done.popitem()
            for buf in inflight.pop(chunk):
                self.doca.doca_buf_dec_refcount(buf, None)
            if status != DOCA_SUCCESS:
                failures.append(status)

    def _on_dma_done(self, task, task_user_data, ctx_user_data):
        """Memcpy completion and error callback (both): record the status, free the task."""
        try:
            base = self.doca.doca_dma_task_memcpy_as_task(task)
            status = self.doca.doca_task_get_status(base)
            self.doca.doca_task_free(base)
            self._dma_done[task_user_data] = status
        except BaseException as err:  # noqa: BLE001
            self._cb_errors.append(err)

    # ------------------------------------------------------------ teardown
    def close(self):
        """Release, in order: imported and local mmaps, the buffer inventory, the DMA
        context, the Comch server, then the progress engine, representor and device."""
        if self._closed:
            return
        self._closed = True
        d = self.doca

        def regions():
            for attached in self.tables.values():
                for r in attached.values():
                    self._teardown([lambda r=r: d.doca_mmap_destroy(r.remote_mmap),
                                    lambda r=r: d.doca_mmap_destroy(r.local_mmap), r.pages.close])
            self.tables.clear()

        def inventory():
            if self.inventory is not None:
                inv, self.inventory = self.inventory, None
                d.doca_buf_inventory_destroy(inv)

        def dma():
            if self.dma is not None:
                try:
                    self._stop_ctx(self.dma_ctx)
                finally:
                    dma, self.dma = self.dma, None
                    d.doca_dma_destroy(dma)

        def server():
            if self.server is not None:
                try:
                    self._stop_ctx(self.ctx)
                finally:
                    srv, self.server = self.server, None
                    d.doca_comch_server_destroy(srv)

        def rep():
            if self.rep is not None:
                rep, self.rep = self.rep, None
                d.doca_dev_rep_close(rep)
        pe, dev = self._close_engine()
        self._teardown([regions, inventory, dma, server, pe, rep, dev])

