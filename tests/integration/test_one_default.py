"""Every setting has one default: the configuration's (``dgl_sni/config/``).

Read on the syntax trees of ``dgl_sni`` (but its configuration), ``storage_tier``,
``dpu_agent`` and ``patches``: no function parameter named after a setting defaults to a literal
equal to that setting's default, and no ``.get("<setting>", <literal>)`` falls back to one. Code
that needs the default reads it from the configuration, or (below ``dgl_sni``, which cannot
import it) declares it once where the configuration reads it from.
"""
import ast
import os
from dataclasses import MISSING, fields

from dgl_sni.config import TrainConfig
from tests.helpers import ROOT

SCANNED = ("dgl_sni", "storage_tier", "dpu_agent", "patches")
# parameters that share a setting's name but not its meaning: the configuration's ``seed`` is the
# model's; a partitioner's is the seed of its own random stream, which no setting gives
OTHER_MEANING = {("dgl_sni/partition.py", "seed"), ("storage_tier/subparts.py", "seed"),
                 ("storage_tier/partitioner.py", "seed")}


def _defaults() -> dict:
    out = {}
    for part in TrainConfig().parts().values():
        for f in fields(type(part)):
            value = f.default
            if value is not MISSING and not isinstance(value, bool) and isinstance(value, (int, float, str)) \
                    and value != "":
                out[f.name] = value
    return out


def _files():
    for package in SCANNED:
        top = os.path.join(ROOT, package)
        for root, dirs, names in os.walk(top):
            dirs[:] = [d for d in dirs if d != "__pycache__" and (root, d) != (os.path.join(ROOT, "dgl_sni"), "config")]
            yield from (os.path.join(root, n) for n in sorted(names) if n.endswith(".py"))


def _literal(node):
    if isinstance(node, ast.Constant) and not isinstance(node.value, bool):
        return node.value
    return MISSING


def copies(defaults: dict, tree: ast.AST) -> list:
    """``(line, setting, value)`` of every literal copy of a setting's default in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            args = node.args
            positional = args.posonlyargs + args.args
            pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
            pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
            for arg, default in pairs:
                value = _literal(default)
                if arg.arg in defaults and value == defaults[arg.arg] and type(value) is type(defaults[arg.arg]):
                    found.append((default.lineno, arg.arg, value))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get" \
                and len(node.args) == 2:
            key, value = _literal(node.args[0]), _literal(node.args[1])
            if key in defaults and value == defaults[key] and type(value) is type(defaults[key]):
                found.append((node.lineno, key, value))
    return found


def test_no_setting_has_a_second_default():
    defaults = _defaults()
    assert {"dropout", "heads", "window", "sync_interval", "quantize"} <= set(defaults)  # the scan sees them
    offenders = []
    for path in _files():
        with open(path) as fh:
            tree = ast.parse(fh.read(), path)
        rel = os.path.relpath(path, ROOT)
        offenders += [f"{rel}:{line}: {name} = {value!r}" for line, name, value in copies(defaults, tree)
                      if (rel, name) not in OTHER_MEANING]
    assert not offenders, "literal copies of the configuration's defaults:\n" + "\n".join(offenders)


def test_the_scan_finds_a_copy_where_there_is_one():
    tree = ast.parse("def f(x, dropout=0.5, *, heads=4):\n    return cfg.get('sync_interval', 1)\n"
                     "def g(dropout=0.25, heads=4.0):\n    pass\n")
    assert copies(dict(dropout=0.5, heads=4, sync_interval=1), tree) == [
        (1, "dropout", 0.5), (1, "heads", 4), (2, "sync_interval", 1)]
