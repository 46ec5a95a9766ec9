"""A model written with DGL's own layers, trained full-graph across machines unchanged.

A DGL user's mini-batch model has ``forward(blocks, x)`` and runs ``h = layer(block, h)``
over its blocks. :class:`BlockModel` wraps such a module so the trainers run it as they
run the built-in models (:class:`~dgl_sni.models.TrainableModel`):

* **blocks**: every entry of ``blocks`` is the worker's block (owned and halo rows as
  sources, owned rows as destinations; in one process, the whole graph), a DGL block whose
  ``in_degrees``/``out_degrees`` are the *global* graph's (:class:`GlobalDegreeBlock`), so a
  layer that normalises by degree (``GraphConv(norm="both")``) computes what it computes on
  the whole graph; ``len(blocks)`` is ``--layers``;
* **halo rows**: a forward pre-hook on every submodule sees each call that passes the block
  and rows of the destinations only (a layer's output, ``[num_dst, ...]``), and hands the
  layer ``[owned; halo]`` from the exchange (:class:`~dgl_sni.halo.rows.HaloRows`), once per
  tensor and pass; the exchange's backward pushes the halo rows' gradients. The input
  features already hold every source row;
* **dropout**: each ``nn.Dropout`` is replaced by :class:`KeyedDropout`, whose masks are keyed
  by global node (edge) id, module, call and step, so distributed training equals
  single-process training with dropout on.

What cannot work is refused when the model is wrapped, naming the layer (:func:`check_module`):
a forward without blocks, batch statistics (they would be each worker's own), layers that
propagate several hops in one call (the exchange supplies one hop of halo rows per layer).

**Summed halo rows.** A layer linear in its source rows (DGL's ``GraphConv``, ``SAGEConv``
with mean or gcn aggregation, ``GINConv`` with sum or mean, or a module declaring
:class:`~dgl_sni.linear_layers.SumsHaloRows`) that is the only reader of its exchanged rows is
declared to take a sum (:meth:`BlockModel.halo_takes`); where the step's plan gives it form
``SUM`` (the stale steps of ``--stale-halo summed``), its call aggregates the owned rows only
and adds the sum of its halo rows, kept from one stale step to the next
(:mod:`dgl_sni.linear_layers`). Every other step, and every other layer, runs DGL's own code
over whole rows.
"""
from __future__ import annotations

import inspect
import threading

import torch
import torch.nn as nn

import dgl_sni  # noqa: F401  (DGL shims first)
import dgl
from dgl.heterograph import DGLBlock

from storage_tier.block import GraphBlock
from .dropout import derive_seed, keyed_dropout
from .halo.rows import ROWS_ONLY, Form, HaloRows, Takes, WholeGraph
from .halo.sums import BlockSplit
from .linear_layers import summing
from .models import TrainableModel, identity_exchange

_DROPOUT_TAG = 3  # keyed dropout of a user's nn.Dropout (the built-in models use 1 and 2)

# modules that cannot be trained on partitions, and why (checked by type name and base)
_REFUSED = {
    "_BatchNorm": "normalises by statistics over all rows of its input: each worker would use its own "
                  "rows' statistics (use nn.LayerNorm, which normalises each row by itself)",
    "GraphNorm": "normalises by statistics over the whole graph's nodes: each worker would use its own "
                 "(use nn.LayerNorm)",
    "SGConv": "propagates k hops in one call: the exchange supplies one hop of halo rows per layer "
              "(stack k one-hop layers instead)",
    "APPNPConv": "propagates k hops in one call: the exchange supplies one hop of halo rows per layer",
    "TAGConv": "propagates k hops in one call: the exchange supplies one hop of halo rows per layer",
    "ChebConv": "propagates k hops in one call: the exchange supplies one hop of halo rows per layer",
}


class ModelError(ValueError):
    """A user's model cannot be trained full-graph across machines; the message names the
    layer and the reason."""


