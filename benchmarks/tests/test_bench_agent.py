"""Smoke test of ``benchmarks/bench_agent.py``'s transport part: tiny sizes, few repeats.

It checks the JSON's shape (every figure there, positive and finite, with a ``what`` for
each), never a speed: timings are the benchmark's business, not the tests'.
"""
import json
import math
import subprocess
import sys

from benchmarks._sweep import ROOT
from dpu_agent.binary import agent_command

LATENCY = ("stats_rtt_s", "client_stats_rtt_s", "serve_1row_rtt_s", "inline_stats_rtt_s")


def _positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_transport_part_writes_positive_finite_figures(tmp_path):
    agent_command()  # raises, saying how to build it, when the agent binary is missing
    out = tmp_path / "agent.json"
    proc = subprocess.run([sys.executable, "benchmarks/bench_agent.py", "--quick", "--parts", "transport",
                           "--rows", "64,512", "--dims", "4,16", "--repeats", "3", "--latency-repeats", "20",
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    report = json.loads(out.read_text())
    assert report["parts"] == ["transport"] and "pipeline" not in report
    t = report["transport"]
    for key in ("stats_rtt", "client_stats_rtt", "serve_1row_rtt", "inline_stats_rtt", "observe", "result",
                "trainer_copy", "memcpy", "GBps"):
        assert t["what"][key]
    assert set(t["latency"]) == set(LATENCY)
    for figure in t["latency"].values():
        assert figure["n"] >= 20 and all(_positive(figure[k]) for k in ("median", "p10", "p90"))
    assert [(b["rows"], b["dim"]) for b in t["bandwidth"]] == [(64, 4), (512, 4), (64, 16), (512, 16)]
    for b in t["bandwidth"]:
        assert b["bytes"] == b["rows"] * b["dim"] * 4
        for name in ("observe", "result"):
            assert _positive(b[name]["GBps"]) and _positive(b[name]["trainer_copy_s"])
            assert b[name]["seconds"]["n"] >= 3 and _positive(b[name]["seconds"]["median"])
            assert _positive(b[f"{name}_over_memcpy"])
        assert _positive(b["memcpy"]["GBps"])
