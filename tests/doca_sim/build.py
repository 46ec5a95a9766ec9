"""Compile the simulated DOCA SDK (``doca_sim.c``) into the three libraries DOCA ships.

Test infrastructure only: ``libdoca_common.so`` (errors, devices, mmaps, buffers,
progress engine), and ``libdoca_dma.so`` / ``libdoca_comch.so`` which link to it, the
same split as the real SDK. Used by ``tests/dpu_agent/test_doca_path.py`` and
``tests/test_doca_train.py``; also runnable by hand: ``python tests/doca_sim/build.py OUT_DIR``.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.join(HERE, "doca_sim.c")
PARTS = (("common", "SIM_COMMON"), ("dma", "SIM_DMA"), ("comch", "SIM_COMCH"))
CFLAGS = ["-O1", "-g", "-std=gnu11", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
          "-fvisibility=hidden"]


def compiler() -> str | None:
    """The C compiler to use (``$CC`` or gcc), or None when there is none."""
    return shutil.which(os.environ.get("CC", "gcc"))


def build(out_dir: str) -> str:
    """Build the three libraries into ``out_dir``; returns ``out_dir``."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (gcc) to build the simulated DOCA SDK")
    os.makedirs(out_dir, exist_ok=True)
    for part, macro in PARTS:
        target = os.path.join(out_dir, f"libdoca_{part}.so")
        cmd = [cc, *CFLAGS, f"-D{macro}", f"-Wl,-soname,libdoca_{part}.so", "-o", target, SOURCE]
        if part != "common":
            cmd += [f"-L{out_dir}", "-ldoca_common", "-Wl,-rpath,$ORIGIN"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"building {target} failed:\n{' '.join(cmd)}\n{proc.stderr}")
    return out_dir


if __name__ == "__main__":
    print(build(sys.argv[1] if len(sys.argv) > 1 else os.path.join(HERE, "lib")))
