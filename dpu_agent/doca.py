"""DOCA transport: Comch for control messages, DMA for the trainer's regions (BlueField DPU).

Same two halves as the host emulation in :mod:`dpu_agent.transport`:

* :class:`DocaHostEndpoint` -- trainer side (x86 host). Allocates every region of a table
  in page-aligned host memory, registers it in a ``doca_mmap`` with PCI read-write
  permission and exports it (``doca_mmap_export_pci``); the export descriptors travel to
  the agent inside the ``add_table`` message. Control messages go over a Comch *client*.
* :class:`DocaAgentTransport` -- agent side (the DPU's Arm cores). A Comch *server*
  receives the messages; ``attach`` imports the trainer's regions
  (``doca_mmap_create_from_export``); ``read``/``write`` move rows between agent-local
  staging buffers (registered in local mmaps) and the trainer's memory with DMA memcpy
  tasks, without involving the host CPU.

Control messages are pickled dicts (the peer is the trainer's own agent, as trusted as a
``multiprocessing`` connection), split into frames of at most the Comch max message size
(first byte: 1 = more frames follow, 0 = last frame); Comch keeps them in order.

The DOCA C API is reached through ctypes (:class:`Doca`). Only the functions in
``_PROTOTYPES`` are bound; their prototypes are declared here from NVIDIA's public DOCA
2.x documentation and samples (no SDK header is used). Libraries: ``libdoca_common.so``,
``libdoca_dma.so``, ``libdoca_comch.so`` in ``$DOCA_LIB_DIR``, else in
``/opt/mellanox/doca/lib/<arch>-linux-gnu``. Comch needs DOCA 2.5 or newer. The tests run
this module against a simulated SDK (``tests/doca_sim``).

On real hardware: the host and the DPU address the BlueField by different PCI functions
(host: the BlueField PF as the host sees it, e.g. ``b1:00.0``; DPU: its own device, e.g.
``03:00.0``), and the DPU's Comch server needs the *representor* of the host function
whose clients may connect: give its PCI address as ``rep_pci`` (or ``$SNI_DOCA_REP_PCI``);
without one, the first network representor of the device is used.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import pickle
import platform
import time
from collections import deque
from ctypes import (CFUNCTYPE, POINTER, byref, c_char_p, c_int, c_size_t, c_uint8, c_uint16,
                    c_uint32, c_uint64, c_void_p)

import numpy as np

from .transport import AgentTransport, region_layout

# ----------------------------------------------------------------------------- constants
# doca_error_t (doca_error.h)
DOCA_SUCCESS = 0
DOCA_ERROR_AGAIN = 5
DOCA_ERROR_INVALID_VALUE = 6
DOCA_ERROR_NO_MEMORY = 7
DOCA_ERROR_TIME_OUT = 9
DOCA_ERROR_CONNECTION_RESET = 11
DOCA_ERROR_CONNECTION_ABORTED = 12
DOCA_ERROR_NOT_CONNECTED = 14
DOCA_ERROR_NOT_FOUND = 16
DOCA_ERROR_BAD_STATE = 18
DOCA_ERROR_IN_PROGRESS = 26
_ERROR_NAMES = (  # fallback when the library cannot name a code
    "DOCA_SUCCESS", "DOCA_ERROR_UNKNOWN", "DOCA_ERROR_NOT_PERMITTED", "DOCA_ERROR_IN_USE",
    "DOCA_ERROR_NOT_SUPPORTED", "DOCA_ERROR_AGAIN", "DOCA_ERROR_INVALID_VALUE", "DOCA_ERROR_NO_MEMORY",
    "DOCA_ERROR_INITIALIZATION", "DOCA_ERROR_TIME_OUT", "DOCA_ERROR_SHUTDOWN",
    "DOCA_ERROR_CONNECTION_RESET", "DOCA_ERROR_CONNECTION_ABORTED", "DOCA_ERROR_CONNECTION_INPROGRESS",
    "DOCA_ERROR_NOT_CONNECTED", "DOCA_ERROR_NO_LOCK", "DOCA_ERROR_NOT_FOUND", "DOCA_ERROR_IO_FAILED",
    "DOCA_ERROR_BAD_STATE", "DOCA_ERROR_UNSUPPORTED_VERSION", "DOCA_ERROR_OPERATING_SYSTEM",
    "DOCA_ERROR_DRIVER", "DOCA_ERROR_UNEXPECTED", "DOCA_ERROR_ALREADY_EXIST", "DOCA_ERROR_FULL",
    "DOCA_ERROR_EMPTY", "DOCA_ERROR_IN_PROGRESS", "DOCA_ERROR_TOO_BIG")
# the peer is gone or the connection cannot carry messages
_GONE = (DOCA_ERROR_NOT_CONNECTED, DOCA_ERROR_CONNECTION_RESET, DOCA_ERROR_CONNECTION_ABORTED,
         DOCA_ERROR_BAD_STATE)
# enum doca_ctx_states (doca_ctx.h)
CTX_IDLE, CTX_STARTING, CTX_RUNNING, CTX_STOPPING = 0, 1, 2, 3
# enum doca_access_flag (doca_types.h)
ACCESS_LOCAL_READ_WRITE = 1 << 0
ACCESS_PCI_READ_WRITE = 1 << 5
# enum doca_devinfo_rep_filter (doca_dev.h)
REP_FILTER_NET = 1 << 1

PAGE = mmap.PAGESIZE
_MORE, _LAST = b"\x01", b"\x00"

# ----------------------------------------------------------------------------- prototypes
_P = c_void_p  # every DOCA object is an opaque pointer
_PP = POINTER(c_void_p)
_ERR = c_int  # doca_error_t
# union doca_data { void *ptr; uint64_t u64; } travels by value in one 8-byte integer
# register on x86-64 (SysV) and AArch64 (AAPCS64), exactly like a uint64_t; ctypes does not
# pass unions by value reliably, so it is declared as uint64.
_DATA = c_uint64

# doca_dma_task_memcpy_completion_cb_t / doca_comch_task_send_completion_cb_t:
#   void (*)(struct doca_*_task *task, union doca_data task_user_data, union doca_data ctx_user_data)
TASK_CB = CFUNCTYPE(None, _P, _DATA, _DATA)
# doca_comch_event_msg_recv_cb_t:
#   void (*)(struct doca_comch_event_msg_recv *, uint8_t *recv_buffer, uint32_t msg_len,
#            struct doca_comch_connection *)
RECV_CB = CFUNCTYPE(None, _P, POINTER(c_uint8), c_uint32, _P)
# doca_comch_event_connection_status_changed_cb_t:
#   void (*)(struct doca_comch_event_connection_status_changed *, struct doca_comch_connection *,
#            uint8_t change_successful)
CONN_CB = CFUNCTYPE(None, _P, _P, c_uint8)

# (name, restype, argtypes[, older name accepted]); restype _ERR is checked, others are not
_PROTOTYPES = {
    "common": (
        ("doca_error_get_name", c_char_p, [_ERR]),
        ("doca_error_get_descr", c_char_p, [_ERR]),
        ("doca_devinfo_create_list", _ERR, [POINTER(_PP), POINTER(c_uint32)]),
        ("doca_devinfo_destroy_list", _ERR, [_PP]),
        ("doca_devinfo_is_equal_pci_addr", _ERR, [_P, c_char_p, POINTER(c_uint8)]),
        ("doca_dev_open", _ERR, [_P, POINTER(_P)]),
        ("doca_dev_close", _ERR, [_P]),
        ("doca_dev_as_devinfo", _P, [_P]),
        ("doca_devinfo_rep_create_list", _ERR, [_P, c_int, POINTER(_PP), POINTER(c_uint32)]),
        ("doca_devinfo_rep_destroy_list", _ERR, [_PP]),
        ("doca_devinfo_rep_is_equal_pci_addr", _ERR, [_P, c_char_p, POINTER(c_uint8)]),
        ("doca_dev_rep_open", _ERR, [_P, POINTER(_P)]),
        ("doca_dev_rep_close", _ERR, [_P]),
        ("doca_mmap_create", _ERR, [POINTER(_P)]),
        ("doca_mmap_add_dev", _ERR, [_P, _P]),
        ("doca_mmap_set_permissions", _ERR, [_P, c_uint32]),
        ("doca_mmap_set_memrange", _ERR, [_P, _P, c_size_t]),
        ("doca_mmap_start", _ERR, [_P]),
        ("doca_mmap_export_pci", _ERR, [_P, _P, POINTER(_P), POINTER(c_size_t)]),
        ("doca_mmap_create_from_export", _ERR, [_P, c_char_p, c_size_t, _P, POINTER(_P)]),
        ("doca_mmap_destroy", _ERR, [_P]),
        ("doca_buf_inventory_create", _ERR, [c_size_t, POINTER(_P)]),
        ("doca_buf_inventory_start", _ERR, [_P]),
        ("doca_buf_inventory_destroy", _ERR, [_P]),
        # doca_buf_inventory_buf_get_by_addr() is a static inline over this one
        ("doca_buf_inventory_buf_get_by_args", _ERR, [_P, _P, _P, c_size_t, _P, c_size_t, POINTER(_P)]),
        ("doca_buf_set_data", _ERR, [_P, _P, c_size_t]),
        ("doca_buf_dec_refcount", _ERR, [_P, POINTER(c_uint16)]),
        ("doca_pe_create", _ERR, [POINTER(_P)]),
        ("doca_pe_destroy", _ERR, [_P]),
        ("doca_pe_connect_ctx", _ERR, [_P, _P]),
        ("doca_pe_progress", c_uint8, [_P]),
        ("doca_ctx_start", _ERR, [_P]),
        ("doca_ctx_stop", _ERR, [_P]),
        ("doca_ctx_get_state", _ERR, [_P, POINTER(c_int)]),
        ("doca_task_submit", _ERR, [_P]),
        ("doca_task_free", None, [_P]),
        ("doca_task_get_status", c_int, [_P]),  # a status, not a call result: unchecked
    ),
    "dma": (
        ("doca_dma_cap_task_memcpy_is_supported", _ERR, [_P]),
        ("doca_dma_cap_task_memcpy_get_max_buf_size", _ERR, [_P, POINTER(c_uint64)]),
        ("doca_dma_create", _ERR, [_P, POINTER(_P)]),
        ("doca_dma_destroy", _ERR, [_P]),
        ("doca_dma_as_ctx", _P, [_P]),
        ("doca_dma_task_memcpy_set_conf", _ERR, [_P, TASK_CB, TASK_CB, c_uint32]),
        ("doca_dma_task_memcpy_alloc_init", _ERR, [_P, _P, _P, _DATA, POINTER(_P)]),
        ("doca_dma_task_memcpy_as_task", _P, [_P]),
    ),
    "comch": (
        ("doca_comch_cap_get_max_msg_size", _ERR, [_P, POINTER(c_uint32)]),
        ("doca_comch_cap_server_is_supported", _ERR, [_P]),
        ("doca_comch_cap_client_is_supported", _ERR, [_P]),
        ("doca_comch_server_create", _ERR, [_P, _P, c_char_p, POINTER(_P)]),
        ("doca_comch_server_destroy", _ERR, [_P]),
        ("doca_comch_server_set_max_msg_size", _ERR, [_P, c_uint32]),
        ("doca_comch_server_set_recv_queue_size", _ERR, [_P, c_uint32]),
        ("doca_comch_server_as_ctx", _P, [_P]),
        ("doca_comch_server_task_send_set_conf", _ERR, [_P, TASK_CB, TASK_CB, c_uint32]),
        ("doca_comch_server_event_msg_recv_register", _ERR, [_P, RECV_CB]),
        ("doca_comch_server_event_connection_status_changed_register", _ERR, [_P, CONN_CB, CONN_CB],
         "doca_comch_server_event_connection_register"),  # the DOCA 2.5 name
        ("doca_comch_server_disconnect", _ERR, [_P, _P]),
        ("doca_comch_server_task_send_alloc_init", _ERR, [_P, _P, _P, c_uint32, POINTER(_P)]),
        ("doca_comch_client_create", _ERR, [_P, c_char_p, POINTER(_P)]),
        ("doca_comch_client_destroy", _ERR, [_P]),
        ("doca_comch_client_set_max_msg_size", _ERR, [_P, c_uint32]),
        ("doca_comch_client_set_recv_queue_size", _ERR, [_P, c_uint32]),
        ("doca_comch_client_as_ctx", _P, [_P]),
        ("doca_comch_client_task_send_set_conf", _ERR, [_P, TASK_CB, TASK_CB, c_uint32]),
        ("doca_comch_client_event_msg_recv_register", _ERR, [_P, RECV_CB]),
        ("doca_comch_client_get_connection", _ERR, [_P, POINTER(_P)]),
        ("doca_comch_client_task_send_alloc_init", _ERR, [_P, _P, _P, c_uint32, POINTER(_P)]),
        ("doca_comch_task_send_as_task", _P, [_P]),
    ),
}


# ----------------------------------------------------------------------------- errors
class DocaUnavailable(RuntimeError):
    """The DOCA libraries cannot be loaded (not installed, wrong directory, too old)."""


class DocaError(RuntimeError):
    """A DOCA call failed: ``func`` is the function, ``code`` its ``doca_error_t``."""

    def __init__(self, func: str, code: int, detail: str = ""):
        self.func, self.code = func, int(code)
        self.error_name, descr = _describe(self.code)
        super().__init__(f"{func} failed: {self.error_name} ({self.code}, {descr})"
                         + (f"; {detail}" if detail else ""))


_LOADED: dict = {}  # library directory -> Doca


def _describe(code: int) -> tuple:
    for doca in _LOADED.values():
        return (doca.doca_error_get_name(code).decode(), doca.doca_error_get_descr(code).decode())
    name = _ERROR_NAMES[code] if 0 <= code < len(_ERROR_NAMES) else "DOCA_ERROR_UNKNOWN"
    return name, name


# ----------------------------------------------------------------------------- bindings
def default_lib_dir() -> str:
    """``$DOCA_LIB_DIR``, else the DOCA install directory for this machine's architecture."""
    return os.environ.get("DOCA_LIB_DIR") or f"/opt/mellanox/doca/lib/{platform.machine()}-linux-gnu"


