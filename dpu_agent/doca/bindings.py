"""ctypes bindings of the DOCA C API: constants, prototypes, errors, library loading.

Only the functions in ``_PROTOTYPES`` are bound; their prototypes are declared here from
NVIDIA's public DOCA 2.x documentation (no SDK header is used). Libraries:
``libdoca_common.so``, ``libdoca_dma.so``, ``libdoca_comch.so`` in ``$DOCA_LIB_DIR``, else in
``/opt/mellanox/doca/lib/<arch>-linux-gnu``. Comch needs DOCA 2.5 or newer. The tests load
a simulated SDK (``tests/doca_sim``) through the same path.
"""
from __future__ import annotations

import ctypes
import os
import platform
from ctypes import (CFUNCTYPE, POINTER, c_char_p, c_int, c_size_t, c_uint8, c_uint32, c_uint64,
                    c_void_p)

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
GONE_ERRORS = (DOCA_ERROR_NOT_CONNECTED, DOCA_ERROR_CONNECTION_RESET, DOCA_ERROR_CONNECTION_ABORTED,
         DOCA_ERROR_BAD_STATE)
# enum doca_ctx_states (doca_ctx.h)
CTX_IDLE, CTX_STARTING, CTX_RUNNING, CTX_STOPPING = 0, 1, 2, 3
# enum doca_access_flag (doca_types.h)
ACCESS_PCI_READ_WRITE = 1 << 5


# ----------------------------------------------------------------------------- prototypes
_P = c_void_p  # every DOCA object is an opaque pointer
_PP = POINTER(c_void_p)
PTR_LIST = _PP  # an array of opaque pointers (the device list)
_ERR = c_int  # doca_error_t
# union doca_data { void *ptr; uint64_t u64; } travels by value in one 8-byte integer
# register on x86-64 (SysV) and AArch64 (AAPCS64), exactly like a uint64_t; ctypes does not
# pass unions by value reliably, so it is declared as uint64.
_DATA = c_uint64

# doca_comch_task_send_completion_cb_t:
#   void (*)(struct doca_comch_task_send *task, union doca_data task_user_data,
#            union doca_data ctx_user_data)
TASK_CB = CFUNCTYPE(None, _P, _DATA, _DATA)
# doca_comch_event_msg_recv_cb_t:
#   void (*)(struct doca_comch_event_msg_recv *, uint8_t *recv_buffer, uint32_t msg_len,
#            struct doca_comch_connection *)
RECV_CB = CFUNCTYPE(None, _P, POINTER(c_uint8), c_uint32, _P)

# (name, restype, argtypes); restype _ERR is checked, others are not
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
        ("doca_mmap_create", _ERR, [POINTER(_P)]),
        ("doca_mmap_add_dev", _ERR, [_P, _P]),
        ("doca_mmap_set_permissions", _ERR, [_P, c_uint32]),
        ("doca_mmap_set_memrange", _ERR, [_P, _P, c_size_t]),
        ("doca_mmap_start", _ERR, [_P]),
        ("doca_mmap_export_pci", _ERR, [_P, _P, POINTER(_P), POINTER(c_size_t)]),
        ("doca_mmap_destroy", _ERR, [_P]),
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
    ),
    "comch": (
        ("doca_comch_cap_get_max_msg_size", _ERR, [_P, POINTER(c_uint32)]),
        ("doca_comch_cap_client_is_supported", _ERR, [_P]),
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
    """The DOCA functions the trainer side uses, bound with ctypes from one library directory.

    Each function is an attribute of the same name. Functions returning ``doca_error_t``
    raise :class:`DocaError` unless the result is in ``ok`` (keyword, default success
    only) and return the code. Created by :func:`load`; used by
    :class:`~dpu_agent.doca.side.DocaSide`.
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
            for name, restype, argtypes in prototypes:
                try:
                    fn = getattr(lib, name)
                except AttributeError:
                    raise DocaUnavailable(f"{path} has no symbol {name} (DOCA 2.5 or newer is needed)") from None
                fn.restype, fn.argtypes = restype, argtypes
                setattr(self, name, self._checked(name, fn) if restype is _ERR else fn)

    @staticmethod
    def _checked(name, fn):
        def call(*args, ok=(DOCA_SUCCESS,)):
            code = fn(*args)
            if code not in ok:
                raise DocaError(name, code)
            return code
        call.__name__ = call.__qualname__ = name
        return call

