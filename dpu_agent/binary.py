"""Where the ``sni-agent`` binary is, and how the C++ is built (``setup.py`` and ``make`` call this).

The agent is a standalone C++17 executable: ``csrc/agent/main.cpp`` and one translation unit
per transport (``shm_transport.cpp``, ``doca_transport.cpp``), every ``csrc/agent/*.cpp``
linked together; no Python, numpy or DOCA needed to run it (DOCA is loaded with dlopen).
``setup.py build_ext`` compiles it into ``dpu_agent/bin/sni-agent`` (installed as package
data); ``$SNI_AGENT_COMMAND`` overrides the command that :func:`dpu_agent.client.spawn_agent`
runs (e.g. ``qemu-aarch64 PATH``). The compiler flags of every build (this one, the Cython
extensions, ``make agent-aarch64``) are declared once, in ``csrc/cxxflags.txt``
(:func:`cxxflags`).
"""
from __future__ import annotations

import glob
import os
import shlex
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCES = sorted(glob.glob(os.path.join(HERE, "csrc", "agent", "*.cpp")))
BINARY = os.path.join(HERE, "bin", "sni-agent")
FLAGS_FILE = os.path.join(HERE, "csrc", "cxxflags.txt")


def cxxflags(build: str) -> list:
    """The compiler flags of ``build`` (``"extension"`` or ``"agent"``): the common ones, then
    the build's own, as ``csrc/cxxflags.txt`` declares them."""
    lines = {}
    with open(FLAGS_FILE) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#"):
                name, _, flags = line.partition(":")
                lines[name.strip()] = flags.split()
    builds = sorted(set(lines) - {"common"})
    if build not in builds:
        raise KeyError(f"{FLAGS_FILE} declares no build '{build}' (builds: {', '.join(builds)})")
    return lines["common"] + lines[build]


def agent_command() -> list:
    """The command that starts an agent: ``$SNI_AGENT_COMMAND`` or the built binary."""
    override = os.environ.get("SNI_AGENT_COMMAND")
    if override:
        return shlex.split(override)
    if not os.access(BINARY, os.X_OK):
        raise FileNotFoundError(f"the sni-agent binary is not built ({BINARY}): run "
                                "`python setup.py build_ext --inplace` or `make install`")
    return [BINARY]


def build(out: str = BINARY, cxx: str | None = None, extra: list | None = None) -> str:
    """Compile the agent into ``out`` with ``cxx`` (default ``$CXX`` or g++); returns ``out``."""
    cxx = cxx or os.environ.get("CXX") or "g++"
    if shutil.which(cxx) is None:
        raise RuntimeError(f"no C++ compiler '{cxx}' to build sni-agent (install g++)")
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    cmd = [cxx, *cxxflags("agent"), *(extra or []), "-o", out, *SOURCES, "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building sni-agent failed:\n{' '.join(cmd)}\n{proc.stderr}")
    return out
