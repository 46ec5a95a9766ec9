"""The halo exchange: carries out each step's plan, and decides nothing.

At ``begin_step`` the exchange asks its :class:`~dgl_sni.halo.plan.HaloPlanner` for the
step's :class:`~dgl_sni.halo.plan.StepPlan`; from then on every layer's halo rows come
from where the plan says (:meth:`KVHaloExchange.rows`, the one function that fetches
them), in the form the plan gives the model (:meth:`KVHaloExchange.form`), and their
gradients go where the plan sends them (:meth:`KVHaloExchange.received_grad`). Bytes move
through :class:`~dgl_sni.halo.wire.HaloWire`.

Communication overlaps compute where a layer takes its owned and halo rows apart
(:class:`~dgl_sni.halo.rows.Form` ``APART`` or ``SUM``): :meth:`~KVHaloExchange.start_halo`
publishes a layer's owned rows and sends its pull before the trainer aggregates them,
and the rows are received when the layer needs their sum (:meth:`~KVHaloExchange.halo_sum`);
backward pushes the halo gradients in that node and receives the others' in the node
``start_halo`` made, after the owned aggregation's backward ran.

Pipelined steps (source ``PREVIOUS``) publish and push as exact steps do, but use the halo
rows and gradients of the previous step: a layer's pull is sent and left on the wire, pushes
are not flushed, and both complete at the end of the step (:meth:`complete_step`), so the
rows travel while the trainer computes the layers above, the backward pass and the
optimiser step. Steps alternate between two sets of tensors
(:meth:`~dgl_sni.halo.tensors.LayerTensors.for_step`), so no write meets a read still in
flight; pipelined runs (and the adaptive policy, whose pulls by id are DistTensor reads)
also meet at a barrier after each write. Sampled steps (``--halo-sample``) move their share
of the rows through the registered sets, as exact steps do (no barrier).
"""
from __future__ import annotations

import numpy as np
import torch

from storage_tier.protocols import Owned

from ..dropout import KeyedMask
from .autograd import ExchangeFunction, HaloGate, HaloSumFunction
from .averages import mix, smooth_into
from .averages import trend as trend_average
from .plan import Grad, HaloPlanner, Source, StepPlan
from .resolver import Origin, Resolved
from .rows import Form
from .sums import BlockSplit
from .wire import HaloWire, WireSource