def load(lib_dir: str | None = None) -> "Doca":
    """The bound DOCA libraries of ``lib_dir`` (default :func:`default_lib_dir`), loaded once."""
    lib_dir = os.path.abspath(lib_dir or default_lib_dir())
    if lib_dir not in _LOADED:
        _LOADED[lib_dir] = Doca(lib_dir)
    return _LOADED[lib_dir]


class Doca:
    """The DOCA functions this agent uses, bound with ctypes from one library directory.

    Each function is an attribute of the same name. Functions returning ``doca_error_t``
    raise :class:`DocaError` unless the result is in ``ok`` (keyword, default success
    only) and return the code. Created by :func:`load`; used by the transport classes.
    """

    def __init__(self, lib_dir: str):
        self.lib_dir = lib_dir
        for part, prototypes in _PROTOTYPES.items():
            path = os.path.join(lib_dir, f"libdoca_{part}.so")
            if not os.path.exists(path):
                raise DocaUnavailable(f"DOCA library not found: {path} (install DOCA, or set DOCA_LIB_DIR "
                                      "to the directory holding libdoca_common.so, libdoca_dma.so and "
                                      "libdoca_comch.so)")
            try:
                lib = ctypes.CDLL(path)
            except OSError as err:
                raise DocaUnavailable(f"cannot load DOCA library {path}: {err}") from err
            for name, restype, argtypes, *older in prototypes:
                fn = self._symbol(lib, path, name, older)
                fn.restype, fn.argtypes = restype, argtypes
                setattr(self, name, self._checked(name, fn) if restype is _ERR else fn)

    @staticmethod
    def _symbol(lib, path, name, older):
        for candidate in (name, *older):
            try:
                return getattr(lib, candidate)
            except AttributeError:
                continue
        raise DocaUnavailable(f"{path} has no symbol {name} (DOCA 2.5 or newer is needed)")

    @staticmethod
    def _checked(name, fn):
        def call(*args, ok=(DOCA_SUCCESS,)):
            code = fn(*args)
            if code not in ok:
                raise DocaError(name, code)
            return code
        call.__name__ = call.__qualname__ = name
        return call


