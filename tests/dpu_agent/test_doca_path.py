"""The agent's DOCA path (dpu_agent.doca) against the simulated DOCA SDK in tests/doca_sim.

The simulator is compiled here with gcc into the three libraries DOCA ships; its DMA
moves bytes between processes with process_vm_readv/writev and its Comch runs over Unix
sockets, so the real agent process (the ``sni-agent`` binary with ``--doca``: its C++ DOCA transport,
DOCA loaded with dlopen) can be driven
from this test process through ``RemoteAgentClient(DocaHostEndpoint(...))``.
"""
import ctypes
import importlib.util
import os
import signal
import subprocess
import threading
import uuid

import numpy as np
import pytest

from dpu_agent import doca
from dpu_agent.binary import agent_command
from dpu_agent.client import RemoteAgentClient
from dpu_agent.tables import HistoryTable
from dpu_agent.transport import AgentError

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
PCI = "03:00.0"
MAX_DMA = 4096  # the simulated device's max DMA buffer: large reads/writes are split


def _load_builder():
    spec = importlib.util.spec_from_file_location("doca_sim_build", os.path.join(ROOT, "tests", "doca_sim",
                                                                                 "build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory):
    """Build the simulated SDK; point DOCA_LIB_DIR at it for this module."""
    builder = _load_builder()
    if builder.compiler() is None:
        pytest.skip("gcc is not available to build the simulated DOCA SDK")
    lib_dir = builder.build(str(tmp_path_factory.mktemp("doca_sim")))
    saved = {k: os.environ.get(k) for k in ("DOCA_LIB_DIR", "DOCA_SIM_MAX_BUF_SIZE")}
    os.environ.update(DOCA_LIB_DIR=lib_dir, DOCA_SIM_MAX_BUF_SIZE=str(MAX_DMA))
    yield lib_dir
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def _service():
    return f"sni-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def _bounded(fn, seconds=30.0):
    """Run ``fn`` but fail (instead of hanging the suite) if it takes over ``seconds``."""
    out = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as err:  # noqa: BLE001
            out["error"] = err
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"{getattr(fn, '__name__', fn)} hung for {seconds} s"
    if "error" in out:
        raise out["error"]
    return out.get("value")


def _start_agent(tmp_path, *args):
    """The real agent process in DPU mode (``args``: more of its options) plus a client driving it over DOCA."""
    name = _service()
    log = open(tmp_path / f"{name}.log", "w+")
    proc = subprocess.Popen([*agent_command(), "--doca", "--pci", PCI, "--name", name, *args],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        endpoint = doca.DocaHostEndpoint(PCI, name, connect_timeout=30)
    except BaseException:
        proc.kill()
        proc.wait()
        log.seek(0)
        print(log.read())
        raise
    return RemoteAgentClient(endpoint, proc), proc, log


def _log_text(log):
    log.flush()
    log.seek(0)
    return log.read()


def _same_bits(got, want):
    got, want = np.ascontiguousarray(got), np.ascontiguousarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


# ----------------------------------------------------------------------------- bindings
def test_missing_library_raises_unavailable(tmp_path, monkeypatch):
    with pytest.raises(doca.DocaUnavailable, match=str(tmp_path / "libdoca_common.so")):
        doca.load(str(tmp_path))
    monkeypatch.setenv("DOCA_LIB_DIR", str(tmp_path))
    with pytest.raises(doca.DocaUnavailable, match="DOCA library not found"):
        doca.DocaHostEndpoint(PCI, _service())


def test_doca_errors_name_function_and_code(sim_dir):
    lib = doca.load(sim_dir)
    mm = ctypes.c_void_p()
    lib.doca_mmap_create(ctypes.byref(mm))
    try:
        with pytest.raises(doca.DocaError) as info:
            lib.doca_mmap_start(mm)  # no memory range set
        assert info.value.func == "doca_mmap_start"
        assert info.value.code == doca.DOCA_ERROR_INVALID_VALUE
        assert "doca_mmap_start" in str(info.value) and "DOCA_ERROR_INVALID_VALUE" in str(info.value)
        with pytest.raises(doca.DocaError, match="doca_mmap_set_memrange.*DOCA_ERROR_INVALID_VALUE"):
            lib.doca_mmap_set_memrange(mm, None, 0)
    finally:
        lib.doca_mmap_destroy(mm)


def test_unknown_device_and_absent_server(sim_dir):
    with pytest.raises(doca.DocaError, match="ff:00.0") as info:
        doca.DocaHostEndpoint("ff:00.0", _service())
    assert info.value.code == doca.DOCA_ERROR_NOT_FOUND
    name = _service()
    with pytest.raises(doca.DocaError, match=name) as info:
        doca.DocaHostEndpoint(PCI, name, connect_timeout=0.3)
    assert info.value.code == doca.DOCA_ERROR_TIME_OUT


# ----------------------------------------------------------------------------- the agent process
def _trajectory(rng, num_rows, dim):
    base = rng.normal(size=(num_rows, dim))
    slope = rng.normal(scale=0.05, size=(num_rows, dim))
    wiggle = rng.normal(scale=0.01, size=(num_rows, dim))
    return lambda step: (base + slope * step + wiggle * np.sin(step)).astype(np.float32)


def test_agent_process_over_doca_matches_in_process_tables(sim_dir, tmp_path):
    """Rows travel both ways by DMA and the agent serves exactly what HistoryTable serves."""
    client, proc, log = _start_agent(tmp_path)
    try:
        rng = np.random.default_rng(7)
        # table 1 is large enough for a multi-frame add_table and many DMA chunks per copy
        specs = {0: (500, 16, "gated"), 1: (6000, 4, "cache")}
        refs, paths = {}, {}
        for table, (num_rows, dim, kind) in specs.items():
            sampled = rng.random(num_rows) < 0.3
            client.add_table(table, num_rows, dim, sampled, kind)
            refs[table] = HistoryTable(num_rows, dim, sampled, kind)
            paths[table] = _trajectory(rng, num_rows, dim)
        for step in (0.0, 1.0, 2.0, 3.0):
            for table in specs:
                rows = paths[table](step)
                client.observe(table, step, rows)
                refs[table].observe(step, rows)
        for table, (num_rows, _, _) in specs.items():  # a partial sync: rows and their ids
            ids = np.sort(rng.choice(num_rows, num_rows // 5, replace=False)).astype(np.int64)
            rows = paths[table](4.0)[ids]
            client.observe(table, 4.0, rows, ids)
            refs[table].observe(4.0, rows, ids)
        for step in (5.0, 6.0):  # stale steps: served rows come back by DMA
            for table in specs:
                client.request(table, step)
            for table in specs:
                rows, weight = _bounded(lambda: client.result(table, step))
                want_rows, want_weight = refs[table].serve(step)
                _same_bits(rows, want_rows)
                _same_bits(weight, want_weight)
        assert np.any(refs[0].serve(6.0)[1] > 0)  # the gated predictor did take part
        rows, weight = client.result(0, 7.0, preview=True)
        want_rows, want_weight = refs[0].serve(7.0, preview=True)
        _same_bits(rows, want_rows)
        _same_bits(weight, want_weight)
        for table in specs:
            _same_bits(client.drift(table, 7.0), refs[table].drift(7.0).astype(np.float32))
        stats = client.stats()
        assert stats["tables"] == 2 and stats["tracked_rows"] == 6500
        assert stats["predicted_slots"] == sum(int(r.sampled_rows.size) for r in refs.values())
    finally:
        _bounded(client.close)
    text = _log_text(log)
    assert proc.returncode == 0, text
    assert "Traceback" not in text, text


def test_agent_failure_is_reported_not_fatal(sim_dir, tmp_path):
    client, proc, log = _start_agent(tmp_path)
    try:
        client.add_table(0, 20, 4, np.zeros(20, bool), "cache")
        with pytest.raises(AgentError, match="never synchronised"):
            _bounded(lambda: client.result(0, 1.0))  # nothing observed yet
        client.observe(0, 0.0, np.ones((20, 4), np.float32))
        rows, _ = _bounded(lambda: client.result(0, 1.0))
        assert np.all(rows == 1.0)
    finally:
        _bounded(client.close)
    assert proc.returncode == 0, _log_text(log)


def test_killed_agent_raises_agent_error(sim_dir, tmp_path):
    client, proc, log = _start_agent(tmp_path)
    try:
        client.add_table(0, 50, 4, np.ones(50, bool), "gated")
        client.observe(0, 0.0, np.ones((50, 4), np.float32))
        _bounded(client.stats)
        os.kill(proc.pid, signal.SIGSTOP)  # the request below is sent, never answered
        client.request(0, 1.0)
        threading.Timer(0.5, proc.kill).start()
        with pytest.raises(AgentError, match="went away"):
            _bounded(lambda: client.result(0, 1.0))  # blocked in recv when the agent dies
        with pytest.raises(AgentError):
            _bounded(client.stats)
    finally:
        _bounded(client.close)
    assert proc.returncode == -signal.SIGKILL


def test_agent_refuses_a_representor_the_device_lacks(sim_dir):
    """The simulated device has one network representor, 0000:b1:00.0 (the host function)."""
    for args, env in ((["--rep-pci", "99:00.0"], {}), ([], {"SNI_DOCA_REP_PCI": "99:00.0"})):
        proc = subprocess.run([*agent_command(), "--doca", "--pci", PCI, "--name", _service(), *args],
                              cwd=ROOT, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=30)
        assert proc.returncode == 1, proc.stderr
        assert "device 03:00.0 has no network representor with PCI address 99:00.0" in proc.stderr, proc.stderr


def test_agent_refuses_a_region_layout_mismatch_and_keeps_serving(sim_dir, tmp_path):
    """Against the agent on the host function's representor: an add_table whose regions do not
    fit its rows x dim is refused with an error reply and leaves no table behind (its id can be
    added again); the agent then
    serves a gated table with its own predictor parameters, whose sampled mask (which rows are
    predicted) spans several Comch frames; the endpoint's poll sees each reply and nothing else;
    a trainer that goes away without a close message ends the agent cleanly."""
    client, proc, log = _start_agent(tmp_path, "--rep-pci", "b1:00.0")
    host = client.endpoint
    try:
        regions = host.new_table(5, 300, 8)  # exported for 300 x 8 rows, announced as 300 x 9
        host.send(dict(op="add_table", table=5, num_rows=300, dim=9, regions=regions,
                       sampled=np.ones(300, bool), kind="cache", params={}))
        assert _bounded(lambda: host.poll(10.0))
        error = host.recv(10.0)["error"]
        assert "table 5" in error and "trainer announced 9600 bytes, expected 10800" in error, error
        host.send(dict(op="stats"))
        assert _bounded(lambda: host.poll(10.0))
        assert host.recv(10.0)["stats"]["tables"] == 0  # the refused table is not kept
        assert not host.poll(0.05)  # no reply is owed
        host.send(dict(op="add_table", table=5, num_rows=300, dim=8, regions=regions,  # its id again, as exported
                       sampled=np.ones(300, bool), kind="cache", params={}))
        assert _bounded(lambda: host.poll(10.0))
        assert "error" not in host.recv(10.0)  # nothing of the refused attach was left to collide with

        rng = np.random.default_rng(3)
        params = dict(window=3, beta=0.1, lam=0.3)
        sampled = rng.random(6000) < 0.5  # one byte a row: two frames of the simulated 4080 bytes
        client.add_table(6, 6000, 4, sampled, "gated", **params)
        ref = HistoryTable(6000, 4, sampled, "gated", **params)
        default = HistoryTable(6000, 4, sampled, "gated")
        path = _trajectory(rng, 6000, 4)
        for step in (0.0, 1.0, 2.0, 3.0):
            client.observe(6, step, path(step))
            ref.observe(step, path(step))
            default.observe(step, path(step))
        rows, weight = _bounded(lambda: client.result(6, 5.0))
        want_rows, want_weight = ref.serve(5.0)
        _same_bits(rows, want_rows)
        _same_bits(weight, want_weight)
        assert not np.array_equal(default.serve(5.0)[0], want_rows)  # the parameters did travel
        assert client.stats()["tables"] == 2
    except BaseException:
        _bounded(client.abort)
        raise
    host.close()  # the trainer goes away without a close message
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"the agent kept running after its trainer went away: {_log_text(log)}")
    assert proc.returncode == 0, _log_text(log)
