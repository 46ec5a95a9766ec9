"""Layer-wise execution through the storage tier: forward, (re)gather backward, predict.

:class:`TierEngine` runs one worker's model layer by layer, sub-partition by
sub-partition, over the units of :mod:`storage_tier.subparts` (one unit = one
sub-partition's, or the halo's, rows of one layer). Moving units between the host cache
and the files (reads, prefetching, bypass and write-back, gradient buffers, timers and
byte counters) is the job of :class:`~storage_tier.units.UnitStore`; this module decides
what each layer reads, computes and writes. The plugin's tier trainer wraps it in the
training step of the in-memory full-graph trainer (same loss normalisation, same Adam,
same all-reduce of weight gradients), so the two can be compared number for number. The
model is anything with the :class:`~storage_tier.protocols.TierModel` interface; the
exchange any :class:`~storage_tier.protocols.HaloExchange`.

Forward (layers ``0 .. L-2``; layer ``l`` reads units ``act[l]`` and writes ``act[l+1]``).
For each sub-partition ``s``: gather its source rows unit by unit from ``act[l]`` (cache
hit, or a read the reader thread prefetched while ``s-1`` computed), compute
``layer_forward`` without autograd, and write the output rows straight to storage
(*bypass*, in the writer thread while ``s+1`` computes); the cache keeps a copy only if
it has room without evicting the layer being read. After the layer, ``exchange`` turns
owned rows into the halo rows of ``act[l+1]``. The last layer is not run in forward:
its logits are recomputed in backward, where the loss is taken.

Backward, destination-major (layers ``L-1 .. 0``; *regather*, no snapshots; any model).
For each ``s``: regather its inputs from ``act[l]`` exactly as forward did, recompute the
layer with autograd (the same keyed dropout masks), and backpropagate either the loss of
its training rows (last layer) or the output gradient rows of ``s`` read from
``grad[l+1]``. Weight gradients accumulate in the parameters; input gradients are
scatter-added into the host gradient buffer ``grad[l]`` (one unit per sub-partition/halo,
:meth:`~storage_tier.units.UnitStore.scatter`). After the layer, the halo gradients go to
``exchange`` (which may return gradients other workers computed for owned rows) and the
dirty ``grad[l]`` units are written to storage (they stay cached if the budget allows;
the layer below reads each once). Dead data (``grad[l+1]``, and ``act[l]`` for ``l >= 1``
until the next forward) is dropped from the cache and its gradient files deleted. Layer
0's input gradient is never computed (features are constants).

Backward, source-major (the default for a :class:`~storage_tier.protocols.SourceMajorModel`
whose every layer qualifies -- GCN and mean SAGE -- with ``mode="regather"`` on the CPU;
``source_major=False`` turns it off). Such a layer is linear in each source row
before an activation whose derivative its stored output gives, so backward can run over
*source* units instead. First the last layer's logits are computed sub-partition by
sub-partition (no autograd through the layer) and the loss's gradient with respect to them
becomes units ``grad[L]``. Then, for each layer ``l`` from the top, the output gradient
``grad[l+1]`` is complete and, for each unit ``q`` (sub-partitions and the halo), the engine
gathers the gradient rows of the destinations ``q``'s rows feed (the transposed edges of
:meth:`~storage_tier.subparts.SubpartitionPlan.reverse_parts`), reads ``act[l][q]`` once,
and the model adds the weight gradients and returns ``q``'s input gradient. That gradient
is complete at once: it passes through layer ``l``'s input dropout and layer ``l-1``'s
activation backward (from the stored rows in hand) and becomes ``grad[l][q]`` in place of
``act[l][q]``, which is dead. So nothing is regathered or recomputed, no gradient buffer is
scattered into, and a layer's working set is its output gradient plus one streamed unit:
with two layers of cache the whole backward reads only the input features, where the
destination-major pass needs a third layer (inputs, gradient buffer and output gradient)
and otherwise spills. ``grad[l]`` units then hold gradients of layer ``l-1``'s
pre-activation. The halo unit goes first in each layer, so the exchange carries what the
destination-major pass carries (the gradient of the halo rows as stored) and the owned
units add the others' share before their activation's backward.

Policies and switches: ``mode="snapshot"`` is the HongTu-style baseline -- forward also
writes every sub-partition's gathered inputs (including the last layer's) to storage and
backward reads them back instead of regathering. ``lazy_writes=True`` writes activations
and gradients only when the cache evicts them (write-back) instead of always (bypass);
``lazy_writes="grads"`` (the trainer's default, the seed paper's design) writes outputs
straight to storage but keeps gradient buffers in the host cache under the same budget,
written only when evicted; all three are exact. ``hoist_dropout=True`` (default) stores
hidden activations *after* the next layer's keyed input dropout (``TierModel.drop_rows``;
``drop_input`` then passes those rows through), so a row is dropped once where it is
produced rather than in each of the alpha sub-partitions that gather it -- the same
values, since masks are keyed by node. Each pass publishes its access schedule to the
store (prefetching, next-use eviction).

Exchange hook (distributed halo exchange): a :class:`~storage_tier.protocols.HaloExchange`.
Once layer ``layer-1``'s outputs of all owned rows are in the tier the engine calls
``exchange.forward_rows(layer, owned)`` with ``owned`` an
:class:`~storage_tier.protocols.OwnedRows` (``owned(slice or ids)`` returns owned rows of
``act[layer]`` in the view's numbering; ``owned.units()`` yields ``(view ids, rows)`` unit
by unit; ``owned.sync()`` waits until they are on storage); the returned tensor
``[n_halo, d]`` becomes the halo unit (``.numpy()``, float32). After ``grad[layer]`` is
complete it calls ``exchange.backward_rows(layer, grad_halo)`` with the halo rows'
gradient as a tensor (``torch.from_numpy`` of a contiguous copy); a returned tensor
``[n_owned, d]`` (view numbering) is added to the owned gradients, ``None`` adds nothing.
:class:`~storage_tier.protocols.NoExchange` is the single-process one. Rows move in their
stored form: with ``hoist_dropout`` and dropout > 0 that is after layer ``layer``'s keyed
dropout, and the gradients are with respect to those rows -- consistent among tier workers
(the masks are keyed by node id), not to be mixed with workers exchanging raw rows.

Metrics (per epoch, :meth:`TierEngine.metrics`): the store's record (:mod:`storage_tier.units`)
with the engine's ``tier_mode``, ``lazy_writes`` and ``source_major``; the memory bound of a
run is stated there too.

Compute device: CPU here. ``device="cuda"`` moves each gathered input and block to the GPU
and gradients back (the store reads output gradients with GPUDirect Storage via kvikio when
it is installed); that path is **untested here** (no CUDA on the development machine, and the
keyed dropout kernel is CPU-only, so it needs ``dropout=0``).
"""
from __future__ import annotations

