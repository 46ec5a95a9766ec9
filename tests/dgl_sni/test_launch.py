"""dgl-sni launch: the caller's working directory and environment, DGL launch's process counts."""
import json
import os
import subprocess
import sys
import textwrap

from tests.helpers import ROOT, needs_netns

RECORD = textwrap.dedent("""
    import json, os, sys
    keys = ("DGL_ROLE", "DGL_SERVER_ID", "RANK", "LOCAL_RANK", "WORLD_SIZE", "DGL_NUM_CLIENT",
            "DGL_NUM_SAMPLER", "DGL_NUM_SERVER", "MY_SETTING")
    rec = dict({k: os.environ.get(k) for k in keys}, cwd=os.getcwd(), argv=sys.argv[1:])
    name = f"{rec['DGL_ROLE']}-{rec['DGL_SERVER_ID'] or rec['RANK']}.json"
    with open(os.path.join("seen", name), "w") as fh:
        json.dump(rec, fh)
""")


def _launch(cwd, *args, env=None):
    return subprocess.run([sys.executable, "-m", "dgl_sni.cli", "launch", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT, **(env or {})))


def _part_config(tmp_path, parts):
    path = tmp_path / "graph.json"
    path.write_text(json.dumps(dict(num_parts=parts)))
    return path


@needs_netns
def test_processes_start_in_the_callers_folder_with_its_environment(tmp_path):
    (tmp_path / "ex").mkdir()
    (tmp_path / "seen").mkdir()
    (tmp_path / "ex" / "record.py").write_text(RECORD)
    _part_config(tmp_path, 2)
    proc = _launch(tmp_path, "--workers", 2, "--part-config", "graph.json", "--num_trainers", 2,
                   "--num_samplers", 1, "--num_servers", 2, "--", sys.executable, "ex/record.py", "{part_config}",
                   env=dict(MY_SETTING="kept"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = {p.name: json.loads(p.read_text()) for p in (tmp_path / "seen").iterdir()}
    assert sorted(seen) == [f"client-{r}.json" for r in range(4)] + [f"server-{s}.json" for s in range(4)]
    for rec in seen.values():
        assert rec["cwd"] == str(tmp_path) and rec["MY_SETTING"] == "kept"
        assert rec["DGL_NUM_CLIENT"] == "8" and rec["DGL_NUM_SAMPLER"] == "1" and rec["DGL_NUM_SERVER"] == "2"
        assert rec["argv"] == [str(tmp_path / "graph.json")]
    assert [seen[f"client-{r}.json"]["LOCAL_RANK"] for r in range(4)] == ["0", "1", "0", "1"]
    assert {seen[f"client-{r}.json"]["WORLD_SIZE"] for r in range(4)} == {"4"}


def test_what_the_emulated_cluster_cannot_do_is_refused_with_the_reason(tmp_path):
    part = _part_config(tmp_path, 2)
    for flag, value, words in (("--workspace", "/x", "working directory"), ("--ssh_port", "22", "ssh"),
                               ("--ip_config", "ip.txt", "{ip_config}")):
        proc = _launch(tmp_path, "--workers", 2, "--part-config", part, flag, value, "--", "true")
        assert proc.returncode == 2 and flag in proc.stderr and words in proc.stderr, proc.stderr
    proc = _launch(tmp_path, "--workers", 2, "--part-config", part, "--num_trainers", 0, "--", "true")
    assert proc.returncode == 2 and "--num_trainers must be at least 1" in proc.stderr, proc.stderr
    proc = _launch(tmp_path, "--workers", 2, "--part-config", part, "--cache-budget", "lots", "--", "true")
    assert proc.returncode == 2 and "--cache-budget" in proc.stderr, proc.stderr
