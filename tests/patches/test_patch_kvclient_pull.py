"""patches.kvclient_pull: one KVClient's pull replaced on the instance, then DGL's again."""
import pytest

import dgl
from dgl.distributed.kvstore import KVClient
from patches import kvclient_pull
from patches._dgl_version import UnsupportedDGLVersion


class _Router:
    def pull(self, name, id_tensor):
        return ("routed", name, id_tensor)


@pytest.fixture
def client(monkeypatch):  # monkeypatch undoes its stand-ins after uninstall
    assert not kvclient_pull.is_installed()
    kv = KVClient.__new__(KVClient)  # DGL's class; its constructor needs a cluster
    assert "pull" not in vars(kv)
    yield kv
    kvclient_pull.uninstall()


def test_install_twice_then_uninstall(client):
    router = _Router()
    kvclient_pull.install(client, router.pull)
    assert client.pull == router.pull and client.pull("emb", 3) == ("routed", "emb", 3)
    assert KVClient.pull is KVClient.__dict__["pull"]  # the class stays DGL's
    kvclient_pull.install(client, router.pull)  # a new bound method object, the same pull
    assert vars(client)["pull"] == router.pull
    with pytest.raises(RuntimeError, match="uninstall"):
        kvclient_pull.install(client, _Router().pull)
    with pytest.raises(RuntimeError, match="uninstall"):
        kvclient_pull.install(KVClient.__new__(KVClient), router.pull)
    kvclient_pull.uninstall()
    assert "pull" not in vars(client) and client.pull.__func__ is KVClient.__dict__["pull"]
    assert not kvclient_pull.is_installed()
    kvclient_pull.uninstall()
    assert "pull" not in vars(client)


def test_an_own_pull_the_instance_had_is_put_back(client):
    own = _Router().pull
    client.pull = own
    kvclient_pull.install(client, print)
    assert client.pull is print
    kvclient_pull.uninstall()
    assert vars(client)["pull"] is own


def test_another_dgl_is_refused(client, monkeypatch):
    monkeypatch.setattr(dgl, "__version__", "2.3.1")
    with pytest.raises(UnsupportedDGLVersion, match=r"patches\.kvclient_pull.*DGL 2\.3\.1.*2\.1\.x"):
        kvclient_pull.install(client, print)
    assert "pull" not in vars(client)
