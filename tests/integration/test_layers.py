"""The packages import one way (README, "How it is built"), checked on their syntax trees.

* ``patches`` imports only the standard library, torch and dgl;
* ``dpu_agent`` imports nothing else of the project, and neither torch nor dgl (it runs on a
  DPU alone);
* ``storage_tier`` never imports ``dgl_sni``;
* ``dgl_sni`` may import all of them;
* no two files import each other.

Every import counts, also one inside a function.
"""
import ast
import os
import shutil
import sys

import pytest

from tests.helpers import ROOT

PACKAGES = ("patches", "dpu_agent", "storage_tier", "dgl_sni")
RULES = {
    # package: (allowed top-level names outside the stdlib, or None for any; forbidden project packages)
    "patches": ({"torch", "dgl"}, {"dpu_agent", "storage_tier", "dgl_sni"}),
    "dpu_agent": (None, {"patches", "storage_tier", "dgl_sni", "torch", "dgl"}),
    "storage_tier": (None, {"dgl_sni"}),
    "dgl_sni": (None, set()),
}


def _modules(root):
    """{dotted module name: path} of every package file under ``root``."""
    found = {}
    for pkg in PACKAGES:
        for folder, _, names in os.walk(os.path.join(root, pkg)):
            for name in names:
                if name.endswith((".py", ".pyx")):
                    path = os.path.join(folder, name)
                    rel = os.path.relpath(path, root)[: -len(os.path.splitext(name)[1])]
                    parts = rel.split(os.sep)
                    if parts[-1] == "__init__":
                        parts = parts[:-1]
                    found[".".join(parts)] = path
    return found


def _imports(module, path, modules):
    """(line, absolute module name) of every import in the file."""
    is_pkg = os.path.basename(path).startswith("__init__.")
    package = module if is_pkg else module.rpartition(".")[0]
    with open(path, encoding="utf-8") as fh:
        source = fh.read()
    if path.endswith(".pyx"):  # Cython: only its plain import lines are Python syntax
        source = "\n".join(ln if ln.lstrip().startswith(("import ", "from ")) and " cimport " not in ln
                           and not ln.lstrip().startswith("from libc") else "" for ln in source.splitlines())
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module
            out.append((node.lineno, target))
            for alias in node.names:  # ``from pkg import module``
                if f"{target}.{alias.name}" in modules:
                    out.append((node.lineno, f"{target}.{alias.name}"))
    return out


def violations(root):
    """Every import against the rules, and every pair of files importing each other."""
    modules = _modules(root)
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    edges, problems = {}, []
    for module, path in sorted(modules.items()):
        pkg = module.split(".")[0]
        allowed, forbidden = RULES[pkg]
        for line, target in _imports(module, path, modules):
            top = target.split(".")[0]
            where = f"{os.path.relpath(path, root)}:{line} imports {target}"
            if top in forbidden:
                problems.append(where)
            elif allowed is not None and top not in stdlib and top not in allowed and top != pkg:
                problems.append(where)
            if target in modules and target != module:
                edges.setdefault(module, set()).add(target)
    for a, targets in edges.items():
        for b in targets:
            if a < b and a in edges.get(b, ()) and not (b.startswith(a + ".") or a.startswith(b + ".")):
                problems.append(f"{a} and {b} import each other")
    return problems


def test_the_packages_import_one_way():
    assert violations(ROOT) == []


@pytest.mark.parametrize("pkg, line", [
    ("storage_tier", "from dgl_sni.metrics import Counters"),
    ("dpu_agent", "import torch"),
    ("dpu_agent", "    from storage_tier import sizes"),
    ("patches", "import numpy as np"),
])
def test_a_forbidden_import_is_caught(tmp_path, pkg, line):
    for name in PACKAGES:
        shutil.copytree(os.path.join(ROOT, name), tmp_path / name,
                        ignore=shutil.ignore_patterns("*.so", "*.cpp", "__pycache__", "csrc"))
    planted = tmp_path / pkg / "planted.py"
    body = f"def late():\n{line}\n" if line.startswith(" ") else f"{line}\n"
    planted.write_text(body)
    new = set(violations(str(tmp_path))) - set(violations(ROOT))
    assert new and all(v.startswith(os.path.join(pkg, "planted.py") + ":") for v in new), new


def test_two_files_importing_each_other_are_caught(tmp_path):
    for name in PACKAGES:
        shutil.copytree(os.path.join(ROOT, name), tmp_path / name,
                        ignore=shutil.ignore_patterns("*.so", "*.cpp", "__pycache__", "csrc"))
    (tmp_path / "dgl_sni" / "ping.py").write_text("from . import pong\n")
    (tmp_path / "dgl_sni" / "pong.py").write_text("def f():\n    from .ping import x\n")
    new = set(violations(str(tmp_path))) - set(violations(ROOT))
    assert new == {"dgl_sni.ping and dgl_sni.pong import each other"}
