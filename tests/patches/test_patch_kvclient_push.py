"""patches.kvclient_push: one KVClient's push replaced on the instance, then DGL's again."""
import pytest

import dgl
from dgl.distributed.kvstore import KVClient
from patches import kvclient_push
from patches._dgl_version import UnsupportedDGLVersion


class _Router:
    def push(self, name, id_tensor, data_tensor):
        return ("routed", name, id_tensor, data_tensor)


@pytest.fixture
def client():
    assert not kvclient_push.is_installed()
    kv = KVClient.__new__(KVClient)  # DGL's class; its constructor needs a cluster
    assert "push" not in vars(kv)
    yield kv
    kvclient_push.uninstall()


def test_install_twice_then_uninstall(client):
    router = _Router()
    kvclient_push.install(client, router.push)
    assert client.push("emb", 3, 4) == ("routed", "emb", 3, 4)
    assert KVClient.push is KVClient.__dict__["push"]  # the class stays DGL's
    kvclient_push.install(client, router.push)  # the same push again: a no-op
    with pytest.raises(RuntimeError, match="uninstall"):
        kvclient_push.install(client, _Router().push)
    with pytest.raises(RuntimeError, match="uninstall"):
        kvclient_push.install(KVClient.__new__(KVClient), router.push)
    kvclient_push.uninstall()
    assert "push" not in vars(client) and client.push.__func__ is KVClient.__dict__["push"]
    assert not kvclient_push.is_installed()
    kvclient_push.uninstall()
    assert "push" not in vars(client)


def test_an_own_push_the_instance_had_is_put_back(client):
    own = _Router().push
    client.push = own
    kvclient_push.install(client, print)
    assert client.push is print
    kvclient_push.uninstall()
    assert vars(client)["push"] is own


def test_another_dgl_is_refused(client, monkeypatch):
    monkeypatch.setattr(dgl, "__version__", "2.3.1")
    with pytest.raises(UnsupportedDGLVersion, match=r"patches\.kvclient_push.*DGL 2\.3\.1.*2\.1\.x"):
        kvclient_push.install(client, print)
    assert "push" not in vars(client)