def check_module(module: nn.Module, where: str = "the model") -> None:
    """Raise :class:`ModelError` if ``module`` cannot be trained here (see the module docstring);
    ``where`` names its origin in the message (``--model-file FILE.py:build``)."""
    if not isinstance(module, nn.Module):
        raise ModelError(f"{where}: build(...) returned {type(module).__name__}, not a torch.nn.Module")
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind is p.VAR_POSITIONAL for p in params):
        raise ModelError(f"{where}: {type(module).__name__}.forward{inspect.signature(module.forward)} takes no blocks: "
                         "a model's forward must be forward(blocks, x), as DGL's mini-batch models are")
    for name, sub in module.named_modules():
        for cls in type(sub).__mro__:
            if cls.__name__ in _REFUSED:
                raise ModelError(f"{where}: layer '{name or type(module).__name__}' ({type(sub).__name__}) cannot be trained "
                                 f"on partitions: it {_REFUSED[cls.__name__]}")


class GlobalDegreeBlock(DGLBlock):
    """A DGL block whose ``in_degrees``/``out_degrees`` are the global graph's: a partition's
    block holds only the edges into its owned rows, so a source row's out-degree counted on
    it would be short. Made by :func:`dgl_block`; read by layers such as ``GraphConv``.
    Views DGL derives from it (``block[etype]`` inside ``update_all``) count on their own
    edges: a destination's in-degree is the same there (the block holds every in-edge)."""

    _src_degree: torch.Tensor | None = None
    _dst_degree: torch.Tensor | None = None

    def out_degrees(self, u=dgl.ALL, etype=None):
        if self._src_degree is None:
            return super().out_degrees(u, etype)
        return self._src_degree if _is_all(u) else self._src_degree[_ids(u)]

    def in_degrees(self, v=dgl.ALL, etype=None):
        if self._dst_degree is None:
            return super().in_degrees(v, etype)
        return self._dst_degree if _is_all(v) else self._dst_degree[_ids(v)]


def _is_all(ids) -> bool:
    return isinstance(ids, str) and ids == dgl.ALL


def _ids(ids):
    if isinstance(ids, int):
        return ids
    return torch.as_tensor(ids, dtype=torch.int64)


def dgl_block(block: GraphBlock) -> GlobalDegreeBlock:
    """``block``'s graph as a :class:`GlobalDegreeBlock` (same edges, same edge ids)."""
    if block.src_degree is None or block.dst_degree is None:
        raise ValueError("the block carries no global degrees (build it with storage_tier.block.build_block)")
    src, dst = block.graph.edges(order="eid")
    graph = dgl.create_block((src, dst), num_src_nodes=block.num_src, num_dst_nodes=block.num_dst)
    graph.create_formats_()
    graph.__class__ = GlobalDegreeBlock
    graph._src_degree, graph._dst_degree = block.src_degree, block.dst_degree
    return graph


class _Pass(threading.local):
    """What the modules of one forward pass read: the block, keys, dropout seed and calls."""

    block: GraphBlock | None = None
    graph: GlobalDegreeBlock | None = None
    halo: HaloRows | None = None
    seed: int = 0
    step: int = 0
    exchanged: dict | None = None  # id(rows) -> (rows, [owned; halo]) of this pass
    calls: dict | None = None  # dropout module index -> calls in this pass
    split: object = None  # the block's BlockSplit where some layer takes a sum
    summed: dict | None = None  # id(module) -> (layer, owned rows): a call that takes its halo rows summed
    x_src: torch.Tensor | None = None  # the input rows handed to the module (whole, or the owned ones)
    input_sum: bool = False  # the input layer takes the sum of its halo input rows this pass
    input_taken: bool = False  # ... and its reader has been called
    layers: int = 0  # exchanged layers met in this pass


