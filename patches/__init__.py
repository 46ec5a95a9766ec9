"""Every change dgl-sni makes to DGL's objects, one module per change.

Each module has ``install(...)`` (idempotent: installing the same thing twice is a
no-op), ``uninstall()`` (puts DGL's original object back, identical), ``is_installed()``,
and refuses a DGL it was not written for (2.1.x; :mod:`patches._dgl_version`). Importing
a module imports no DGL; only ``install`` does. The modules import only the standard
library, torch and dgl, and take what they install from the caller.

* :mod:`~patches.graphbolt_optional` -- ``dgl.graphbolt`` imports without its C++
  library (torch 2.13 has none); installed by :func:`apply`, before ``import dgl``.
* :mod:`~patches.kvstore_lazy_init` -- ``rpc.copy_data_to_shared_memory`` skips a
  zero-stride zeros source, so tier-backed shards touch no shared memory (servers).
* :mod:`~patches.partition_assignment` -- ``partition.random_choice`` returns a given
  node assignment, so ``partition_graph`` writes it (``dgl_sni.partition``).
* :mod:`~patches.dist_tensor_class` -- ``dgl.distributed.DistTensor`` and
  ``dist_graph.DistTensor`` become a given subclass (SNI's ``enable``).
* :mod:`~patches.distgraph_init_hook` -- ``DistGraph.__init__`` calls a hook with the
  new graph (SNI's ``enable``).
* :mod:`~patches.initialize_hook` -- ``dgl.distributed.initialize`` calls hooks before
  and after DGL's (SNI's ``DGL_SNI=1`` autoenable).
* :mod:`~patches.kvclient_pull` -- one KVClient instance's ``pull`` is replaced (SNI's
  KVClient).
* :mod:`~patches.kvclient_push` -- one KVClient instance's ``push`` is replaced (SNI's
  KVClient sees this machine's writes).
* :mod:`~patches.rpc_waits` -- DGL's RPC client and server retry connecting after 0.05 s,
  doubling, instead of fixed 1-3 s sleeps, and rank 0 lets its shut-down requests leave
  before finalizing (``dgl_sni.worker``).
* :mod:`~patches.dgl_import_hook` -- hooks around the first ``import dgl`` of a process
  (the start-up ``dgl_sni_startup.pth``: :func:`apply` before, ``import dgl_sni`` after),
  so scripts that never import ``dgl_sni`` work too.

``apply()`` is idempotent and runs before the first ``import dgl``; ``dgl_sni``
calls it on import, so users never edit site-packages. It

* installs :mod:`~patches.graphbolt_optional`, and
* points DGL's and torch's caches away from the home folder, so importing
  writes nothing to ``~``.
"""
import os
import sys

# Kept light: the start-up ``.pth`` imports this package in every Python process.
from . import dgl_import_hook as _dgl_import_hook

_APPLIED = False


def _default_cache_dir(name):
    import tempfile
    return os.path.join(tempfile.gettempdir(), f"dgl-sni-{os.getuid()}", name)


def apply():
    """Install every shim; safe to call many times, must run before ``import dgl``."""
    global _APPLIED
    if _APPLIED:
        return
    os.environ.setdefault("DGLBACKEND", "pytorch")
    os.environ.setdefault("DGLDEFAULTDIR", _default_cache_dir("dgl"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _default_cache_dir("torchinductor"))
    # inside the start-up hook's ``import dgl`` the module exists but its body has not run yet
    if "dgl" in sys.modules and "dgl.graphbolt" not in sys.modules and not _dgl_import_hook.loading():
        raise RuntimeError(
            "dgl was imported before dgl_sni/patches; import dgl_sni (or call "
            "patches.apply()) before 'import dgl'"
        )
    import warnings

    from .graphbolt_optional import install as _install_graphbolt_shim
    _install_graphbolt_shim()
    # DGL 2.1 imports torchdata.datapipes, which warns on every import; not actionable.
    warnings.filterwarnings("ignore", message=r"(?s).*'datapipes', 'dataloader2' modules are deprecated")
    _APPLIED = True
