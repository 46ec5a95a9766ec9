"""Packaging and the DGL shims: import works with torch 2.13 and writes nothing to HOME."""
import os
import subprocess
import sys

from tests.helpers import ROOT


def _python(code, env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                          env=dict(env, PYTHONPATH=ROOT, PYTHONWARNINGS="ignore"))


def test_import_writes_nothing_to_home_and_graphbolt_is_optional(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DGL", "TORCHINDUCTOR"))}
    env["HOME"] = str(home)
    proc = _python("import dgl_sni, dgl, dgl.distributed, dgl.graphbolt as gb; "
                   "print(gb.GRAPHBOLT_AVAILABLE, dgl.__version__)", env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False", "2.1.0"]
    assert list(home.iterdir()) == []


def test_importing_dgl_first_is_reported():
    # without the start-up hook (installed with the package, see test_startup_hook.py)
    proc = _python("import dgl; import dgl_sni", dict(os.environ, DGL_SNI_STARTUP="0"))
    # without the shim DGL itself fails to import on this torch; either way the message is clear
    assert proc.returncode != 0
    assert "graphbolt" in proc.stderr.lower() or "import dgl_sni" in proc.stderr


def test_cli_help_lists_the_commands():
    proc = subprocess.run([sys.executable, "-m", "dgl_sni.cli", "--help"], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0
    for command in ("partition", "train", "launch", "cleanup"):
        assert command in proc.stdout


def test_console_scripts_are_installed():
    from importlib.metadata import entry_points
    scripts = {e.name: e.value for e in entry_points(group="console_scripts")}
    assert scripts.get("dgl-sni") == "dgl_sni.cli:main"
    assert scripts.get("sni-agent") == "dpu_agent.agent:main"


def test_agent_without_a_transport_says_what_to_give():
    proc = subprocess.run([sys.executable, "-m", "dpu_agent.agent"], capture_output=True, text=True,
                          cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 2 and "give --socket PATH --token-file FILE (host emulation) or --doca" in proc.stderr