class KeyedDropout(nn.Module):
    """An ``nn.Dropout`` whose masks are keyed by global node (or edge) id: the row keys are
    the block's source keys (the rows of every source), its destination keys (the rows of
    the owned nodes) or its edge keys, by the input's row count; the seed mixes the run's
    dropout seed, the step, the module's place in the model and its call in the pass.
    Installed by :class:`BlockModel` in place of each ``nn.Dropout``."""

    def __init__(self, p: float, index: int, name: str, state: _Pass):
        super().__init__()
        self.p, self.index, self.name, self._state = p, index, name, state

    def extra_repr(self) -> str:
        return f"p={self.p}, keyed"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        state = self._state
        if state.block is None:
            raise RuntimeError(f"dropout '{self.name}' ran outside a pass of its model")
        call = state.calls.get(self.index, 0)
        state.calls[self.index] = call + 1
        seed = derive_seed(state.seed, state.step, self.index, call, _DROPOUT_TAG)
        return keyed_dropout(x, self._keys(x), seed, self.p)

    def _keys(self, x: torch.Tensor) -> torch.Tensor:
        block, rows = self._state.block, x.shape[0]
        by_count = {}
        by_count.setdefault(block.num_edges, []).append(("edges", block.edge_keys))
        by_count.setdefault(block.num_dst, []).append(("destinations", block.src_keys[: block.num_dst]))
        by_count.setdefault(block.num_src, []).append(("sources", block.src_keys))
        found = by_count.get(rows)
        if not found:
            raise ModelError(f"dropout '{self.name}' got {rows} rows: neither the block's {block.num_src} sources, "
                             f"{block.num_dst} destinations nor {block.num_edges} edges, so its masks cannot "
                             "be keyed by node or edge")
        kinds = {kind for kind, _ in found}
        if "edges" in kinds and len(kinds) > 1:
            raise ModelError(f"dropout '{self.name}' got {rows} rows, as many as the block has edges and nodes: "
                             "it cannot tell which it drops")
        return found[0][1] if len(found) == 1 else block.src_keys[:rows]


class _SummedInputProbe(WholeGraph):
    """The probe's second pass: the input layer summed, every exchanged layer's halo rows zeros
    (as in the first pass)."""

    def __init__(self, num_src: int):
        self.num_src = num_src

    def form(self, layer: int) -> Form:
        return Form.SUM if layer == 0 else Form.ROWS

    def splits(self) -> bool:
        return True

    def __call__(self, layer: int, owned: torch.Tensor) -> torch.Tensor:
        rows = self.num_src - owned.shape[0]
        return torch.cat((owned, owned.new_zeros(rows, owned.shape[1])))


