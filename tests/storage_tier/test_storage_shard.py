"""Tier-backed DistTensor shards: layouts, the server's pull handler, the lazy shm init."""
import json
import os
import pickle
import sys

import numpy as np
import pytest
import torch

import dgl_sni  # noqa: F401
from tests.helpers import ROOT, needs_netns, run_cli
from dgl_sni.data import load_npz
from dgl_sni.partition import partition
from patches import kvstore_lazy_init
from storage_tier.io import HEADER, IOEngine, StorageError, read_unit
from storage_tier.shard import TierPullHandler, TierShardLayout, layout_path


@pytest.fixture
def tier(tmp_path):
    """Two unit files of one layer, as a trainer's tier writes them, and the layout that
    maps shard rows 0..6 onto them in a shuffled order."""
    io = IOEngine(str(tmp_path / "run"))
    units = [np.arange(4 * 3, dtype=np.float32).reshape(4, 3),
             100 + np.arange(3 * 3, dtype=np.float32).reshape(3, 3)]
    for p, u in enumerate(units):
        io.write(("act", 1, p), u)
    io.wait()
    part = np.array([1, 0, 0, 1, 0, 1, 0])
    pos = np.array([2, 0, 3, 0, 1, 1, 2])
    root = tmp_path / "root"
    TierShardLayout.write(layout_path(str(root), 1, "h1"), [io.path(("act", 1, p)) for p in range(2)], part, pos)
    expected = np.stack([units[a][b] for a, b in zip(part, pos)])
    yield dict(io=io, root=str(root), expected=expected)
    io.close()


def test_server_pull_handler_gathers_from_tier_files(tier, monkeypatch):
    monkeypatch.setenv("DGL_ROLE", "server")
    monkeypatch.setenv("DGL_SERVER_ID", "1")
    handler = pickle.loads(pickle.dumps(TierPullHandler(tier["root"], "h1", 3)))  # as DGL ships it
    ids = torch.tensor([6, 0, 3, 3, 5])
    got = handler(None, "sni_h1", ids)
    np.testing.assert_array_equal(got.numpy(), tier["expected"][ids.numpy()])
    assert handler(None, "sni_h1", torch.empty(0, dtype=torch.int64)).shape == (0, 3)


def test_layout_rewritten_by_a_later_run_is_reloaded(tier, monkeypatch):
    monkeypatch.setenv("DGL_ROLE", "server")
    monkeypatch.setenv("DGL_SERVER_ID", "1")
    handler = TierPullHandler(tier["root"], "h1", 3)
    handler(None, "x", torch.tensor([0]))
    io = tier["io"]
    TierShardLayout.write(layout_path(tier["root"], 1, "h1"), [io.path(("act", 1, 0))], np.zeros(7, int),
                          np.array([3, 2, 1, 0, 0, 1, 2]))
    st = os.stat(layout_path(tier["root"], 1, "h1"))
    os.utime(layout_path(tier["root"], 1, "h1"), ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    got = handler(None, "x", torch.tensor([0, 3]))
    np.testing.assert_array_equal(got.numpy(), io.read(("act", 1, 0))[[3, 0]])


def test_corrupt_or_missing_unit_is_a_clear_error(tier, monkeypatch):
    monkeypatch.setenv("DGL_ROLE", "server")
    monkeypatch.setenv("DGL_SERVER_ID", "1")
    path = tier["io"].path(("act", 1, 0))
    with open(path, "r+b") as fh:
        fh.seek(HEADER + 5)
        b = fh.read(1)
        fh.seek(HEADER + 5)
        fh.write(bytes([b[0] ^ 0xFF]))
    with pytest.raises(StorageError, match="checksum mismatch"):
        read_unit(path)
    with pytest.raises(StorageError, match="checksum"):
        TierPullHandler(tier["root"], "h1", 3)(None, "x", torch.tensor([1]))
    with pytest.raises(StorageError, match="missing storage file"):
        read_unit(path + ".gone")


def test_lazy_zeros_shard_is_never_copied():
    kvstore_lazy_init.install()
    from dgl.distributed import rpc
    src = kvstore_lazy_init.lazy_zeros((1000, 16), torch.float32)
    assert src.shape == (1000, 16) and src.untyped_storage().nbytes() == 16 * 4 and not src.any()
    dst = torch.full((1000, 16), 7.0)  # stands for fresh shm: the copy must be skipped
    rpc.copy_data_to_shared_memory(dst, src)
    assert (dst == 7.0).all()
    real = torch.ones(1000, 16)
    rpc.copy_data_to_shared_memory(dst, real)  # any other init still copies
    assert (dst == 1.0).all()


@needs_netns
def test_tier_backed_dist_tensor_on_two_machines(tmp_path, small_graph_npz):
    """SNIDistTensor(storage=TierStorage) in a DistDGL script on two emulated machines:
    every read -- local through the host cache, remote through the owner's server from
    its tier files -- equals a plain DistTensor's, and the shm shard stays zero."""
    parts = partition(load_npz(small_graph_npz), 2, str(tmp_path / "parts"), method="metis",
                      graph_name="graph")
    out = tmp_path / "out"
    out.mkdir()
    run_cli("launch", "--workers", 2, "--part-config", parts, "--", sys.executable,
            os.path.join(ROOT, "tests", "scripts", "tier_tensor_script.py"),
            "--ip_config", "{ip_config}", "--part_config", "{part_config}", "--out", out,
            "--tier", tmp_path / "tier", "--epochs", 3)
    results = [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)]
    for r in results:
        assert r["halo"] > 0 and r["same"] == [True, True, True]
        assert r["shm_shard_zero"] and r["shm_shard_nonzero_plain"]
        assert "belong to other machines" in r["foreign_error"]
        st = r["storage"]
        assert st["cache_misses"] > 0 and st["cache_hits"] > 0 and st["cache_peak_bytes"] <= 4096
        assert st["bytes_read"] > 0 and st["bytes_written"] > 0
    assert results[0]["halo_sums"] != results[1]["halo_sums"]  # each read the other's rows
