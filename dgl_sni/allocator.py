"""Which memory allocator the emulated machines' processes run with.

A full-graph epoch allocates the same large tensors every epoch (dropout outputs,
aggregation outputs, gradients: tens of MB each). glibc's malloc serves allocations above
32 MB with fresh ``mmap`` pages and returns them on free, so every epoch pays a page fault
per 4 KiB of every such tensor. tcmalloc (gperftools, Debian's ``libtcmalloc-minimal4``)
keeps freed pages for reuse, as Intel's PyTorch CPU tuning guide recommends. ``dgl-sni train`` preloads it
into its servers and trainers when it is installed (``--allocator auto``); the allocator
changes no arithmetic, so every result is the same to the bit. Measured: the 2-worker
benchmark's epoch with dropout 0.5 went from 184 to 145 ms, a 4-worker epoch at 1 Gbit/s from
569 to 551 ms (README, "Choices made where the issues were silent").

Called by :mod:`dgl_sni.cli` (``resolve``) and by the worker (``in_use``, reported in the
metrics' ``in_effect``).
"""
from __future__ import annotations

import os

ALLOCATORS = ("auto", "tcmalloc", "system")
TCMALLOC_SONAME = "libtcmalloc_minimal.so.4"
TCMALLOC_PACKAGE = "libtcmalloc-minimal4"
# where Debian and most distributions put shared libraries
SEARCH_DIRS = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib",
               "/usr/local/lib", "/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu")
# tcmalloc reports every allocation above 1 GiB on stderr; a 500k-node partition makes some
LARGE_ALLOC_REPORT = str(1 << 40)


def find_tcmalloc(search_dirs=SEARCH_DIRS) -> str | None:
    """The path of tcmalloc's shared library, or None when it is not installed."""
    for folder in search_dirs:
        path = os.path.join(folder, TCMALLOC_SONAME)
        if os.path.isfile(path):
            return path
    return None


def resolve(choice: str, search_dirs=SEARCH_DIRS) -> tuple[str, str | None]:
    """``(allocator, library)`` for ``--allocator choice``: the name the run will report and
    the library to preload (None: the system's malloc). ``ValueError`` when ``tcmalloc`` is
    asked for and missing, naming the Debian package."""
    if choice not in ALLOCATORS:
        raise ValueError(f"--allocator must be one of {', '.join(ALLOCATORS)}, got {choice!r}")
    if choice == "system":
        return "system", None
    path = find_tcmalloc(search_dirs)
    if path is None:
        if choice == "tcmalloc":
            raise ValueError(f"--allocator tcmalloc: {TCMALLOC_SONAME} not found in {', '.join(search_dirs)}; "
                             f"install Debian's {TCMALLOC_PACKAGE} (make install does, as root) or "
                             "pass --allocator system")
        return "system", None
    return "tcmalloc", path


def preload_env(env: dict, library: str | None) -> dict:
    """``env`` with ``library`` put first in ``LD_PRELOAD`` (kept as is when None)."""
    if library is None:
        return env
    env = dict(env)
    others = [p for p in env.get("LD_PRELOAD", "").replace(":", " ").split() if p != library]
    env["LD_PRELOAD"] = " ".join([library] + others)
    env.setdefault("TCMALLOC_LARGE_ALLOC_REPORT_THRESHOLD", LARGE_ALLOC_REPORT)
    return env


def in_use(maps: str = "/proc/self/maps") -> str:
    """``tcmalloc`` when this process has tcmalloc mapped, else ``system``."""
    try:
        with open(maps) as fh:
            return "tcmalloc" if "libtcmalloc" in fh.read() else "system"
    except OSError:
        return "system"