import numpy as np
import torch

from .host_cache import HostCache
from .io import IOEngine
from .protocols import HaloExchange, NoExchange, PartLoss, SourceMajorModel, TierModel
from .subparts import SubpartitionPlan
from .units import UnitStore

MODES = ("regather", "snapshot")
WRITE_POLICIES = (False, "grads", True)  # lazy_writes: bypass, gradient buffers write-back, all write-back


class TierEngine:
    """Executes forward/backward/prediction passes of a :class:`TierModel` through the tier.

    Owns the layer passes and, in ``units``, a :class:`~storage_tier.units.UnitStore` (the
    unit I/O: pass schedules and prefetching, per-epoch timers and byte counters); uses
    (does not own) the model, the plan, the I/O engine (and its buffer pool), the cache and
    the exchange handed in by its trainer, which calls :meth:`write_inputs`,
    :meth:`forward`, :meth:`backward`, :meth:`predict` and :meth:`metrics`.
    """

    def __init__(self, model: TierModel, plan: SubpartitionPlan, io: IOEngine, cache: HostCache,
                 dims: list, exchange: HaloExchange | None = None, mode: str = "regather",
                 lazy_writes: bool | str = False,
                 prefetch_depth: int = 2, device: str = "cpu", hoist_dropout: bool = True,
                 source_major: bool = True, out_width: int = 0):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.model, self.plan, self.io, self.cache = model, plan, io, cache
        self.dims = list(dims)  # width of act[l], l = 0..L-1
        self.exchange = exchange or NoExchange()
        if lazy_writes not in WRITE_POLICIES:
            raise ValueError(f"lazy_writes must be False (bypass), 'grads' (gradient buffers write-back) "
                             f"or True (everything write-back), got {lazy_writes!r}")
        lazy_writes = lazy_writes if lazy_writes == "grads" else bool(lazy_writes)
        self.mode, self.lazy_writes = mode, lazy_writes
        self._lazy_outputs = lazy_writes is True
        self._lazy_grads = lazy_writes in ("grads", True)
        self.prefetch_depth = int(prefetch_depth)
        self.device = torch.device(device)
        # hidden activations are stored *after* the next layer's input dropout, so a row
        # is dropped once where it is produced instead of in every sub-partition gathering it
        self.hoist = bool(hoist_dropout)
        model.set_predropped(frozenset(range(1, model.num_layers)) if self.hoist else frozenset())
        # backward source unit by source unit where every layer allows it (see backward)
        # (on the CPU: the CUDA path, untested here, keeps the destination-major pass)
        self.source_major = bool(
            source_major and mode == "regather" and self.device.type == "cpu"
            and isinstance(model, SourceMajorModel)
            and all(model.source_major(l) for l in range(model.num_layers)))
        self.out_width = int(out_width)  # the logits' width (sizes the run directory only)
        self.pool = io.pool
        # the unit I/O: cache hooks, pass schedules, per-layer/phase counters (reset here)
        self.units = UnitStore(plan, io, cache, self.dims, self.prefetch_depth, self.device)

    # ------------------------------------------------------------------ metrics and sizes
    def reset_metrics(self) -> None:
        self.units.reset_metrics()

    def metrics(self) -> dict:
        """The tier's record of the epoch so far (see module docstring)."""
        return self.units.metrics(tier_mode=self.mode, lazy_writes=self.lazy_writes,
                                  source_major=self.source_major)

    def unit_shape(self, layer: int, part: int) -> tuple:
        return self.units.unit_shape(layer, part)

    def layer_bytes(self, layer: int, snapshot: bool = False) -> int:
        """Bytes on disk of one layer's units (or of its snapshots)."""
        return self.units.layer_bytes(layer, snapshot)

    def disk_needed(self) -> int:
        """Most bytes the run directory holds at once (activations + two gradient layers [+ snapshots])."""
        return self.units.disk_needed(self.model.num_layers, self.mode == "snapshot",
                                      self.out_width if self.source_major else None)

    # ------------------------------------------------------------------ compute
    def _layer_out(self, layer: int, block, xt: torch.Tensor) -> torch.Tensor:
        """``layer_forward`` plus, for hidden layers under hoisting, the next layer's dropout."""
        out = self.model.layer_forward(layer, block, xt)
        if self.hoist and layer < self.model.num_layers - 1:
            out = self.model.drop_rows(layer + 1, out, block.src_keys[: block.num_dst].to(out.device))
        return out

    def _to_device(self, part, x: torch.Tensor):
        if self.device.type == "cpu":
            return part.block, x
        # UNTESTED here (no CUDA): move the block once, the rows every time
        dev = getattr(part, "_device_block", None)
        if dev is None:
            from dataclasses import replace
            b = part.block
            dev = replace(b, graph=b.graph.to(self.device), src_norm=b.src_norm.to(self.device),
                          dst_norm=b.dst_norm.to(self.device))
            part._device_block = dev
        return dev, x.to(self.device)

    # ------------------------------------------------------------------ setup
    def write_inputs(self, features) -> None:
        """Write layer 0 (input features, permuted into tier order) as units; kept for the run."""
        self.units.write_inputs(features)

    # ------------------------------------------------------------------ passes
    def forward(self, training: bool) -> None:
        """Layers 0..L-2 (snapshot mode while training: also the last layer's gather + snapshot)."""
        L = self.model.num_layers
        self.units.mark_phase("fwd")
        upto = L if (self.mode == "snapshot" and training) else L - 1
        for layer in range(upto):
            self._forward_layer(layer, training, compute=layer < L - 1)

    def _forward_layer(self, layer: int, training: bool, compute: bool) -> None:
        parts = self.plan.parts
        order = self.units.order()
        self.units.active = {("act", layer), ("act", layer + 1)}
        snap = self.mode == "snapshot" and training
        accesses = [(("act", layer, src.part), True) for s in order for src in parts[s].sources]
        with self.units.schedule(accesses) as pf:
            for s in order:
                part = parts[s]
                x = self.units.gather(layer, part, pf, "fwd", tier_buffer=snap)
                if snap:
                    self.units.write(("snap", layer, s), x, layer, "fwd")
                if not compute:
                    self.pool.release(x)
                    continue
                with self.units.time(layer, "fwd", "compute_s"), torch.no_grad():
                    block, xt = self._to_device(part, torch.from_numpy(x))
                    out = self._layer_out(layer, block, xt)
                self.pool.release(x)
                del x, xt
                self.units.emit(("act", layer + 1, s), out, layer, "fwd", self._lazy_outputs)
                del out
        if compute and self.plan.num_halo:
            self._exchange_forward(layer + 1)

    def backward(self, loss: PartLoss) -> tuple:
        """Layers L-1..0, source-major where the model allows it, else regather, recompute,
        backpropagate (module docstring), from the trainer's ``loss`` of each sub-partition's
        logits; returns (the step's loss, correct training rows)."""
        self.units.mark_phase("bwd")
        if self.source_major:
            total, correct = self._loss_gradients(loss)
            for layer in reversed(range(self.model.num_layers)):
                self._backward_layer_sources(layer)
            return total, correct
        total, correct = 0.0, 0
        for layer in reversed(range(self.model.num_layers)):
            lo, co = self._backward_layer(layer, loss)
            total += lo
            correct += co
        return total, correct

    def _loss_gradients(self, loss: PartLoss) -> tuple:
        """Source-major backward, step 1: the logits of every sub-partition (no autograd
        through the layer), the trainer's loss of them and its gradient with respect to the
        logits, as units ``grad[L]``; returns (loss, correct)."""
        L = self.model.num_layers
        total, correct = 0.0, 0
        for part, logits in self._logits("bwd", {("act", L - 1), ("grad", L)}):
            with self.units.time(L - 1, "bwd", "compute_s"):
                grad = torch.zeros_like(logits)
                out = logits.requires_grad_(True)
                with torch.enable_grad():
                    taken = loss(out, part)
                    if taken is not None:
                        taken[0].backward()
                if taken is not None:
                    grad = out.grad
                    total += taken[0].item()
                    correct += taken[1]
            self.units.gwidth[L] = grad.shape[1]
            self.units.emit(("grad", L, part.index), grad, L - 1, "bwd", self._lazy_grads,
                            unit_eviction=True)
        return total, correct

    def _logits(self, phase: str, active: set):
        """Yield ``(sub-partition, logits)``: the last layer over every sub-partition's
        gathered inputs, without autograd (the loss pass and prediction)."""
        layer = self.model.num_layers - 1
        parts = self.plan.parts
        order = self.units.order()
        self.units.active = active
        accesses = [(("act", layer, src.part), True) for s in order for src in parts[s].sources]
        with self.units.schedule(accesses) as pf:
            for s in order:
                part = parts[s]
                x = self.units.gather(layer, part, pf, phase)
                with self.units.time(layer, phase, "compute_s"), torch.no_grad():
                    block, xt = self._to_device(part, torch.from_numpy(x))
                    logits = self.model.layer_forward(layer, block, xt)
                self.pool.release(x)
                del x, xt
                yield part, logits

    def _backward_layer_sources(self, layer: int) -> None:
        """Source-major backward of one layer (a :class:`SourceMajorModel`'s).

        The layer's output gradient ``grad[layer+1]`` (with respect to its pre-activation)
        is complete. For each unit ``q``: gather the gradient rows of the destinations
        ``q`` feeds (its :class:`~storage_tier.subparts.ReversePart`), read
        ``act[layer][q]`` once, and let the model add the weight gradients and return the
        gradient of ``q``'s stored rows. The halo unit goes first: its gradient goes to
        the exchange, which returns what the other workers computed for the owned rows
        (the same rows-as-stored gradient the destination-major pass exchanges). An owned
        unit's gradient is then complete: with that share added it passes through the
        dropout's and the activation's backward (from the stored rows in hand) and becomes
        unit ``grad[layer][q]`` in place of ``act[layer][q]``, which is dead.
        """
        plan, model = self.plan, self.model
        rparts = plan.reverse_parts()
        need_grad = layer > 0
        gk = layer + 1
        self.units.gwidth[layer] = self.dims[layer]
        owned = list(range(plan.num_parts))
        order = ([plan.halo_part] if plan.num_halo else []) + (
            owned if self.units.order()[0] == 0 else owned[::-1])
        self.units.active = {("act", layer), ("grad", layer), ("grad", gk)}
        if need_grad:
            self.units.reset_grads(layer)
        accesses = []
        for q in order:
            accesses.extend((("grad", gk, src.part), True) for src in rparts[q].sources)
            accesses.append((("act", layer, q), True))
            if q != plan.halo_part:
                accesses.append((("grad", gk, q), True))
        predropped = self.hoist and layer > 0  # act[layer] holds rows after the layer's dropout
        received = None
        with self.units.schedule(accesses) as pf:
            for q in order:
                rp, halo = rparts[q], q == plan.halo_part
                g_src = self.units.gather(gk, rp, pf, "bwd", kind="grad")
                key = ("act", layer, q)
                x = self.units.fetch(key, pf, layer, "bwd", admit=layer == 0)
                g_own = None if halo else self.units.fetch(("grad", gk, q), pf, layer, "bwd")
                with self.units.time(layer, "bwd", "compute_s"):
                    xt = torch.from_numpy(x)
                    xin = xt if predropped else model.drop_rows(layer, xt, rp.keys)
                    grad = model.layer_backward_sources(
                        layer, rp.block, torch.from_numpy(g_src),
                        xin, None if g_own is None else torch.from_numpy(g_own), need_grad)
                    if need_grad and not predropped:  # through the dropout applied on reading
                        grad = model.drop_rows(layer, grad, rp.keys)
                del g_src, g_own, xin
                if need_grad and halo:
                    received = self._exchange_grad(layer, grad)
                    grad = None
                elif need_grad:
                    if received is not None:
                        lo, hi = plan.unit_range(q)
                        grad += received[torch.from_numpy(plan.perm[lo:hi])]
                    with self.units.time(layer, "bwd", "compute_s"):
                        if predropped:  # the dropout applied where the rows were produced
                            grad = model.drop_rows(layer, grad, rp.keys)
                        grad = model.activation_backward(layer - 1, grad, xt)
                del xt
                # dead until the next forward: its unit makes room for the gradient
                self.units.release(key, x, dead=layer > 0)
                del x
                if grad is not None:
                    self.units.emit(("grad", layer, q), grad, layer, "bwd", self._lazy_grads,
                                    unit_eviction=True)
                del grad
        self.units.delete_grads(gk)
        if layer > 0:
            self.cache.discard_group(("act", layer))
        # (bypass: every gradient unit was written as it was emitted)

    def _exchange_grad(self, layer: int, grad_halo: torch.Tensor) -> torch.Tensor | None:
        """The halo rows' gradient to the exchange; the owned rows' share from the others
        (view numbering), or None."""
        plan = self.plan
        received = self.exchange.backward_rows(layer, grad_halo.contiguous())
        if received is None:
            return None
        if tuple(received.shape) != (plan.num_owned, self.dims[layer]):
            raise ValueError(f"exchange.backward_rows({layer}) returned shape {tuple(received.shape)}, "
                             f"expected {(plan.num_owned, self.dims[layer])}")
        return received.to(torch.float32)

    def _backward_layer(self, layer: int, loss: PartLoss) -> tuple:
        plan, parts = self.plan, self.plan.parts
        L = self.model.num_layers
        last, need_grad = layer == L - 1, layer > 0
        order = self.units.order()
        self.units.active = {("act", layer), ("grad", layer), ("grad", layer + 1)}
        if need_grad:
            self.units.reset_grads(layer)
        snap = self.mode == "snapshot"
        accesses = []
        for s in order:
            if snap:
                accesses.append((("snap", layer, s), True))
            else:
                accesses.extend((("act", layer, src.part), True) for src in parts[s].sources)
            if not last:
                accesses.append((("grad", layer + 1, s), True))
            if need_grad:
                accesses.extend((("grad", layer, src.part), False) for src in parts[s].sources)
        total, correct = 0.0, 0
        with self.units.schedule(accesses) as pf:
            for s in order:
                part = parts[s]
                if snap:
                    x = self.units.fetch_once(("snap", layer, s), pf, layer, "bwd")
                else:
                    x = self.units.gather(layer, part, pf, "bwd")
                g_out = None if last else self.units.fetch_once(("grad", layer + 1, s), pf, layer, "bwd")
                with self.units.time(layer, "bwd", "compute_s"):
                    block, xt = self._to_device(part, torch.from_numpy(x))
                    if need_grad:
                        xt.requires_grad_(True)
                    with torch.enable_grad():
                        out = self._layer_out(layer, block, xt)
                        if last:
                            taken = loss(out, part)
                            if taken is not None:
                                taken[0].backward()
                                total += taken[0].item()
                                correct += taken[1]
                        else:
                            g = g_out if isinstance(g_out, torch.Tensor) else torch.from_numpy(g_out)
                            out.backward(g.to(out.device))
                    grad = xt.grad.to("cpu").numpy() if need_grad and xt.grad is not None else None
                self.pool.release(x)
                if isinstance(g_out, np.ndarray):
                    self.pool.release(g_out)
                del out, xt, x, g_out
                if grad is not None:
                    self.units.scatter(layer, part, grad)
                elif need_grad:  # no gradient reached these rows: still consume the schedule
                    for src in part.sources:
                        pf.advance(("grad", layer, src.part))
                del grad
        # dead data: this layer's output gradients, snapshots and (until next forward) inputs
        if not last:
            self.units.delete_grads(layer + 1)
        if snap:
            self.units.delete_snapshots(layer)
        if layer > 0:
            self.cache.discard_group(("act", layer))
        if need_grad:
            if plan.num_halo:
                self._exchange_backward(layer)
            if not self._lazy_grads:  # write-back buffer -> storage after the layer
                self.units.flush_grads(layer)
        return total, correct

    @torch.no_grad()
    def predict(self) -> torch.Tensor:
        """Inference pass (dropout off): correct predictions on train/val/test owned rows."""
        L = self.model.num_layers
        self.forward(training=False)
        hits = torch.zeros(3, dtype=torch.float64)
        for part, logits in self._logits("eval", {("act", L - 1)}):
            pred = logits.argmax(1).cpu()
            del logits
            ok = pred == part.labels
            for i, m in enumerate((part.train_mask, part.val_mask, part.test_mask)):
                hits[i] += float(ok[m].sum())
        return hits

    # ------------------------------------------------------------------ exchange hook
    def read_owned_rows(self, layer: int, rows) -> np.ndarray:
        """Owned rows (view numbering: a slice or ids) of ``act[layer]`` through cache/storage."""
        plan = self.plan
        if isinstance(rows, slice):
            rows = np.arange(plan.num_owned)[rows]
        rows = np.asarray(rows, dtype=np.int64)
        part, local = plan.locate(plan.inv_perm[rows])
        out = np.empty((rows.shape[0], self.dims[layer]), dtype=np.float32)
        for p in np.unique(part):
            sel = np.flatnonzero(part == p)
            unit = self.units.fetch(("act", layer, int(p)), None, layer, "xchg")
            out[sel] = unit[local[sel]]
        return out

    def owned_units(self, layer: int):
        """Yield ``(view row ids, rows)`` of ``act[layer]`` one sub-partition unit at a time
        (each unit read once: how an exchange publishes a whole layer)."""
        plan = self.plan
        for p in range(plan.num_parts):
            lo, hi = plan.unit_range(p)
            yield plan.perm[lo:hi], self.units.fetch(("act", layer, p), None, layer, "xchg")

    def _exchange_forward(self, layer: int) -> None:
        plan = self.plan
        halo = self.exchange.forward_rows(layer, _OwnedReader(self, layer)).numpy()
        halo = np.ascontiguousarray(halo, dtype=np.float32)
        if halo.shape != (plan.num_halo, self.dims[layer]):
            raise ValueError(f"exchange.forward_rows({layer}) returned shape {halo.shape}, "
                             f"expected {(plan.num_halo, self.dims[layer])}")
        self.units.emit(("act", layer, plan.halo_part), torch.from_numpy(halo), layer, "xchg",
                        self._lazy_outputs)

    def _exchange_backward(self, layer: int) -> None:
        plan = self.plan
        key = ("grad", layer, plan.halo_part)
        unit, _ = self.units.grad_unit(key, layer)
        received = self._exchange_grad(layer, torch.from_numpy(unit.copy()))
        self.units.delete(key)
        if received is not None:
            self.units.add_owned_grads(layer, received.numpy())


class _OwnedReader:
    """One layer's owned rows for the exchange (a :class:`~storage_tier.protocols.OwnedRows`):
    ``reader(rows)`` for any rows, ``reader.units()`` for all of them unit by unit."""

    def __init__(self, engine: TierEngine, layer: int):
        self.engine, self.layer = engine, layer

    def __call__(self, rows) -> np.ndarray:
        return self.engine.read_owned_rows(self.layer, rows)

    def units(self):
        return self.engine.owned_units(self.layer)

    def sync(self) -> None:
        """Wait until every unit of the layer is on storage (others read the files)."""
        self.engine.io.wait()


__all__ = ["TierEngine"]
