"""What DGL 2.1.0 needs shimmed to run with torch 2.13 on these machines.

``apply()`` is idempotent and runs before the first ``import dgl``; ``dgl_sni``
calls it on import, so users never edit site-packages. It

* makes DGL's graphbolt loader optional (the wheel ships graphbolt libraries for
  torch <= 2.2.1 only; ``dgl.distributed`` does not need graphbolt), and
* points DGL's and torch's caches away from the home folder, so importing
  writes nothing to ``~``.
"""
import os
import sys
import tempfile
import warnings

from .graphbolt_optional import install as _install_graphbolt_shim

_APPLIED = False


def _default_cache_dir(name):
    return os.path.join(tempfile.gettempdir(), f"dgl-sni-{os.getuid()}", name)


def apply():
    """Install every shim; safe to call many times, must run before ``import dgl``."""
    global _APPLIED
    if _APPLIED:
        return
    os.environ.setdefault("DGLBACKEND", "pytorch")
    os.environ.setdefault("DGLDEFAULTDIR", _default_cache_dir("dgl"))
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", _default_cache_dir("torchinductor"))
    if "dgl" in sys.modules and "dgl.graphbolt" not in sys.modules:
        raise RuntimeError(
            "dgl was imported before dgl_sni/patches; import dgl_sni (or call "
            "patches.apply()) before 'import dgl'"
        )
    _install_graphbolt_shim()
    # DGL 2.1 imports torchdata.datapipes, which warns on every import; not actionable.
    warnings.filterwarnings("ignore", message=r"(?s).*'datapipes', 'dataloader2' modules are deprecated")
    _APPLIED = True
