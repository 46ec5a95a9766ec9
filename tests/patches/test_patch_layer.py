"""The patches layer: standard library, torch and dgl only; importing a patch imports no dgl."""
import ast
import os
import subprocess
import sys

from tests.helpers import ROOT

PATCHES = os.path.join(ROOT, "patches")
MODULES = sorted(f[:-3] for f in os.listdir(PATCHES) if f.endswith(".py") and f != "__init__.py")
PATCH_MODULES = [m for m in MODULES if not m.startswith("_")]


def _imported_roots(path):
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            yield node.module.split(".")[0]


def test_patches_import_only_stdlib_torch_and_dgl():
    for name in MODULES + ["__init__"]:
        for root in _imported_roots(os.path.join(PATCHES, name + ".py")):
            assert root in sys.stdlib_module_names or root in ("torch", "dgl"), (name, root)


def test_every_patch_has_install_uninstall_and_is_installed():
    import importlib
    assert set(PATCH_MODULES) == {"dgl_import_hook", "dist_tensor_class", "distgraph_init_hook",
                                  "graphbolt_optional", "initialize_hook", "kvclient_pull", "kvclient_push",
                                  "kvstore_lazy_init", "partition_assignment", "rpc_waits"}
    doc = importlib.import_module("patches").__doc__
    for name in PATCH_MODULES:
        module = importlib.import_module(f"patches.{name}")
        for fn in (module.install, module.uninstall, module.is_installed):
            assert callable(fn) and fn.__doc__, (name, fn)
        assert module.DGL_VERSIONS == ("2.1",), name
        assert f"patches.{name}" in doc, name  # listed in the package docstring


def test_importing_the_patches_imports_no_dgl():
    code = ("import sys; " + "; ".join(f"import patches.{m}" for m in MODULES)
            + "; print(sorted(m for m in sys.modules if m == 'dgl' or m.startswith(('dgl.', 'dgl_sni'))))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/",
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[]"]
