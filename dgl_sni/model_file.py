"""Where a run's model comes from: one path for the built-in models and a user's own.

A *builder* is ``build(in_feats, num_classes, cfg) -> nn.Module`` (``cfg``: the run's
:class:`~dgl_sni.config.ModelConfig`). ``--model gcn|sage|gat`` names a built-in builder
(:func:`builtin`); ``--model-file FILE.py:build`` a function in a file of the user's
(:func:`load_builder`); :func:`dgl_sni.train` takes the function itself. :func:`build`
calls the builder with torch's generator seeded by ``--seed`` (every worker and the
single-process reference start from the same weights) and returns what the trainers run:
the module itself where it is a :class:`~dgl_sni.models.TrainableModel` (the built-in
models), else the module wrapped in :class:`~dgl_sni.block_model.BlockModel`.
"""
from __future__ import annotations

import importlib.util
import inspect
import os
import sys

from .block_model import BlockModel, ModelError
from .config import ModelConfig
from .models import FullGraphGNN, TrainableModel, seeded

_LOADED = {}  # path -> module, so a file is executed once per process


def builtin(name: str):
    """The builder of the built-in model ``name`` (``gcn``, ``sage``, ``gat``)."""
    def build(in_feats: int, num_classes: int, cfg: ModelConfig) -> FullGraphGNN:
        return FullGraphGNN(name, in_feats, cfg.hidden, num_classes, cfg.layers, dropout=cfg.dropout,
                            heads=cfg.heads)
    build.__qualname__ = f"builtin_{name}"
    return build


def split_spec(spec: str) -> tuple[str, str]:
    """``FILE.py:NAME`` as ``(absolute path, NAME)`` (``NAME`` defaults to ``build``)."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or "/" in name:  # no name given (or a ':' inside the path)
        path, name = spec, "build"
    return os.path.abspath(path), name or "build"


def load_builder(spec: str):
    """The function ``NAME`` of ``FILE.py:NAME``; a :class:`ModelError` names the problem
    (no such file, the file fails to import, no ``NAME`` in it, ``NAME`` not callable)."""
    path, name = split_spec(spec)
    if not os.path.isfile(path):
        raise ModelError(f"--model-file {spec}: no such file {path}")
    module = _LOADED.get(path)
    if module is None:
        mod_name = f"dgl_sni_model_{len(_LOADED)}"
        loader = importlib.util.spec_from_file_location(mod_name, path)
        if loader is None:
            raise ModelError(f"--model-file {spec}: {path} is not a Python file")
        module = importlib.util.module_from_spec(loader)
        sys.modules[mod_name] = module
        try:
            loader.loader.exec_module(module)
        except Exception as err:  # noqa: BLE001 -- whatever the user's file raises, named
            del sys.modules[mod_name]
            raise ModelError(f"--model-file {spec}: importing {path} failed ({type(err).__name__}: {err})") from err
        _LOADED[path] = module
    fn = getattr(module, name, None)
    if fn is None:
        raise ModelError(f"--model-file {spec}: {os.path.basename(path)} defines no '{name}' (it must define "
                         f"{name}(in_feats, num_classes, cfg) returning a torch.nn.Module)")
    if not callable(fn):
        raise ModelError(f"--model-file {spec}: '{name}' in {os.path.basename(path)} is a "
                         f"{type(fn).__name__}, not a function")
    return fn


def spec_of(fn) -> str:
    """The ``FILE.py:NAME`` the trainers load ``fn`` from (a function defined at the top level
    of a file: each trainer process imports that file)."""
    name = getattr(fn, "__qualname__", "")
    try:
        path = inspect.getsourcefile(fn)
    except TypeError:
        path = None
    if not path or not name.isidentifier():
        raise ModelError(f"{fn!r} is not a function defined at the top level of a file: the trainers, "
                         "separate processes, load the builder from its file (define it with def at the "
                         "top level, and guard the script's own work with if __name__ == '__main__')")
    return f"{os.path.abspath(path)}:{name}"


def builder_for(cfg: ModelConfig):
    """The builder ``cfg`` names: its model file's, else the built-in model's."""
    return load_builder(cfg.model_file) if cfg.model_file else builtin(cfg.model)


def build(cfg: ModelConfig, in_feats: int, num_classes: int, builder=None) -> TrainableModel:
    """The model the trainers run for ``cfg`` (``builder``: ``cfg``'s by default), its initial
    weights drawn from ``cfg.seed`` only."""
    builder = builder or builder_for(cfg)
    where = f"--model-file {cfg.model_file}" if cfg.model_file else getattr(builder, "__qualname__", "build")
    with seeded(cfg.seed):
        module = builder(in_feats, num_classes, cfg)
        if isinstance(module, TrainableModel):
            return module
        return BlockModel(module, cfg.layers, where)
