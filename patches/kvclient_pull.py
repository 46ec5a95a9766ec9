"""Route one KVClient's ``pull`` through a replacement.

``DistTensor.__getitem__`` reads rows with ``self.kvstore.pull(name, ids)``; binding
``pull`` on the trainer's KVClient instance (its class stays DGL's) sends every read of
every DistTensor there. The replacement decides per tensor and may call the
client's original ``pull`` (the bound method taken before :func:`install`).
"""
from ._dgl_version import WRITTEN_FOR, check

DGL_VERSIONS = WRITTEN_FOR
_ABSENT = object()  # the instance had no own ``pull`` (DGL's case)
_client = None  # the patched KVClient while installed
_saved = _ABSENT  # what its instance dict held under ``pull`` before
_pull = None


def install(client, pull) -> None:
    """Make ``client.pull(name, id_tensor)`` call ``pull(name, id_tensor)``. Installing the
    same pull on the same client again is a no-op; anything else needs :func:`uninstall`
    first. Called by ``dgl_sni.sni.kvstore.SNIKVClient``."""
    global _client, _saved, _pull
    import dgl
    check(__name__, dgl.__version__, DGL_VERSIONS)
    if _client is not None:
        if client is _client and pull == _pull:
            return
        raise RuntimeError(f"patch {__name__!r} is installed on another client or with another "
                           f"pull; uninstall() first")
    _client, _saved, _pull = client, vars(client).get("pull", _ABSENT), pull
    client.pull = pull


def uninstall() -> None:
    """Give the client DGL's ``pull`` back (a no-op when not installed)."""
    global _client, _saved, _pull
    if _client is None:
        return
    if _saved is _ABSENT:
        del _client.pull
    else:
        _client.pull = _saved
    _client, _saved, _pull = None, _ABSENT, None


def is_installed() -> bool:
    """Whether a KVClient's ``pull`` is replaced."""
    return _client is not None
