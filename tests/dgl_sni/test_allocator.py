"""The malloc the emulated machines run with (dgl_sni.allocator): found, refused by name, preloaded."""
import os
import subprocess
import sys

import pytest

from dgl_sni import allocator
from dgl_sni.cluster import LocalCluster


def test_auto_uses_tcmalloc_when_its_library_is_there_and_the_system_malloc_when_not(tmp_path):
    assert allocator.resolve("auto", search_dirs=(str(tmp_path),)) == ("system", None)
    lib = tmp_path / allocator.TCMALLOC_SONAME
    lib.write_bytes(b"")
    assert allocator.resolve("auto", search_dirs=(str(tmp_path),)) == ("tcmalloc", str(lib))
    assert allocator.resolve("system", search_dirs=(str(tmp_path),)) == ("system", None)


def test_asking_for_a_missing_tcmalloc_or_an_unknown_allocator_names_the_problem(tmp_path):
    with pytest.raises(ValueError, match="libtcmalloc-minimal4"):
        allocator.resolve("tcmalloc", search_dirs=(str(tmp_path),))
    with pytest.raises(ValueError, match="--allocator must be one of auto, tcmalloc, system"):
        allocator.resolve("jemalloc")


def test_the_library_goes_first_into_ld_preload_once_and_others_stay():
    env = allocator.preload_env({"LD_PRELOAD": "/x/libother.so:/t/libtc.so"}, "/t/libtc.so")
    assert env["LD_PRELOAD"] == "/t/libtc.so /x/libother.so"
    assert allocator.preload_env({"A": "1"}, None) == {"A": "1"}


def test_every_process_of_the_cluster_gets_the_preload(tmp_path):
    cluster = LocalCluster(1, str(tmp_path), mode="loopback", preload="/t/libtc.so")
    assert cluster._base_env(cluster.machines[0], str(tmp_path / "p.json"))["LD_PRELOAD"].split()[0] == "/t/libtc.so"


def test_the_installed_tcmalloc_is_what_a_preloaded_process_runs_with():
    path = allocator.find_tcmalloc()
    assert path is not None, f"install Debian's {allocator.TCMALLOC_PACKAGE} (make install does, as root)"
    code = "from dgl_sni.allocator import in_use; print(in_use())"
    env = allocator.preload_env(dict(os.environ), path)
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "tcmalloc"
    env.pop("LD_PRELOAD")
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          check=True).stdout.strip() == "system"
