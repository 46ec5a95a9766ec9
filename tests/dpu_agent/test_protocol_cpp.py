"""The C++ unit test of the agent's message decoder (``fuzz/test_protocol.cpp``, over
``dpu_agent/csrc/protocol.hpp``), and the C++ and Python decoders read the same bytes alike.

Built with g++ (always there: it builds the agent), with the agent's warning flags as errors
and AddressSanitizer + UndefinedBehaviorSanitizer; a failed check fails the test.
"""
import math
import os
import shutil
import struct
import subprocess

import numpy as np
import pytest

from dpu_agent import protocol
from dpu_agent.binary import cxxflags
from tests.dpu_agent.test_fuzz import _mutate, _seeds

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SOURCE = os.path.join(ROOT, "tests", "dpu_agent", "fuzz", "test_protocol.cpp")


@pytest.fixture(scope="module")
def decoder_test(tmp_path_factory):
    cxx = shutil.which(os.environ.get("CXX") or "g++")
    if cxx is None:
        pytest.fail("the C++ protocol test needs g++ (it builds the agent too)")
    exe = tmp_path_factory.mktemp("protocol_cpp") / "test_protocol"
    # the agent's flags, less optimisation (a faster build), plus the sanitizers
    cmd = [cxx, *cxxflags("agent"), "-O1", "-g", "-fsanitize=address,undefined", "-fno-sanitize-recover=all",
           f"-I{ROOT}", "-o", str(exe), SOURCE]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    assert proc.returncode == 0, f"building the C++ protocol test failed:\n{' '.join(cmd)}\n{proc.stderr}"
    return exe


def test_cpp_decoder_checks_pass(decoder_test):
    proc = subprocess.run([str(decoder_test)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    checks, failed = (int(w) for w in proc.stdout.split()[0:3:2])
    assert failed == 0 and checks > 1000, proc.stdout


def _fields(data: bytes) -> str:
    """What test_protocol --decode prints for ``data``, from the Python decoder."""
    try:
        msg = protocol.decode_request(data)
    except protocol.ProtocolError:
        return "refused"
    step = "nan" if math.isnan(msg["step"]) else "%.17g" % msg["step"]
    out = f"op={msg['op']} table={msg['table']} step={step}"
    if msg["op"] == "hello":
        out += f" token={msg['token'].hex()}"
    elif msg["op"] == "observe":
        out += f" count={msg['count']} partial={int(msg['partial'])}"
    elif msg["op"] == "serve":
        out += f" preview={int(msg['preview'])}"
    elif msg["op"] == "add_table":
        p = msg["params"]
        out += (f" num_rows={msg['num_rows']} dim={msg['dim']} kind={protocol.KINDS.index(msg['kind'])}"
                f" window={p['window']} beta={p['beta']:.17g} lam={p['lam']:.17g}"
                f" sampled={msg['sampled'].astype(np.uint8).tobytes().hex()}"
                f" regions={','.join(r.hex() for r in msg['regions'])}")
    return out


def test_cpp_and_python_decoders_agree(decoder_test):
    """Messages the Python side encodes, then mutated: both accept the same ones, with the same fields."""
    rng = np.random.default_rng(7)
    seeds = _seeds()
    seeds.append(protocol.encode(dict(op="add_table", table=2 ** 32 - 1, num_rows=0, dim=protocol.MAX_DIM,
                                      sampled=np.zeros(0, bool), kind="holt", regions=[b"/r"] * 5,
                                      params=dict(window=protocol.MAX_WINDOW, beta=-0.0, lam=1e300))))
    messages = seeds + [_mutate(rng, seeds[i % len(seeds)]) for i in range(4000)]
    stdin = b"".join(struct.pack("<I", len(m)) + m for m in messages)
    proc = subprocess.run([str(decoder_test), "--decode"], input=stdin, capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()[-4000:]
    lines = proc.stdout.decode().splitlines()
    assert len(lines) == len(messages)
    accepted = 0
    for data, line in zip(messages, lines):
        cpp = "refused" if line.startswith("refused: ") else line
        assert cpp == _fields(data), (data.hex(), line)
        accepted += cpp != "refused"
    assert accepted >= len(seeds) and len(messages) - accepted > 1000, accepted
