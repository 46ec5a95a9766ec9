"""dgl-sni: exact and communication-efficient full-graph training for DistDGL.

Importing ``dgl_sni`` applies the DGL compatibility shims in ``patches``. Scripts need not
import it: installing the package puts a start-up hook in site-packages
(``dgl_sni_startup.pth``, :mod:`patches.dgl_import_hook`) that applies the shims when a
process first imports ``dgl`` and then imports ``dgl_sni``, whose ``DGL_SNI=1`` /
``DGL_SNI_CONFIG`` switch (:mod:`dgl_sni.sni.kvstore`) is then on with no line of the
script changed. Without those variables nothing of DGL's is changed beyond the shims.
"""
import patches as _patches

_patches.apply()

__version__ = "0.1.0"


def train(build_model=None, config=None):
    """Train full-graph on the emulated cluster, as ``dgl-sni train`` does, and return the
    metrics. ``build_model``: ``build(in_feats, num_classes, cfg) -> nn.Module``, a model of
    DGL layers with ``forward(blocks, x)`` (docs/models.md); ``config``: settings by name
    (``{"dataset": "cora", "workers": 4, "preset": "fast"}``). See :mod:`dgl_sni.run`.
    """
    from .run import train as _train
    return _train(build_model, config)


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
    from .config.sni import switch_on
    if os.environ.get("DGL_SNI_CONFIG") or switch_on():
        from .sni.kvstore import install_autoenable
        install_autoenable()


_autoenable_from_env()
