"""Partitions are a function of the graph, the method and the seed, in every process.

DGL 2.1's METIS call takes no seed and gave different assignments for the same graph
from one process to the next (8 distinct ones in 34 processes), so two identical training
runs trained on different partitions: different halo sets, different predicted-row counts
and losses apart by up to 4e-3. That looked like a race in the process agent.
"""
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import ROOT

SCRIPT = r"""
import hashlib, json, os, sys, tempfile
import numpy as np
import dgl_sni
from dgl_sni.data import synthetic
from dgl_sni.partition import partition, load_orig_nids
method, parts = sys.argv[1], int(sys.argv[2])
data = synthetic(num_nodes=20000, avg_degree=10, num_classes=8, feat_dim=8, seed=0)
out = tempfile.mkdtemp()
config = partition(data, parts, out, method=method, graph_name="g")
node_map = json.load(open(config))["node_map"]["_N"]
assign = np.empty(data.num_nodes, np.int64)
orig = load_orig_nids(config)
for pid, (lo, hi) in enumerate(node_map):
    assign[orig[lo:hi]] = pid
print(hashlib.sha1(assign.tobytes()).hexdigest())
"""


def _assignment_digest(method, parts):
    proc = subprocess.run([sys.executable, "-c", SCRIPT, method, str(parts)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.split()[-1]


@pytest.mark.parametrize("method, parts", [("metis", 2), ("random", 4)])
def test_the_same_graph_gets_the_same_partitions_in_every_process(method, parts):
    # six fresh processes: with DGL's own METIS call this failed in 5 of 5 trials here
    with ThreadPoolExecutor(max_workers=2) as pool:
        digests = list(pool.map(lambda _: _assignment_digest(method, parts), range(6)))
    assert len(set(digests)) == 1, digests
