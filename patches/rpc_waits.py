"""DGL's RPC start-up and shut-down waits, shortened (the results are unchanged).

DGL 2.1 connects a trainer to its servers, and a server to the trainers, in loops that
sleep a fixed time between tries: a server sleeps 3 s before its first try to reach the
trainers' receivers, then 1 s between tries (``dgl.distributed.rpc_server``; the trainer's
loop in ``rpc_client`` sleeps 3 s). At exit, the trainer of rank 0 sends the servers their
shut-down requests and at once finalizes its sender, whose C++ side sleeps a whole second
when its queue still holds a message. On the test graph these waits were 4 s of a 15 s run.

* ``rpc_client`` and ``rpc_server`` get their own ``time``: the standard module, except
  that ``sleep(s)`` waits 0.05 s at its first call and twice as long at each next one,
  never more than ``s``. The loops try again as soon as the peer could be there; their
  number of tries is DGL's, so a slow peer is waited for about as long as before.
* ``dist_context._shutdown_servers`` waits 0.05 s after sending the requests, so the
  sender's queue is empty when ``finalize_client`` looks.

Installed by ``dgl_sni.worker`` (servers and trainers of ``dgl-sni train``) before
``dgl.distributed.initialize``.
"""
import time as _time

from ._dgl_version import WRITTEN_FOR, check

DGL_VERSIONS = WRITTEN_FOR
FIRST_WAIT = 0.05  # seconds of the first sleep; each next one doubles, up to what DGL asked for
DRAIN_WAIT = 0.05  # seconds for the shut-down requests to leave the sender's queue
_MODULES = ("dgl.distributed.rpc_client", "dgl.distributed.rpc_server")
_installed = {}  # module name -> what it had before (its ``time``, or DGL's ``_shutdown_servers``)


class BackoffTime:
    """The ``time`` module with a doubling ``sleep``, capped at the time asked for."""

    def __init__(self):
        self._next = FIRST_WAIT

    def sleep(self, seconds: float) -> None:
        wait = min(float(seconds), self._next)
        self._next = min(2 * self._next, 3600.0)
        _time.sleep(wait)

    def __getattr__(self, name):
        return getattr(_time, name)


def _draining(shutdown_servers):
    def _shutdown_servers():
        shutdown_servers()
        _time.sleep(DRAIN_WAIT)
    _shutdown_servers.__wrapped__ = shutdown_servers
    return _shutdown_servers


def install() -> None:
    """Give DGL's RPC client and server modules a :class:`BackoffTime` and drain the
    shut-down requests before finalizing (a no-op when installed)."""
    import importlib

    import dgl
    check(__name__, dgl.__version__, DGL_VERSIONS)
    if _installed:
        return
    for name in _MODULES:
        module = importlib.import_module(name)
        _installed[name] = module.time
        module.time = BackoffTime()
    from dgl.distributed import dist_context
    _installed["dgl.distributed.dist_context"] = dist_context._shutdown_servers
    dist_context._shutdown_servers = _draining(dist_context._shutdown_servers)


def uninstall() -> None:
    """Put DGL's objects back (a no-op when not installed)."""
    import importlib
    for name, original in list(_installed.items()):
        module = importlib.import_module(name)
        if name.endswith("dist_context"):
            module._shutdown_servers = original
        else:
            module.time = original
        del _installed[name]


def is_installed() -> bool:
    """Whether DGL's RPC waits are shortened."""
    return bool(_installed)
