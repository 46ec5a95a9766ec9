"""Route one KVClient's ``pull`` through a replacement.

``DistTensor.__getitem__`` reads rows with ``self.kvstore.pull(name, ids)``; binding
``pull`` on the trainer's KVClient instance (its class stays DGL's) sends every read of
every DistTensor there. The replacement decides per tensor and may call the
client's original ``pull`` (the bound method taken before :func:`install`).
"""
from ._dgl_version import WRITTEN_FOR
from ._instance_method import InstanceMethod

DGL_VERSIONS = WRITTEN_FOR
_PATCH = InstanceMethod(__name__, "pull")


def install(client, pull) -> None:
    """Make ``client.pull(name, id_tensor)`` call ``pull(name, id_tensor)``. Installing the
    same pull on the same client again is a no-op; anything else needs :func:`uninstall`
    first. Called by ``dgl_sni.sni.kvstore.SNIKVClient``."""
    _PATCH.install(client, pull)


def uninstall() -> None:
    """Give the client DGL's ``pull`` back (a no-op when not installed)."""
    _PATCH.uninstall()


def is_installed() -> bool:
    """Whether a KVClient's ``pull`` is replaced."""
    return _PATCH.is_installed()
