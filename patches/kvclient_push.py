"""Route one KVClient's ``push`` through a replacement.

``DistTensor.__setitem__`` writes rows with ``self.kvstore.push(name, ids, data)``;
binding ``push`` on the trainer's KVClient instance (its class stays DGL's) lets the
stock-script switch see every write this machine makes (which tensors follow the
exchange pattern, which cached rows a write makes stale). The replacement calls the
client's original ``push`` (the bound method taken before :func:`install`).
"""
from ._dgl_version import WRITTEN_FOR
from ._instance_method import InstanceMethod

DGL_VERSIONS = WRITTEN_FOR
_PATCH = InstanceMethod(__name__, "push")


def install(client, push) -> None:
    """Make ``client.push(name, id_tensor, data_tensor)`` call ``push(...)`` with the same
    arguments. Installing the same push on the same client again is a no-op; anything
    else needs :func:`uninstall` first. Called by ``dgl_sni.sni.kvstore.SNIKVClient``."""
    _PATCH.install(client, push)


def uninstall() -> None:
    """Give the client DGL's ``push`` back (a no-op when not installed)."""
    _PATCH.uninstall()


def is_installed() -> bool:
    """Whether a KVClient's ``push`` is replaced."""
    return _PATCH.is_installed()
