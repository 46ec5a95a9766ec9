"""patches.kvstore_lazy_init: rpc.copy_data_to_shared_memory wrapped once, restored exactly."""
import pytest
import torch

import dgl
from dgl.distributed import kvstore, rpc
from patches import kvstore_lazy_init
from patches._dgl_version import UnsupportedDGLVersion


@pytest.fixture
def original(monkeypatch):  # monkeypatch undoes its stand-ins after uninstall
    was = kvstore_lazy_init.is_installed()
    kvstore_lazy_init.uninstall()
    yield rpc.copy_data_to_shared_memory
    kvstore_lazy_init.uninstall()
    monkeypatch.undo()
    if was:  # another test of this process installed it
        kvstore_lazy_init.install()


def test_install_twice_then_uninstall(original):
    kvstore_lazy_init.install()
    wrapped = rpc.copy_data_to_shared_memory
    assert wrapped is not original and kvstore.rpc.copy_data_to_shared_memory is wrapped
    kvstore_lazy_init.install()
    assert rpc.copy_data_to_shared_memory is wrapped
    kvstore_lazy_init.uninstall()
    assert rpc.copy_data_to_shared_memory is original
    kvstore_lazy_init.uninstall()
    assert rpc.copy_data_to_shared_memory is original


def test_wrapped_copy_skips_lazy_zeros_only(original, monkeypatch):
    calls = []
    monkeypatch.setattr(rpc, "copy_data_to_shared_memory", lambda dst, src: calls.append(src))
    kvstore_lazy_init.install()
    dst = torch.empty(4, 3)
    rpc.copy_data_to_shared_memory(dst, kvstore_lazy_init.lazy_zeros((4, 3), torch.float32))
    assert calls == []
    dense = torch.zeros(4, 3)
    rpc.copy_data_to_shared_memory(dst, dense)
    assert len(calls) == 1 and calls[0] is dense
    kvstore_lazy_init.uninstall()


def test_another_dgl_is_refused(original, monkeypatch):
    monkeypatch.setattr(dgl, "__version__", "2.2.1")
    with pytest.raises(UnsupportedDGLVersion, match=r"patches\.kvstore_lazy_init.*DGL 2\.2\.1.*2\.1\.x"):
        kvstore_lazy_init.install()
    assert rpc.copy_data_to_shared_memory is original and not kvstore_lazy_init.is_installed()