class KVHaloExchange:
    """One trainer's halo exchange (implements :class:`~dgl_sni.halo.rows.HaloRows` and
    :class:`storage_tier.protocols.HaloExchange`): the model takes its layers' halo rows
    through it, the storage tier's engine through ``forward_rows``/``backward_rows``.

    Made by the worker from a :class:`~dgl_sni.halo.wire.HaloWire` and the
    :class:`~dgl_sni.halo.plan.HaloPlanner` of the same job.
    """

    def __init__(self, wire: HaloWire, planner: HaloPlanner):
        if planner.pipeline_from is not None and not wire.tensors.pipeline:
            raise ValueError("a pipelined exchange needs LayerTensors made with pipeline=True")
        self.wire, self.planner = wire, planner
        wire.before_wait = planner.settle  # the transfer's deferred scoring runs while the trainer waits
        self.num_owned = wire.num_owned
        self.plan: StepPlan | None = None
        self._started = {}  # layer -> a sync step's pull sent before the layer needs its rows
        self._picked = None  # the halo rows a sampled step moves (--halo-sample), an id_sets.SetSample
        self._in_flight = {}  # layer -> the pull a pipelined step left on the wire
        self._grad_pending = False  # pushes of the last pipelined step not yet flushed
        self._last_rows = {}  # layer -> the halo rows of the last training step (pipelined runs)
        self._last_grad = {}  # layer -> the gradient received at the last exact step (pipelined runs)
        self._pipe_rows, self._pipe_grads = {}, {}  # layer -> pipelined rows / gradients averaged over steps
        self._sync_grad = {}  # layer -> the syncs' received gradients, smoothed (Grad.LAST)
        self._row_avg, self._grad_avg = {}, {}  # layer (and (layer, "trend")) -> averages over steps
        self._ran = {}  # (mode, layer) -> {form: training steps that took the layer's rows so}
        self._averaged_layers = {"rows": set(), "grads": set()}  # layers whose published averages ran
        self._trended_layers = set()  # layers whose stale steps took their kept sums continued (--stale-trend)
        self._bits, self._smoothing = set(), set()  # what the training steps' plans moved rows with

    def owned_local_offsets(self) -> np.ndarray:
        return self.wire.owned_local_offsets()

    # ------------------------------------------------------------------ steps
    def begin_step(self, step: int, training: bool) -> str:
        """Announce a forward pass at training step ``step``; returns its mode."""
        self.complete_step()
        self.plan = self.planner.plan(step, training)
        self._record(0, Form.SUM if self.plan.input_sum else Form.ROWS)  # the input layer: features in memory
        if training:
            self._bits.add(self.plan.bits)
            self._smoothing.add(self.plan.smoothing)
        self.wire.use(step, training, self.plan.bits)
        if any(lp.source is Source.SAMPLED for lp in self.plan.layers.values()):
            self._picked = self.wire.sample(self.planner.sample)  # the same rows for every layer of the step
        return self.plan.mode

    def complete_step(self) -> None:
        """Receive what the last step left on the wire (a pipelined step's rows and pushes:
        their time is the communication the pipeline did not hide; a started pull a failed
        pass never used) and do the planner's deferred work. Called by the worker at the end
        of each training step, and by :meth:`begin_step`."""
        self.planner.settle()
        for layer, pending in self._started.items():
            self.wire.receive(layer, pending)
        self._started.clear()
        for layer, pending in self._in_flight.items():
            self._last_rows[layer] = self.wire.complete(layer, pending)
        self._in_flight.clear()
        if self._grad_pending:
            self.wire.flush()  # the owners applied the last step's pushes
        self._grad_pending = False

    def step_flags(self) -> tuple:
        return self.planner.step_flags()

    def summed_flags(self, totals: tuple) -> None:
        self.planner.summed_flags(totals)

    def resume_at(self, step: int) -> None:
        self.planner.resume_at(step)

    def end_epoch(self) -> dict:
        return self.planner.end_epoch()

    def watch_weights(self, params) -> None:
        """The weights a schedule that follows weight drift watches (the planner's schedule)."""
        self.planner.watch_weights(params)

    def watch_loss(self, step: int, mode: str, loss: float) -> None:
        """Training step ``step`` ran in ``mode`` with global loss ``loss`` (the guarded schedule reads it)."""
        self.planner.watch_loss(step, mode, loss)

    def close(self, complete: bool = True) -> None:
        """End the job: receive what a last step left on the wire (``complete``; not after an
        error, when peers may be gone) and release the agent."""
        if complete:
            self.complete_step()
        self.planner.close()

    # ------------------------------------------------------------------ rows forward
    def form(self, layer: int) -> Form:
        """The form layer ``layer`` takes its halo rows in at this pass (the plan's)."""
        if layer == 0:
            return Form.SUM if self.plan.input_sum else Form.ROWS
        return self.plan.layers[layer].form

    def splits(self) -> bool:
        """Some layer of this pass takes its halo rows apart or summed (the plan's forms)."""
        return self.plan.input_sum or any(lp.form is not Form.ROWS for lp in self.plan.layers.values())

    def ran(self) -> dict:
        """What the training steps did, for the metrics' ``in_effect``: per mode (``sync``,
        ``stale``, ``pipelined``), per layer (0: the input layer, whose halo rows are features),
        the forms its halo rows were taken in and on how many steps; the layers whose
        published rows and pushed gradients were averages, and whose kept sums stale steps took
        continued along their trend (``trended_sums``, ``--stale-trend``); the bits rows moved with
        (``quantize``), how their widths were chosen (``bit_choice``; ``adaptive``: with the
        rows this trainer received at each width, ``pulled_bits``) and the smoothing of the
        served rows (``smooth``)."""
        forms = {}
        for (mode, layer), counts in sorted(self._ran.items()):
            forms.setdefault(mode, {})[str(layer)] = {f.value: n for f, n in counts.items()}
        quantize = max(self._bits, default=0)
        widths = dict(bit_choice="adaptive", pulled_bits={str(b): n for b, n in sorted(self.wire.widths.items())}) \
            if quantize and self.wire.adaptive else dict(bit_choice="fixed")
        return dict(halo_forms=forms, averaged_rows=sorted(self._averaged_layers["rows"]),
                    averaged_grads=sorted(self._averaged_layers["grads"]), trended_sums=sorted(self._trended_layers),
                    quantize=quantize, smooth=max(self._smoothing, default=0.0), **widths)

    def _record(self, layer: int, form: Form) -> None:
        if self.plan.training:
            counts = self._ran.setdefault((self.plan.mode, layer), {})
            counts[form] = counts.get(form, 0) + 1

    def _check_form(self, layer: int, asked: Form) -> None:
        """The model takes layer ``layer``'s rows in the form the plan gives (whole rows, or a sum)."""
        form = self.plan.layers[layer].form
        if (form is Form.ROWS) != (asked is Form.ROWS):
            raise RuntimeError(f"layer {layer} asked for its halo rows as {asked.value} where the step's plan "
                               f"gives {form.value}: a model takes them in the plan's form")

    def rows(self, layer: int, owned: Owned) -> Resolved:
        """Layer ``layer``'s halo rows from where the plan says, with their origins."""
        lp, wire = self.plan.layers[layer], self.wire
        self._record(layer, lp.form)
        # what is published: the step's rows, or their average (a layer taking rows apart or
        # summed averaged them in start_rows: every training step passes there once)
        publish = self._averaged(layer, owned) if lp.form is Form.ROWS else owned
        if lp.source is Source.SERVED:
            return self.planner.served(layer, owned, WireSource(wire, layer, publish))
        if lp.source is Source.PREVIOUS:
            wire.publish(layer, publish)
            if wire.num_halo:
                self._in_flight[layer] = wire.send_pull(layer)
                wire.counters.add("pulled_rows", wire.num_halo)
            rows = _pipelined(self._pipe_rows, layer, np.asarray(self._last_rows[layer]), self.plan.smoothing)
            return Resolved(rows, np.full(rows.shape[0], int(Origin.PIPELINED), dtype=np.uint8))
        if lp.source is Source.KEPT_SUM:
            raise RuntimeError(f"layer {layer}'s halo rows were not fetched: the plan gave it their kept sum")
        if lp.source is Source.SAMPLED:  # observed as a sync's rows: stale steps take them as pulled
            wire.publish(layer, publish)
            return self.planner.fresh(layer, wire.pull_sampled(layer, self._picked), owned)
        pending = self._started.pop(layer, None)
        if pending is None:
            wire.publish(layer, publish)
            fresh = wire.pull(layer)
        else:
            fresh = wire.receive(layer, pending)
        if lp.source is Source.TRUE:  # measured against: neither observed nor kept
            return Resolved(fresh, np.full(fresh.shape[0], int(Origin.PULLED), dtype=np.uint8))
        resolved = self.planner.fresh(layer, fresh, owned)
        if lp.keep_previous:
            self._last_rows[layer] = resolved.rows  # the first pipelined step uses them
        return resolved

    def forward_rows(self, layer: int, owned: Owned) -> torch.Tensor:
        """Publish the owned rows of layer ``layer``'s input where they are needed and return
        the halo rows (block order after the owned ones)."""
        return torch.from_numpy(np.ascontiguousarray(self.rows(layer, owned).rows))

    def __call__(self, layer: int, owned: torch.Tensor) -> torch.Tensor:
        self._check_form(layer, Form.ROWS)
        return ExchangeFunction.apply(owned, self, layer)

    def start_halo(self, layer: int, owned: torch.Tensor) -> torch.Tensor:
        """Start moving layer ``layer``'s halo rows where the step pulls them (publish
        ``owned``, send the pull); returns ``owned`` for :meth:`halo_sum`, through a node whose
        backward receives the gradient the others sent for the owned rows."""
        return HaloGate.apply(owned, self, layer)

    def start_rows(self, layer: int, owned: torch.Tensor) -> None:
        lp = self.plan.layers[layer]
        owned = self._averaged(layer, owned)
        if lp.source in (Source.PULLED, Source.TRUE) and self.wire.num_halo:
            self.wire.publish(layer, owned)
            self._started[layer] = self.wire.send_pull(layer)

    def _averaged(self, layer: int, owned: Owned) -> Owned:
        """The owned rows a training step publishes: ``owned``, or with ``average_rows`` their
        average over the steps, updated with them (called once per step and layer)."""
        lp = self.plan.layers[layer]
        if not lp.average_rows:
            return owned
        average = _average(self._row_avg, layer, owned.detach(), lp.average_rows, lp.trend_rows)
        if not lp.send_averages:  # a warm-up step: exact, its average only kept
            return owned
        self._averaged_layers["rows"].add(layer)
        return average

    def halo_sum(self, layer: int, owned: torch.Tensor, split: BlockSplit, scale: torch.Tensor | None,
                 mask: KeyedMask | None = None) -> torch.Tensor:
        """The sum of layer ``layer``'s halo rows (:class:`~dgl_sni.halo.rows.HaloRows`)."""
        self._check_form(layer, Form.SUM)
        return HaloSumFunction.apply(owned, self, layer, split, scale, mask)

    def summed(self, layer: int, owned: torch.Tensor, split: BlockSplit, scale,
               mask: KeyedMask | None) -> torch.Tensor:
        """:meth:`halo_sum`'s forward: form ``SUM``, the undropped sum of the rows (kept at the
        last sync, or of the rows fetched); form ``APART``, the sum of the rows dropped by
        ``mask``, with their undropped sum from the same pass where the plan keeps it."""
        lp = self.plan.layers[layer]
        sums = self.planner.sums
        if lp.form is Form.SUM:
            if mask is not None:
                raise ValueError("a step that sums halo rows takes them undropped")
            if lp.source is Source.KEPT_SUM:
                self._record(layer, lp.form)
                if lp.trended and self.plan.training:
                    self._trended_layers.add(layer)
                if not sums.scaled_by(layer, scale):
                    raise RuntimeError(f"layer {layer}'s kept halo sum was scaled otherwise")
                return lp.kept
            resolved = self.rows(layer, owned)
            total = sums.get(layer, resolved.version, scale)  # these very rows were summed before
            if total is None:
                total = split.sum_rows(_tensor(resolved), scale)
                if lp.keep_sum:
                    self.planner.keep_sum(layer, resolved, scale, total)
            return total
        resolved = self.rows(layer, owned)
        rows = _tensor(resolved)
        if mask is None:
            total = kept = split.sum_rows(rows, scale)
        else:
            total, kept = split.dropped_sums(rows, scale, mask, plain=lp.keep_sum)
        if lp.keep_sum:
            self.planner.keep_sum(layer, resolved, scale, kept)
        return total

    # ------------------------------------------------------------------ gradients backward
    def pushes_grad(self, layer: int) -> bool:
        """This step computes layer ``layer``'s halo gradients: it sends them (to train with, or
        to measure), or adds them to their average over steps."""
        lp = self.plan.layers[layer]
        return lp.grad in (Grad.PUSH, Grad.DEFERRED) or lp.measure_grad or bool(lp.average_grads)

    def backward_rows(self, layer: int, grad_halo: torch.Tensor | None) -> torch.Tensor:
        """Send halo gradients to their owners where the step sends them; return the
        gradient for the owned rows (``grad_halo`` may be ``None`` where none is sent)."""
        if self.plan.layers[layer].grad is Grad.DEFERRED:
            self.wire.push(layer, grad_halo)
            self.wire.end_round(layer, wait=False)  # the barriers order these reads
            self._grad_pending = True
            if layer in self._last_grad:  # the previous step was exact: its received gradient
                received = self._last_grad.pop(layer)
            else:
                received = self.wire.received(layer, step=self.plan.step - 1)
            return _pipelined(self._pipe_grads, layer, received, self.plan.smoothing)
        self.send_grad(layer, grad_halo)
        return self.received_grad(layer)

    def send_grad(self, layer: int, grad_halo: torch.Tensor | None) -> None:
        """Push the halo gradients where this step sends them (not flushed): this step's, or
        where they are averaged over steps, that average."""
        lp = self.plan.layers[layer]
        if lp.average_grads:
            average = _average(self._grad_avg, layer, grad_halo, lp.average_grads, lp.trend_grads)
            if lp.send_averages:  # else a warm-up step: exact, its average only kept
                self._averaged_layers["grads"].add(layer)
                grad_halo = average
        if lp.source is Source.SAMPLED:
            self.wire.push_sampled(layer, grad_halo, self._picked)
        elif lp.grad in (Grad.PUSH, Grad.DEFERRED):
            self.wire.push(layer, grad_halo)
        elif lp.measure_grad:  # the step trains without them: sent to be measured only
            self.wire.push(layer, grad_halo, measure=True)

    def received_grad(self, layer: int) -> torch.Tensor:
        """The gradient for the owned rows: what the others pushed (after :meth:`send_grad`),
        or where the step sends none, the syncs' (``LAST``: the kept tensor itself, only read
        by the callers) or zeros."""
        lp = self.plan.layers[layer]
        if lp.grad in (Grad.LAST, Grad.NONE):
            used = self._sync_grad[layer] if lp.grad is Grad.LAST and layer in self._sync_grad \
                else self.wire.zeros(layer)
            if lp.measure_grad:  # what the others would have sent, against what the owned rows get
                self.wire.end_round(layer)
                self.planner.measure_grad(layer, used, self.wire.received(layer))
            return used
        self.wire.end_round(layer)  # every gradient the others sent for the owned rows is applied
        received = self.wire.received(layer)
        if lp.keep_previous:
            self._last_grad[layer] = received  # the first pipelined step uses it
        if lp.keep_grad:  # the stale steps until the next sync reuse it, smoothed over syncs
            g, prev = self.plan.grad_smoothing, self._sync_grad.get(layer)
            self._sync_grad[layer] = received if not g or prev is None else mix(prev, g, received)
        return received


