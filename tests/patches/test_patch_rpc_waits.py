"""patches.rpc_waits: DGL's RPC modules sleep with a doubling backoff and drain the shut-down
requests; everything restored exactly."""
import time

import pytest

import dgl
from dgl.distributed import dist_context, rpc_client, rpc_server
from patches import rpc_waits
from patches._dgl_version import UnsupportedDGLVersion


@pytest.fixture
def clean():
    was = rpc_waits.is_installed()
    rpc_waits.uninstall()
    yield dist_context._shutdown_servers
    rpc_waits.uninstall()
    if was:
        rpc_waits.install()


def test_install_twice_then_uninstall(clean):
    original_shutdown = clean
    assert rpc_client.time is time and rpc_server.time is time
    rpc_waits.install()
    shim = rpc_client.time
    assert isinstance(shim, rpc_waits.BackoffTime) and isinstance(rpc_server.time, rpc_waits.BackoffTime)
    assert rpc_server.time is not shim  # each module backs off on its own
    assert dist_context._shutdown_servers.__wrapped__ is original_shutdown
    rpc_waits.install()
    assert rpc_client.time is shim
    rpc_waits.uninstall()
    assert rpc_client.time is time and rpc_server.time is time and not rpc_waits.is_installed()
    assert dist_context._shutdown_servers is original_shutdown
    rpc_waits.uninstall()
    assert rpc_client.time is time


def test_sleeps_double_from_the_first_wait_up_to_what_was_asked(monkeypatch):
    slept = []
    monkeypatch.setattr(rpc_waits._time, "sleep", slept.append)
    shim = rpc_waits.BackoffTime()
    for _ in range(8):
        shim.sleep(3)
    shim.sleep(0.01)  # never more than asked
    assert slept == [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.0, 3.0, 0.01]
    assert shim.time() == pytest.approx(time.time(), abs=5)  # the rest is the time module's


def test_the_shutdown_requests_are_sent_then_drained(clean, monkeypatch):
    calls = []
    monkeypatch.setattr(dist_context, "_shutdown_servers", lambda: calls.append("sent"))
    rpc_waits.install()
    monkeypatch.setattr(rpc_waits._time, "sleep", lambda s: calls.append(s))
    dist_context._shutdown_servers()
    assert calls == ["sent", rpc_waits.DRAIN_WAIT]
    rpc_waits.uninstall()


def test_another_dgl_is_refused(clean, monkeypatch):
    monkeypatch.setattr(dgl, "__version__", "2.2.1")
    with pytest.raises(UnsupportedDGLVersion, match=r"patches\.rpc_waits.*DGL 2\.2\.1.*2\.1\.x"):
        rpc_waits.install()
    assert rpc_client.time is time and not rpc_waits.is_installed()
