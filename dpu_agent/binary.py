"""Where the ``sni-agent`` binary is, and how it is built (``setup.py`` and ``make`` call this).

The agent is a standalone C++17 executable (``csrc/agent/main.cpp``; no Python, numpy or
DOCA needed to run it; DOCA is loaded with dlopen). ``setup.py build_ext`` compiles it into
``dpu_agent/bin/sni-agent`` (installed as package data); ``$SNI_AGENT_COMMAND`` overrides the
command that :func:`dpu_agent.client.spawn_agent` runs (e.g. ``qemu-aarch64 PATH``).
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "csrc", "agent", "main.cpp")
BINARY = os.path.join(HERE, "bin", "sni-agent")
CXXFLAGS = ["-O3", "-std=c++17", "-ffp-contract=off", "-fno-math-errno", "-Wall", "-Wextra", "-Werror",
            "-Wno-unused-parameter"]


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
    cmd = [cxx, *CXXFLAGS, *(extra or []), "-o", out, SOURCE, "-ldl"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"building sni-agent failed:\n{' '.join(cmd)}\n{proc.stderr}")
    return out
