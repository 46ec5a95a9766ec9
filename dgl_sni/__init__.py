"""dgl-sni: exact and communication-efficient full-graph training for DistDGL.

Importing ``dgl_sni`` applies the DGL compatibility shims in ``patches`` first, so it
must come before ``import dgl`` in user scripts.
"""
import patches as _patches

_patches.apply()

__version__ = "0.1.0"


def enable(config=None, graph=None):
    """Switch in-network prediction on for this trainer (after ``dgl.distributed.initialize``).

    ``config``: an :class:`~dgl_sni.config.SNIConfig`, a dict of its fields, or None
    (``DGL_SNI_CONFIG``/defaults). See :mod:`dgl_sni.sni.kvstore`.
    """
    from .sni.kvstore import enable as _enable
    return _enable(config, graph)


def sni_stats():
    """Per managed tensor: rows pulled, served, predicted (empty when SNI is off)."""
    from .sni.kvstore import sni_stats as _stats
    return _stats()


def __getattr__(name):
    if name == "SNIDistTensor":
        from .sni.kvstore import SNIDistTensor
        return SNIDistTensor
    raise AttributeError(name)


def _autoenable_from_env():
    import os
    if os.environ.get("DGL_SNI_CONFIG") or os.environ.get("DGL_SNI", "").strip().lower() not in (
            "", "0", "false", "no", "off"):
        from .sni.kvstore import install_autoenable
        install_autoenable()


_autoenable_from_env()