class BlockModel(nn.Module, TrainableModel):
    """A user's ``forward(blocks, x)`` module trained full-graph (see the module docstring).

    Made by :func:`dgl_sni.model_file.build` for a model that is not a
    :class:`~dgl_sni.models.TrainableModel` already; called by the trainers as they call
    :class:`~dgl_sni.models.FullGraphGNN`.
    """

    def __init__(self, module: nn.Module, num_blocks: int, where: str = "the model"):
        super().__init__()
        check_module(module, where)
        self._state = _Pass()
        self._graphs = {}  # id(block) -> (block, its GlobalDegreeBlock)
        self.module = module
        self.num_blocks = num_blocks
        self._keyed_dropout()
        self._probe = None  # while exchange_dims runs: the widths found, in order
        self._readers = None  # while it runs: per exchanged layer, the modules that read its rows
        self._layout = None  # (block, widths, takes) of the last probe
        self._input_readers = None  # while it runs: the modules that read the input rows whole
        self._input_reader = None  # id of the one module that takes the input layer's halo sum, if any
        self._probing = False  # a probe pass runs
        self._summing = {}  # id(module) -> its SumsHaloRows, for the modules linear in their sources
        for name, sub in self.module.named_modules():
            sub.register_forward_pre_hook(self._pre_hook(name or type(module).__name__), with_kwargs=True)
            adapter = summing(sub)
            if adapter is not None:
                self._summing[id(sub)] = adapter
                self._take_sums(sub, adapter)

    def _keyed_dropout(self) -> None:
        index = 0
        for parent_name, parent in list(self.module.named_modules()):
            for child_name, child in list(parent.named_children()):
                name = f"{parent_name}.{child_name}" if parent_name else child_name
                if type(child) is nn.Dropout:
                    setattr(parent, child_name, KeyedDropout(child.p, index, name, self._state))
                    index += 1
                elif isinstance(child, nn.modules.dropout._DropoutNd) and not isinstance(child, KeyedDropout):
                    raise ModelError(f"layer '{name}' ({type(child).__name__}) draws masks that cannot be keyed "
                                     "by node (use nn.Dropout)")

    # ------------------------------------------------------------------ halo rows
    def _take_sums(self, module: nn.Module, adapter) -> None:
        """Let ``module`` take its halo rows summed where the pre-hook found its call planned so:
        its forward is wrapped, DGL's own forward running every other call."""
        original, state = module.forward, self._state

        def forward(graph, feat=None, *args, **kwargs):
            pending = state.summed.pop(id(module), None) if state.summed else None
            if pending is None:
                return original(graph, feat, *args, **kwargs) if feat is not None \
                    else original(graph, *args, **kwargs)
            if args or any(v is not None for v in kwargs.values()):
                raise ModelError(f"layer {type(module).__name__} was called with more than its rows "
                                 f"({len(args)} more arguments, {sorted(kwargs)}): it cannot take its halo rows "
                                 "summed (use --stale-halo rows)")
            layer, owned = pending
            halo, split = state.halo, state.split
            scale = adapter.halo_scale(module, graph)
            if layer == 0:  # the input features' halo rows never change: their sum is made once per scale
                return adapter.forward_summed(module, graph, split, owned, split.static_sum(scale))
            owned = halo.start_halo(layer, owned)
            return adapter.forward_summed(module, graph, split, owned, halo.halo_sum(layer, owned, split, scale))

        module.forward = forward

    def _pre_hook(self, name: str):
        def hook(module, args, kwargs):
            state = self._state
            if state.block is None or not args:
                return None
            if isinstance(args[0], list) and args[0] and args[0][0] is state.graph and module is not self.module:
                raise ModelError(f"layer '{name}' ({type(module).__name__}) was called with the list of blocks: "
                                 "run layer i on blocks[i] (h = layer(blocks[i], h)), as DGL's mini-batch models do")
            if not isinstance(args[0], dgl.DGLGraph):
                return None
            if args[0] is not state.graph:
                raise ModelError(f"layer '{name}' ({type(module).__name__}) was called with a graph that is not "
                                 "one of the blocks forward() received: a model must run its layers on those "
                                 "blocks (it cannot read a graph of its own)")
            if len(args) > 1:
                feat = self._sources(args[1], module)
                if feat is not args[1]:
                    return (args[0], feat, *args[2:]), kwargs
            elif "feat" in kwargs:
                feat = self._sources(kwargs["feat"], module)
                if feat is not kwargs["feat"]:
                    return args, dict(kwargs, feat=feat)
            return None
        return hook

    def _sources(self, feat, module: nn.Module):
        """``feat`` with the halo rows after the owned ones where it holds the owned rows only
        (where the plan sums the layer's halo rows: ``feat`` itself, and ``module``'s call
        takes their sum)."""
        if isinstance(feat, tuple):
            return (self._sources(feat[0], module), *feat[1:])
        state = self._state
        block = state.block
        if not torch.is_tensor(feat) or block.num_src == block.num_dst:
            return feat
        if self._input_readers is not None and feat is state.x_src:  # the probe: a reader of the input rows
            self._input_readers.append(module)
            return feat
        if state.input_sum and not state.input_taken and id(module) == self._input_reader:
            state.input_taken = True  # the input layer: the owned rows, and the sum of the halo inputs
            state.summed[id(module)] = (0, feat)
            return feat
        if feat.shape[0] != block.num_dst:
            return feat
        seen = state.exchanged
        if id(feat) in seen:
            layer, full = seen[id(feat)][1:]
            if self._readers is not None:
                self._readers[layer - 1].append(module)
            if full is None:
                raise RuntimeError(f"the rows exchanged before layer {layer} are read by a second module "
                                   f"({type(module).__name__}) where the plan sums them for the first")
            return full
        state.layers += 1
        layer = state.layers
        halo = state.halo
        if self._probe is not None:
            if feat.dim() != 2:
                raise ModelError(f"the rows exchanged before layer {layer} have shape {list(feat.shape)}: "
                                 "rows are exchanged as [rows, width] (flatten heads before the next layer)")
            self._probe.append(int(feat.shape[1]))
            self._readers.append([module])
            full = torch.cat((feat, feat.new_zeros(block.num_src - block.num_dst, feat.shape[1])))
        elif halo.form(layer) is Form.SUM:
            if id(module) not in self._summing:
                raise RuntimeError(f"the plan sums the halo rows of layer {layer}, which {type(module).__name__} "
                                   "reads whole (it declared rows)")
            state.summed[id(module)] = (layer, feat)
            full = None
        else:
            full = halo(layer, feat)
        seen[id(feat)] = (feat, layer, full)  # the rows are kept so that the id stays theirs
        return feat if full is None else full

    # ------------------------------------------------------------------ TrainableModel
    def forward(self, block: GraphBlock, x_src: torch.Tensor, halo: HaloRows = identity_exchange,
                step: int = 0, dropout_seed: int = 0, split=None) -> torch.Tensor:
        if halo.form(0) is Form.SUM and not self._probing:
            self._probe_layout(block, x_src)  # which module takes the input layer's sum (once per block)
        state = self._state
        graph = self._graph(block)
        state.block, state.graph, state.halo, state.split = block, graph, halo, split
        state.seed, state.step, state.exchanged, state.calls, state.summed = dropout_seed, step, {}, {}, {}
        state.input_sum, state.input_taken, state.layers = halo.form(0) is Form.SUM, False, 0
        if state.input_sum and self._input_reader is None:
            raise RuntimeError("the plan sums the input layer's halo rows, which this model takes whole")
        state.x_src = x_src[: block.num_dst] if state.input_sum else x_src
        try:
            out = self.module([graph] * self.num_blocks, state.x_src)
            if state.summed or state.input_sum != state.input_taken:
                raise RuntimeError("a layer's summed halo rows were never taken: the module that read them did "
                                   "not run its forward")
        finally:
            state.block = state.graph = state.halo = state.exchanged = state.calls = None
            state.split = state.summed = state.x_src = None
        if not torch.is_tensor(out) or out.dim() != 2 or out.shape[0] != block.num_dst:
            shape = list(out.shape) if torch.is_tensor(out) else type(out).__name__
            raise ModelError(f"{type(self.module).__name__}.forward returned {shape}: it must return one row of "
                             f"logits per destination node ([{block.num_dst}, classes])")
        return out

    def _graph(self, block: GraphBlock) -> GlobalDegreeBlock:
        key = id(block)
        if key not in self._graphs:
            self._graphs[key] = (block, dgl_block(block))  # the block kept so that its id stays its own
        return self._graphs[key][1]

    def exchange_dims(self, block: GraphBlock, x_src: torch.Tensor) -> list | None:
        """Width of the rows exchanged before each layer that takes halo rows, found by one
        forward pass over ``block`` (eval mode, no gradient) with zeros for the halo rows;
        ``None`` where ``block`` has no halo rows to show them."""
        layout = self._probe_layout(block, x_src)
        return None if layout is None else list(layout[0])

    def halo_takes(self, block: GraphBlock, x_src: torch.Tensor) -> list:
        """A layer takes a sum where its rows have one reader, linear in its sources
        (:func:`~dgl_sni.linear_layers.summing`), else whole rows. For the input layer the
        reader is the one module that reads the input rows (through dropout or not), and the
        model run on the owned input rows with that layer summed must give the output of the
        model run on every input row (checked on ``block`` once: a model that reads its inputs
        otherwise as well takes them whole)."""
        layout = self._probe_layout(block, x_src)
        return [ROWS_ONLY] if layout is None else list(layout[1])

    def _probe_layout(self, block: GraphBlock, x_src: torch.Tensor):
        """``(widths, takes)``: the widths of the exchanged layers and what every layer takes
        (the input layer first), from a forward pass over ``block`` (eval mode, no gradient)
        with zeros for the halo rows, and a second one with the input layer summed where it
        may be; ``None`` without halo rows."""
        if block.num_src == block.num_dst:
            return None
        if self._layout is not None and self._layout[0] is block:
            return self._layout[1:]
        was_training, self._probe, self._readers, self._input_readers = self.training, [], [], []
        self._input_reader, self._probing = None, True
        try:
            self.eval()
            with torch.no_grad():
                whole = self(block, x_src)
                takes = [Takes(sum=True) if len(readers) == 1 and id(readers[0]) in self._summing else ROWS_ONLY
                         for readers in self._readers]
                widths, readers = list(self._probe), self._input_readers
                self._probe = self._readers = self._input_readers = None
                takes.insert(0, ROWS_ONLY)
                if len(readers) == 1 and id(readers[0]) in self._summing:
                    self._input_reader = id(readers[0])
                    summed = self(block, x_src, _SummedInputProbe(block.num_src), split=BlockSplit(block, x_src))
                    if torch.allclose(summed, whole, rtol=1e-4, atol=1e-5):
                        takes[0] = Takes(sum=True)
                    else:
                        self._input_reader = None
            self._layout = (block, widths, takes)
            return self._layout[1:]
        finally:
            self._probe = self._readers = self._input_readers = None
            self._probing = False
            self.train(was_training)

    def exchanged_parameters(self):
        return self.parameters()