def _pipelined(kept: dict, layer: int, new, g: float):
    """A pipelined step's one-step-old rows (numpy) or gradient (torch) as it uses them: ``new``,
    or with smoothing ``g`` their average over the pipelined steps, ``g * kept + (1 - g) * new``
    (PipeGCN's smoothing; the first pipelined step takes ``new``), kept for the next step."""
    if not g:
        return new
    prev = kept.get(layer)
    if isinstance(new, np.ndarray):
        new = np.ascontiguousarray(new, dtype=np.float32)
        out = new.copy() if prev is None else smooth_into(prev, new, g, np.empty_like(new))
    else:
        out = new.detach().clone() if prev is None else mix(prev, g, new)
    kept[layer] = out
    return out


def _tensor(resolved: Resolved) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(resolved.rows))


def _average(kept: dict, layer: int, new: torch.Tensor, a: float, trend: bool = False) -> torch.Tensor:
    """``kept[layer] = a * kept[layer] + (1 - a) * new`` (``new`` itself the first time); returns
    it, or with ``trend`` ``2 E - EMA(E)`` of it, the average of the averages kept beside it
    under ``(layer, "trend")``."""
    prev = kept.get(layer)
    if prev is None:
        kept[layer] = prev = new.detach().contiguous().clone()
        if trend:  # twice the average less its average: the first rows themselves
            kept[(layer, "trend")] = prev.clone()
            return prev.clone()
        return prev
    if not trend:
        kept[layer] = mix(prev, a, new)
        return kept[layer]
    return trend_average(prev, kept[(layer, "trend")], a, new)  # neither average handed out
