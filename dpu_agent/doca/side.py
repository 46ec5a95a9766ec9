"""The device, progress engine, Comch messaging and teardown of the trainer's DOCA endpoint."""
from __future__ import annotations

import ctypes
import time
from abc import ABC, abstractmethod
from collections import deque
from ctypes import byref, c_int, c_uint8, c_uint32, c_void_p

from . import framing
from .bindings import (CTX_IDLE, DOCA_ERROR_AGAIN, DOCA_ERROR_IN_PROGRESS, DOCA_ERROR_INVALID_VALUE,
                       DOCA_ERROR_NOT_FOUND, DOCA_ERROR_TIME_OUT, DOCA_SUCCESS, GONE_ERRORS, PTR_LIST,
                       RECV_CB, TASK_CB, DocaError, load)


class DocaSide(ABC):
    """The device, one progress engine and the Comch messaging of one connection (framing
    in :mod:`.framing`, send completion, receive queue).

    Base of :class:`~dpu_agent.doca.host.DocaHostEndpoint`, which opens the Comch client
    and says whether the connection is up (:meth:`_connected`) and how a send task is
    allocated on it (:meth:`_send_alloc`). Not used directly. The other end of the
    connection, the agent, is the ``sni-agent`` binary's C++ (``csrc/agent/doca_transport.cpp``).
    """

    NUM_SEND_TASKS = 64
    RECV_QUEUE_SIZE = 64
    SEND_TIMEOUT_S = 60.0

    def __init__(self, pci_addr: str, name: str):
        if not pci_addr:
            raise ValueError("the DOCA transport needs the PCI address of the BlueField device (--pci)")
        if not name:
            raise ValueError("the DOCA transport needs a Comch service name")
        self.doca = load()
        self.pci_addr, self.name = pci_addr, name
        self.dev = self.pe = self.ctx = self._conn = None
        self.max_msg = 0
        self._inbox, self._frames = deque(), framing.Reassembler()
        self._sending, self._send_failures, self._cb_errors = {}, [], []  # _sending: task -> its frame
        self._closed = False
        # ctypes callbacks: kept alive as long as this object (DOCA holds raw pointers to them)
        self._send_cb = TASK_CB(self._on_send_done)
        self._recv_cb = RECV_CB(self._on_recv)

    # ------------------------------------------------------------ device & engine
    def _open_device(self) -> None:
        """devinfo list -> the device with our PCI address -> DMA memcpy capable -> open."""
        d = self.doca
        devs, count = PTR_LIST(), c_uint32()
        d.doca_devinfo_create_list(byref(devs), byref(count))
        try:
            for i in range(count.value):
                equal = c_uint8()
                d.doca_devinfo_is_equal_pci_addr(devs[i], self.pci_addr.encode(), byref(equal))
                if equal.value:
                    d.doca_dma_cap_task_memcpy_is_supported(devs[i])
                    dev = c_void_p()
                    d.doca_dev_open(devs[i], byref(dev))
                    self.dev = dev.value
                    break
        finally:
            d.doca_devinfo_destroy_list(devs)
        if self.dev is None:
            raise DocaError("doca_devinfo_is_equal_pci_addr", DOCA_ERROR_NOT_FOUND,
                            f"no DOCA device has PCI address {self.pci_addr} ({count.value} devices found)")
        pe = c_void_p()
        d.doca_pe_create(byref(pe))
        self.pe = pe.value
        size = c_uint32()
        d.doca_comch_cap_get_max_msg_size(self.devinfo, byref(size))
        self.max_msg = size.value
        if self.max_msg < 2:
            raise DocaError("doca_comch_cap_get_max_msg_size", DOCA_ERROR_INVALID_VALUE,
                            f"the device allows {self.max_msg}-byte messages only")

    @property
    def devinfo(self):
        return self.doca.doca_dev_as_devinfo(self.dev)

    def _state(self, ctx) -> int:
        state = c_int()
        self.doca.doca_ctx_get_state(ctx, byref(state))
        return state.value

    def _progress_until(self, cond, timeout: float | None = None) -> bool:
        """Drive the progress engine until ``cond()``; False if ``timeout`` s passed first."""
        deadline = None if timeout is None else time.monotonic() + timeout
        idle = 0
        while not cond():
            made = self.doca.doca_pe_progress(self.pe)
            if self._cb_errors:
                raise self._cb_errors.pop(0)
            if made:
                idle = 0
                continue
            if deadline is not None and time.monotonic() > deadline:
                return cond()
            idle += 1
            if idle > 64:  # nothing happening: back off up to 1 ms
                time.sleep(min(1e-3, idle * 1e-6))
        return True

    def _stop_ctx(self, ctx, timeout: float = 10.0) -> None:
        if ctx is None or self._state(ctx) == CTX_IDLE:
            return
        self.doca.doca_ctx_stop(ctx, ok=(DOCA_SUCCESS, DOCA_ERROR_IN_PROGRESS))
        if not self._progress_until(lambda: self._state(ctx) == CTX_IDLE, timeout):
            raise DocaError("doca_ctx_stop", DOCA_ERROR_TIME_OUT, f"context still stopping after {timeout} s")

    def _register(self, addr: int, length: int, access: int) -> int:
        """A started mmap over [addr, addr+length) on our device with ``access`` permissions."""
        d, mm = self.doca, c_void_p()
        d.doca_mmap_create(byref(mm))
        try:
            d.doca_mmap_add_dev(mm, self.dev)
            d.doca_mmap_set_permissions(mm, access)
            d.doca_mmap_set_memrange(mm, addr, length)
            d.doca_mmap_start(mm)
        except DocaError:
            d.doca_mmap_destroy(mm)
            raise
        return mm.value

    # ------------------------------------------------------------ messages
    @abstractmethod
    def _connected(self) -> bool:
        """True while the peer is connected and messages can travel."""

    @abstractmethod
    def _send_alloc(self, frame, length, task) -> int:
        """Allocate a send task for ``frame`` on the connection; returns DOCA_SUCCESS, or
        DOCA_ERROR_NO_MEMORY while every send task is in flight."""

    def _gone(self, why: str) -> ConnectionResetError:
        return ConnectionResetError(f"Comch connection '{self.name}' is closed ({why})")

    def _send_msg(self, msg: bytes) -> None:
        """Send one protocol message as frames of at most ``max_msg`` bytes, wait for completion."""
        self.doca.doca_pe_progress(self.pe)  # notice a vanished peer before sending
        if not self._connected():
            raise self._gone("the peer went away")
        for frame in framing.frames(msg, self.max_msg):
            self._send_frame(frame)
        if not self._progress_until(lambda: not self._sending, self.SEND_TIMEOUT_S):
            raise DocaError("doca_task_submit", DOCA_ERROR_TIME_OUT, "Comch send did not complete")
        if self._send_failures:
            code = self._send_failures[0]
            self._send_failures.clear()
            raise self._gone("send failed") from DocaError("Comch send task", code)

    def _send_frame(self, frame: bytes) -> None:
        d, task = self.doca, c_void_p()
        buf = ctypes.create_string_buffer(frame, len(frame))
        while True:  # all send tasks in flight: progress until one completes
            try:
                code = self._send_alloc(buf, len(frame), byref(task))
            except DocaError as err:
                if err.code in GONE_ERRORS:
                    raise self._gone("send task refused") from err
                raise
            if code == DOCA_SUCCESS:
                break
            self._progress_until(lambda: len(self._sending) < self.NUM_SEND_TASKS, self.SEND_TIMEOUT_S)
        base = d.doca_comch_task_send_as_task(task)
        while True:  # DOCA_ERROR_AGAIN: the peer's queue is full, progress and retry
            try:
                code = d.doca_task_submit(base, ok=(DOCA_SUCCESS, DOCA_ERROR_AGAIN))
            except DocaError as err:
                d.doca_task_free(base)
                if err.code in GONE_ERRORS:
                    raise self._gone("send refused") from err
                raise
            if code == DOCA_SUCCESS:
                self._sending[base] = buf  # DOCA may read the frame until completion
                return
            d.doca_pe_progress(self.pe)

    def _on_send_done(self, task, task_user_data, ctx_user_data):
        """Send completion and send error callback (both)."""
        try:
            base = self.doca.doca_comch_task_send_as_task(task)
            status = self.doca.doca_task_get_status(base)
            self.doca.doca_task_free(base)
            self._sending.pop(base, None)
            if status != DOCA_SUCCESS:
                self._send_failures.append(status)
        except BaseException as err:  # noqa: BLE001 -- re-raised from _progress_until
            self._cb_errors.append(err)

    def _on_recv(self, event, buf, length, conn):
        """Message-received callback: one frame; a whole message lands in the inbox."""
        try:
            payload = self._frames.feed(ctypes.string_at(buf, length))
            if payload is not None:
                self._inbox.append(payload)
        except BaseException as err:  # noqa: BLE001
            self._cb_errors.append(err)

    def _next_msg(self, timeout: float | None = None):
        """Next whole message (bytes), or None when the peer has gone (or ``timeout`` passed)."""
        self._progress_until(lambda: self._inbox or not self._connected(), timeout)
        return self._inbox.popleft() if self._inbox else None

    # ------------------------------------------------------------ teardown
    @staticmethod
    def _teardown(steps) -> None:
        """Run every step even if some fail; raise the first failure at the end."""
        first = None
        for step in steps:
            try:
                step()
            except Exception as err:  # noqa: BLE001
                first = first or err
        if first is not None:
            raise first

    def _close_engine(self) -> list:
        """Steps that release the progress engine and the device (last in the teardown)."""
        d = self.doca

        def pe():
            if self.pe is not None:
                pe, self.pe = self.pe, None
                d.doca_pe_destroy(pe)

        def dev():
            if self.dev is not None:
                dev, self.dev = self.dev, None
                d.doca_dev_close(dev)
        return [pe, dev]