# ----------------------------------------------------------------------------- memory
class _Pages:
    """Page-aligned anonymous memory viewed as one numpy array (DMA-able, registrable)."""

    def __init__(self, dtype, shape):
        self.nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
        self.length = max(PAGE, -(-self.nbytes // PAGE) * PAGE)
        self._map = mmap.mmap(-1, self.length)
        self.array = np.frombuffer(self._map, dtype=dtype, count=int(np.prod(shape))).reshape(shape)
        self.addr = self.array.ctypes.data if self.array.size else \
            np.frombuffer(self._map, dtype=np.uint8, count=1).ctypes.data

    def close(self):
        self.array = None
        try:
            self._map.close()
        except BufferError:  # a caller still holds a view; the mapping goes with it
            pass


# ----------------------------------------------------------------------------- both sides
class _DocaSide:
    """What both sides own: the device, one progress engine and a Comch endpoint that
    carries pickled dicts (framing, send completion, receive queue). Not used directly."""

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
        self._inbox, self._parts = deque(), []
        self._sending, self._send_failures, self._cb_errors = {}, [], []  # _sending: task -> its frame
        self._closed = False
        # ctypes callbacks: kept alive as long as this object (DOCA holds raw pointers to them)
        self._send_cb = TASK_CB(self._on_send_done)
        self._recv_cb = RECV_CB(self._on_recv)

    # ------------------------------------------------------------ device & engine
    def _open_device(self) -> None:
        """devinfo list -> the device with our PCI address -> DMA memcpy capable -> open."""
        d = self.doca
        devs, count = _PP(), c_uint32()
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
    def _connected(self) -> bool:
        raise NotImplementedError

    def _send_alloc(self, frame, length, task) -> int:
        raise NotImplementedError

    def _gone(self, why: str) -> ConnectionResetError:
        return ConnectionResetError(f"Comch connection '{self.name}' is closed ({why})")

    def _send_msg(self, msg: dict) -> None:
        """Pickle ``msg``, send it as frames of at most ``max_msg`` bytes, wait for completion."""
        self.doca.doca_pe_progress(self.pe)  # notice a vanished peer before sending
        if not self._connected():
            raise self._gone("the peer went away")
        payload = pickle.dumps(msg, protocol=5)  # host and DPU Pythons may differ
        step = self.max_msg - 1
        count = max(1, -(-len(payload) // step))
        for i in range(count):
            self._send_frame((_LAST if i == count - 1 else _MORE) + payload[i * step:(i + 1) * step])
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
                if err.code in _GONE:
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
                if err.code in _GONE:
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
            if self._conn is not None and conn != self._conn:
                return  # not our trainer (see DocaAgentTransport._on_connect)
            frame = ctypes.string_at(buf, length)
            self._parts.append(frame[1:])
            if frame[:1] == _LAST:
                self._inbox.append(b"".join(self._parts))
                self._parts = []
        except BaseException as err:  # noqa: BLE001
            self._cb_errors.append(err)

    def _next_msg(self, timeout: float | None = None):
        """Next whole message, or None when the peer has gone (or ``timeout`` passed)."""
        self._progress_until(lambda: self._inbox or not self._connected(), timeout)
        return pickle.loads(self._inbox.popleft()) if self._inbox else None

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
        """Steps that release the progress engine and the device (last in every teardown)."""
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


# ----------------------------------------------------------------------------- trainer side
class DocaHostEndpoint(_DocaSide):
    """Trainer side of the DOCA transport (x86 host), driven by ``RemoteAgentClient``.

    Owns the device, a Comch client connected to the agent's server ``name``, and every
    table's regions: page-aligned host memory registered in mmaps exported for PCI
    read-write access by the DPU. Interface: ``new_table``, ``region``, ``send``,
    ``recv``, ``poll``, ``close``.
    """

    def __init__(self, pci_addr: str, name: str, connect_timeout: float = 60.0):
        super().__init__(pci_addr, name)
        self.client = None
        self.tables = {}  # table -> {region: (_Pages, mmap)}
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

    # ------------------------------------------------------------ host-endpoint interface
    def new_table(self, table: int, num_rows: int, dim: int) -> dict:
        """Allocate and export the table's regions; returns what the agent needs to import
        them: per region the export descriptor, host address, size, dtype and shape."""
        if table in self.tables:
            raise ValueError(f"table {table} already has regions")
        owned, regions = {}, {}
        self.tables[table] = owned  # closed with the endpoint even if this fails half-way
        for name, (dtype, shape) in region_layout(num_rows, dim).items():
            pages = _Pages(dtype, shape)
            mm = self._register(pages.addr, pages.length, ACCESS_PCI_READ_WRITE)
            owned[name] = (pages, mm)
            desc, desc_len = c_void_p(), c_size_t()
            self.doca.doca_mmap_export_pci(mm, self.dev, byref(desc), byref(desc_len))
            regions[name] = dict(desc=ctypes.string_at(desc, desc_len.value), addr=pages.addr,
                                 nbytes=pages.nbytes, dtype=np.dtype(dtype).str, shape=tuple(shape))
        return regions

    def region(self, table: int, name: str) -> np.ndarray:
        return self.tables[table][name][0].array

    def send(self, msg: dict) -> None:
        self._send_msg(msg)

    def recv(self):
        msg = self._next_msg()
        if msg is None:
            raise EOFError(f"the agent behind Comch service '{self.name}' went away")
        return msg

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


# ----------------------------------------------------------------------------- agent side
class _Region:
    """One trainer region as the agent sees it: the imported remote mmap and a local
    staging buffer of the same layout registered in a local mmap."""

    def __init__(self, remote_mmap, remote_addr, nbytes, pages, local_mmap):
        self.remote_mmap, self.remote_addr, self.nbytes = remote_mmap, remote_addr, nbytes
        self.pages, self.local_mmap = pages, local_mmap
        self.local = pages.array
        self.row_bytes = self.local.itemsize * int(np.prod(self.local.shape[1:]))


class DocaAgentTransport(_DocaSide, AgentTransport):
    """Agent side of the DOCA transport (on the DPU), driven by ``serve_forever``.

    Owns the device and its representor, a Comch server named ``name`` (serving the first
    trainer that connects), a DMA context with a buffer inventory, and per table the
    imported trainer regions plus local staging buffers. Implements ``AgentTransport``.
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
        d, reps, count = self.doca, _PP(), c_uint32()
        d.doca_devinfo_rep_create_list(self.dev, REP_FILTER_NET, byref(reps), byref(count))
        try:
            for i in range(count.value):
                if self.rep_pci is not None:
                    equal = c_uint8()
                    d.doca_devinfo_rep_is_equal_pci_addr(reps[i], self.rep_pci.encode(), byref(equal))
                    if not equal.value:
                        continue
                rep = c_void_p()
                d.doca_dev_rep_open(reps[i], byref(rep))
                self.rep = rep.value
                break
        finally:
            d.doca_devinfo_rep_destroy_list(reps)
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
                return pickle.loads(self._inbox.popleft())
            if self._peer_gone:
                return None
            self._progress_until(lambda: self._inbox or self._peer_gone)

    def send(self, msg: dict) -> None:
        self._send_msg(msg)

    def attach(self, table, num_rows, dim, regions):
        """Import the trainer's exported regions and set up local staging buffers."""
        if table in self.tables:
            raise ValueError(f"table {table} is already attached")
        attached = {}
        self.tables[table] = attached  # released by close() even if this fails half-way
        for name, (dtype, shape) in region_layout(num_rows, dim).items():
            info = regions[name]
            if np.dtype(info["dtype"]) != np.dtype(dtype) or tuple(info["shape"]) != tuple(shape):
                raise ValueError(f"region '{name}' of table {table}: trainer announced {info['dtype']} "
                                 f"{tuple(info['shape'])}, expected {np.dtype(dtype).str} {tuple(shape)}")
            remote = c_void_p()
            self.doca.doca_mmap_create_from_export(None, info["desc"], len(info["desc"]), self.dev,
                                                   byref(remote))
            pages = _Pages(dtype, shape)
            try:
                local = self._register(pages.addr, pages.length, ACCESS_LOCAL_READ_WRITE)
            except BaseException:
                self.doca.doca_mmap_destroy(remote)
                pages.close()
                raise
            attached[name] = _Region(remote.value, int(info["addr"]), int(info["nbytes"]), pages, local)

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


__all__ = ["Doca", "DocaAgentTransport", "DocaError", "DocaHostEndpoint", "DocaUnavailable",
           "default_lib_dir", "load"]
