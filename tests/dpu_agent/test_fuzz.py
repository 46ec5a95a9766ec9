"""Fuzzing the agent's message parsers: the C++ one with libFuzzer, the Python one with a seeded generator.

The C++ target (fuzz/fuzz_protocol.cpp) needs Debian's clang and libclang-rt-14-dev
(``make agent-test-deps`` installs them as root); without them the test fails saying so.
"""
import os
import shutil
import subprocess

import numpy as np
import pytest

from dpu_agent import protocol

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _seeds():
    """Valid requests and replies: the fuzzers start from these and mutate them."""
    regions = [b"/sni-1-00112233", b"/sni-1-44556677", b"/a", b"/b", b"/c"]
    reqs = [dict(op="hello", token=b"k" * 32), dict(op="observe", table=2, step=3.0, count=5, partial=True),
            dict(op="serve", table=1, step=4.0, preview=True), dict(op="drift", table=1, step=2.0),
            dict(op="stats"), dict(op="close"),
            dict(op="add_table", table=7, num_rows=6, dim=3, sampled=np.arange(6) % 2 == 0, kind="gated",
                 regions=regions, params=dict(window=4, beta=0.2, lam=0.2))]
    out = [protocol.encode(m) for m in reqs]
    out.append(protocol.encode_reply(dict(op="serve", table=1, step=2.0), error="ValueError: x"))
    out.append(protocol.encode_reply(dict(op="stats"), stats=dict(predictor_s=1.0, tables=1, tracked_rows=2,
                                                                 predicted_slots=3)))
    return out


@pytest.fixture(scope="module")
def fuzzer(tmp_path_factory):
    clang = shutil.which("clang++")
    if clang is None:
        pytest.fail("the protocol fuzz target needs clang: install Debian's clang and libclang-rt-14-dev "
                    "(make agent-test-deps)")
    out = tmp_path_factory.mktemp("fuzz")
    exe = out / "fuzz_protocol"
    proc = subprocess.run([clang, "-std=c++17", "-O1", "-g", "-fsanitize=fuzzer,address", f"-I{ROOT}", "-o",
                           str(exe), os.path.join(ROOT, "tests", "dpu_agent", "fuzz", "fuzz_protocol.cpp")],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.fail("building the libFuzzer target failed (install Debian's libclang-rt-14-dev):\n" + proc.stderr)
    corpus = out / "corpus"
    corpus.mkdir()
    for i, seed in enumerate(_seeds()):
        (corpus / f"seed{i}").write_bytes(seed)
    return exe, corpus


def _run_fuzzer(fuzzer, runs):
    exe, corpus = fuzzer
    proc = subprocess.run([str(exe), f"-runs={runs}", "-seed=1", "-max_len=4096", "-timeout=10",
                           "-rss_limit_mb=2048", "-detect_leaks=1", str(corpus)],
                          capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert f"Done {runs} runs" in proc.stderr, proc.stderr[-2000:]


def test_cpp_parser_survives_100k_fuzzed_inputs(fuzzer):
    _run_fuzzer(fuzzer, 100_000)


@pytest.mark.slow
def test_cpp_parser_survives_1m_fuzzed_inputs(fuzzer):
    _run_fuzzer(fuzzer, 1_000_000)


def _mutate(rng, seed):
    buf = bytearray(seed)
    for _ in range(int(rng.integers(1, 6))):
        kind = rng.integers(0, 5)
        if kind == 0 and buf:  # flip bytes
            buf[int(rng.integers(0, len(buf)))] = int(rng.integers(0, 256))
        elif kind == 1:  # truncate
            del buf[int(rng.integers(0, len(buf) + 1)):]
        elif kind == 2:  # append junk
            buf += rng.bytes(int(rng.integers(1, 64)))
        elif kind == 3 and len(buf) >= 32:  # huge length / count fields
            buf[24:28] = int(rng.integers(0, 2 ** 32)).to_bytes(4, "little")
        elif len(buf) >= 40:
            buf[32:40] = int(rng.integers(0, 2 ** 63)).to_bytes(8, "little")
    return bytes(buf)


def test_python_decoder_survives_100k_generated_inputs():
    rng = np.random.default_rng(2024)
    seeds = _seeds()
    outcomes = {"ok": 0, "refused": 0}
    for i in range(100_000):
        data = _mutate(rng, seeds[i % len(seeds)]) if i % 4 else rng.bytes(int(rng.integers(0, 200)))
        for decode in (protocol.decode_request,
                       lambda b: protocol.decode_reply(b[:protocol.HEADER.size], b[protocol.HEADER.size:])):
            try:
                assert isinstance(decode(data), dict)
                outcomes["ok"] += 1
            except protocol.ProtocolError:
                outcomes["refused"] += 1
    assert outcomes["ok"] > 1000 and outcomes["refused"] > 1000, outcomes
