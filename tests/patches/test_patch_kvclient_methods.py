"""patches.kvclient_pull / kvclient_push: one KVClient method replaced on the instance, then DGL's again."""
import pytest

import dgl
from dgl.distributed.kvstore import KVClient
from patches import kvclient_pull, kvclient_push
from patches._dgl_version import UnsupportedDGLVersion


class _Router:
    def pull(self, name, id_tensor):
        return ("routed", name, id_tensor)

    def push(self, name, id_tensor, data_tensor):
        return ("routed", name, id_tensor, data_tensor)


PATCHES = {"pull": (kvclient_pull, ("emb", 3)), "push": (kvclient_push, ("emb", 3, 4))}


@pytest.fixture(params=sorted(PATCHES))
def case(request):
    method = request.param
    patch, args = PATCHES[method]
    assert not patch.is_installed()
    kv = KVClient.__new__(KVClient)  # DGL's class; its constructor needs a cluster
    assert method not in vars(kv)
    yield method, patch, args, kv
    patch.uninstall()


def test_install_twice_then_uninstall(case):
    method, patch, args, client = case
    router = _Router()
    patch.install(client, getattr(router, method))
    assert getattr(client, method)(*args) == ("routed", *args)
    assert getattr(KVClient, method) is KVClient.__dict__[method]  # the class stays DGL's
    patch.install(client, getattr(router, method))  # a new bound method object, the same method: a no-op
    with pytest.raises(RuntimeError, match="uninstall"):
        patch.install(client, getattr(_Router(), method))
    with pytest.raises(RuntimeError, match="uninstall"):
        patch.install(KVClient.__new__(KVClient), getattr(router, method))
    patch.uninstall()
    assert method not in vars(client) and getattr(client, method).__func__ is KVClient.__dict__[method]
    assert not patch.is_installed()
    patch.uninstall()  # a no-op when not installed
    assert method not in vars(client)


def test_an_own_method_the_instance_had_is_put_back(case):
    method, patch, _, client = case
    own = getattr(_Router(), method)
    setattr(client, method, own)
    patch.install(client, print)
    assert getattr(client, method) is print
    patch.uninstall()
    assert vars(client)[method] is own


def test_another_dgl_is_refused(case, monkeypatch):
    method, patch, _, client = case
    monkeypatch.setattr(dgl, "__version__", "2.3.1")
    with pytest.raises(UnsupportedDGLVersion, match=rf"patches\.kvclient_{method}.*DGL 2\.3\.1.*2\.1\.x"):
        patch.install(client, print)
    assert method not in vars(client)
