"""The step plan: where every halo row of a step comes from, decided once at the step's start.

At the start of every forward pass the trainer's exchange asks its :class:`HaloPlanner`
for a :class:`StepPlan`, and from then on only carries it out (publish, pull, push,
encode, decode: :mod:`dgl_sni.halo.exchange`). The plan says, for the step:

* its ``mode``: ``sync`` (halo rows from their owners), ``stale`` (served), ``pipelined``
  (the previous step's rows; this step's travel meanwhile); ``training`` tells an
  evaluation pass apart (exact: it pulls fresh rows unless ``--stale-eval``);
* ``bits`` on the wire (0: float32; evaluation always moves float32 rows) and the
  ``smoothing`` the stale path averages syncs with (on a pipelined step: what its one-step-old
  rows and gradients are averaged over steps with, PipeGCN's smoothing);
* whether the input layer takes the sum of its halo rows (``input_sum``);

and for every exchanged layer ``l >= 1`` a :class:`LayerPlan`: the :class:`Source` of its
halo rows, the :class:`~dgl_sni.halo.rows.Form` the model takes them in (chosen from what the
layer declares it can take, :class:`~dgl_sni.halo.rows.Takes`), whether a sync's
undropped sum is kept for the stale steps after it, and the :class:`Grad` policy of its
halo gradients. :meth:`HaloPlanner.plan` is the one function that answers "where does
this row come from on this step".

Where a served row's *value* comes from (the agent's cache, its prediction, the drift
transfer, an adaptive re-pull) is the business of the layer's
:class:`~dgl_sni.halo.resolver.HaloResolver`, which the planner owns and the exchange
reaches only through :meth:`HaloPlanner.fresh` (a sync's rows, observed) and
:meth:`HaloPlanner.served` (a stale step's rows). Rows are counted once, from their
origins: by the resolver as it answers, or here, where the plan itself fixes them (a
kept sum's rows are the cache's; a pipelined step's are the previous step's).

The planner owns the run's one schedule (fixed, drift or guarded; the pipelined policy's
steps are planned here too), the per-layer resolvers and the sums kept for the stale
steps (:class:`~dgl_sni.halo.sums.KeptSums`). Made by the worker; used by
:class:`~dgl_sni.halo.exchange.KVHaloExchange`.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..metrics import Counters
from ..sni.schedule import DriftSchedule, GuardedSchedule, SyncSchedule, WeightDrift
from .resolver import HaloResolver, Origin, Resolved
from .rows import SPLITS, Form, Takes
from .sums import KeptSums, halo_in_rows

if TYPE_CHECKING:
    from ..config import SNIConfig


# Sync steps of ``--sync-halo auto`` take the input layer's halo rows as rows (interval 1's
# step) where they are at most this many times the owned rows with a halo in-edge, and sum
# them (``inputs``) where they are more. Summing pays for its own projection of one row per
# such owned row, apart from the owned rows' projection, and that costs more per row than the
# halo rows folded into it: on CiteSeer's 4 METIS parts (3703-wide inputs) the sync steps
# projected 191 summed rows in 0.59 ms of a trainer's CPU (forward and weight gradient)
# against 0.35 ms for its 200 halo rows within the owned projection. The synthetic graphs'
# partitions have 2.4-2.5 halo rows per owned row, Cora's and CiteSeer's 1-29 per 100.
ROWS_PER_REACHED_ROW = 2.0


def choose_sync_halo(halo_rows: int, reached_rows: int) -> str:
    """``rows`` or ``inputs`` for ``--sync-halo auto``, from the halo rows of the input layer
    and the owned rows they reach (with a halo in-edge; each count summed over the trainers,
    so every trainer chooses the same); see :data:`ROWS_PER_REACHED_ROW`."""
    return "rows" if halo_rows <= ROWS_PER_REACHED_ROW * reached_rows else "inputs"


def sync_halo_form(setting: str, block, collective) -> str:
    """How the sync training steps of a run whose stale steps sum take their halo rows:
    ``setting``, with ``auto`` resolved the same on every trainer from the halo rows of all
    partitions' input layers and the owned rows they reach (one all-reduce of two counts;
    :func:`choose_sync_halo`). ``block``: this trainer's block."""
    if setting != "auto":
        return setting
    counts = torch.tensor([float(block.num_src - block.num_dst), float(halo_in_rows(block))], dtype=torch.float64)
    counts = collective.all_reduce(counts)
    return choose_sync_halo(int(counts[0]), int(counts[1]))


class Source(str, enum.Enum):
    """Where a layer's halo rows come from at a step."""

    PULLED = "pulled"  # from their owners, this step (a pull by the registered set)
    TIER = "tier"  # from their owners, who read them from their storage tier files
    SERVED = "served"  # the layer's resolver: the agent's cache or prediction, the drift transfer
    KEPT_SUM = "kept-sum"  # no rows: the sum kept at the last sync (the cache has not changed since)
    PREVIOUS = "previous"  # the previous training step's rows; this step's pull stays on the wire
    TRUE = "true"  # a stale step measured against the truth (--stale-truth): pulled now, not observed
    SAMPLED = "sampled"  # a random share pulled, the others left out (--halo-sample, BNS-GCN)


class Grad(str, enum.Enum):
    """What happens to a layer's halo gradients at a step."""

    PUSH = "push"  # pushed to their owners; the owned rows get what the others pushed
    DEFERRED = "deferred"  # pushed, used by their owners one step later (pipelined)
    LAST = "last"  # none sent; the owned rows get the syncs' gradients, smoothed over syncs
    NONE = "none"  # none sent; the owned rows get none


@dataclass(frozen=True)
class LayerPlan:
    """One exchanged layer's part of a :class:`StepPlan`.

    ``keep_sum``: the undropped sum of these rows is kept (:meth:`HaloPlanner.keep_sum`):
    a training step that sums served rows anew, or a sync step whose rows the cache will serve
    until the next sync; the stale steps reuse it (their ``source`` is then ``KEPT_SUM``, with
    the sum in ``kept``). ``measure_grad``: a step that sends no halo gradient pushes the true
    ones all the same and compares what the owned rows get with them (``--measure-staleness``).
    ``average_rows`` / ``average_grads`` (``A``, 0: off): a training step adds the owned rows it
    computes (the halo gradients it computes) to their average over steps, ``A * old + (1 - A)
    * new``, and what it publishes (pushes) is that average (``--row-average``, ``--grad-average``);
    ``trend_rows`` / ``trend_grads``: what is published is ``2 E - EMA(E)`` of that average
    ``E`` (``--average-trend``), which follows a steady change without ``E``'s lag;
    with ``send_averages`` False (a warm-up step) the average is updated but the step's own rows
    and gradients are sent, so warm-up epochs are exact. ``trended``: ``kept`` is the kept sum
    continued along its change between the last two syncs (``--stale-trend``). ``keep_grad``: the gradient the others
    push for the owned rows is kept, smoothed over syncs, for the stale steps whose ``grad`` is
    ``LAST``. ``keep_previous``: a pipelined
    run's exact training step: its rows and received gradient are what the next,
    pipelined, step uses.
    """

    source: Source
    form: Form
    grad: Grad
    keep_sum: bool = False
    keep_grad: bool = False
    keep_previous: bool = False
    measure_grad: bool = False
    average_rows: float = 0.0
    average_grads: float = 0.0
    trend_rows: bool = False
    trend_grads: bool = False
    send_averages: bool = True
    kept: torch.Tensor | None = None
    trended: bool = False


@dataclass(frozen=True)
class StepPlan:
    """What one forward pass does with halo rows (see the module docstring)."""

    step: int
    training: bool
    mode: str  # "sync", "stale" or "pipelined"
    bits: int
    smoothing: float
    input_sum: bool
    layers: dict  # layer -> LayerPlan
    grad_smoothing: float = 0.0  # what the owners average the syncs' received gradients with

    def describe(self) -> str:
        """One line per layer, for logs and tests."""
        head = f"step {self.step} {'train' if self.training else 'eval'} {self.mode} {self.bits}-bit" \
               f"{' input-sum' if self.input_sum else ''}"
        return "\n".join([head] + [f"  layer {l}: {p.source.value} as {p.form.value}, grad {p.grad.value}"
                                   + (" keep-sum" if p.keep_sum else "") + (" keep-grad" if p.keep_grad else "")
                                   for l, p in sorted(self.layers.items())])


def make_schedule(cfg: "SNIConfig"):
    """The run's one sync schedule for ``cfg``'s policy (``None``: every step syncs)."""
    if cfg is None:
        return None
    if cfg.sync_policy == "drift":  # the worker hands it a meter (watch_weights)
        return DriftSchedule(cfg.warmup, cfg.sync_interval, cfg.sync_drift, enabled=cfg.enabled)
    if cfg.sync_policy == "guarded":  # the worker hands it each step's loss (watch_loss)
        return GuardedSchedule(cfg.warmup, cfg.sync_interval, cfg.sync_loss_gap, enabled=cfg.enabled)
    return SyncSchedule(cfg.warmup, cfg.sync_interval, cfg.enabled)


class HaloPlanner:
    """Plans every step of one trainer's halo exchange (see the module docstring).

    ``cfg``: the active :class:`~dgl_sni.config.SNIConfig` of a run whose steps can be
    stale (``None``: every step syncs, no agent); ``agent``: its agent client;
    ``halo_ids``: the halo rows' global ids (block order); ``dims``: the widths of the rows
    exchanged before layers ``1..L-1``; ``edge_counts``: per halo row, its edges into the
    partition (they rank rows for prediction). ``bits``: the wire's bits on training steps;
    ``tier_backed``: the owners serve the rows from their tier files (the layers then take
    whole rows); ``pipeline_from``: the first pipelined step (``--sync-policy pipeline``);
    ``pipeline_smoothing``: ``g`` with which pipelined steps average the one-step-old rows and
    gradients over steps (``--smooth`` of a pipelined run; 0: as they are);
    ``sum_stale``: stale training steps take summed halo rows where a layer can take them so;
    ``sync_sums``: how the other training steps take theirs (``rows``, ``inputs`` or
    ``summed``); ``sample``: the share of halo rows a training sync step pulls (boundary node
    sampling, ``--halo-sample``; 0: all; stale steps take what the last sync pulled). ``takes``:
    what each layer can take its halo rows as, as the model declares it
    (:meth:`~dgl_sni.models.TrainableModel.halo_takes`: index 0 the input layer, then one per
    entry of ``dims``; default: every layer splits, as the built-in GCN's do); every form the
    plan gives a layer is one it declares.
    """

    def __init__(self, cfg: "SNIConfig | None", counters: Counters, halo_ids: np.ndarray, dims: list, *,
                 agent=None, edge_counts: np.ndarray | None = None, bits: int = 0, tier_backed: bool = False,
                 pipeline_from: int | None = None, sum_stale: bool = False, sync_sums: str = "rows",
                 sample: float = 0.0, takes: list | None = None, pipeline_smoothing: float = 0.0):
        takes = [SPLITS] * (len(dims) + 1) if takes is None else list(takes)
        if len(takes) != len(dims) + 1 or not all(isinstance(t, Takes) for t in takes):
            raise ValueError(f"the model declares what {len(takes)} layers take; {len(dims)} exchanged layers "
                             "and the input layer need one Takes each")
        self.takes = takes
        if pipeline_smoothing and pipeline_from is None:
            raise ValueError("pipeline smoothing averages pipelined steps' rows: it needs --sync-policy pipeline")
        if pipeline_from is not None and cfg is not None:
            raise ValueError("pipelined steps replace stale steps: use --sync-policy pipeline without a "
                             "sync interval above 1")
        if sum_stale and cfg is None:
            raise ValueError("summed halo rows are for stale steps: they need an active SNI configuration")
        if sync_sums != "rows" and not sum_stale:
            raise ValueError("summed halo rows on sync steps come with summed halo rows on stale steps")
        if bits and tier_backed:
            raise ValueError("quantized halo rows cannot be tier-backed")
        self.cfg, self.counters, self.agent = cfg, counters, agent
        self.num_halo = int(len(halo_ids))
        self.bits, self.tier_backed, self.pipeline_from = bits, tier_backed, pipeline_from
        self.sum_stale, self.sync_sums = sum_stale, sync_sums
        if sample and (pipeline_from is not None or tier_backed):
            raise ValueError("boundary node sampling samples the rows sync steps pull from their owners' memory")
        self.sample = sample  # the share of halo rows a training sync step pulls (0: every row)
        self.smoothing = cfg.smooth if cfg is not None else 0.0
        self.pipeline_smoothing = pipeline_smoothing  # what pipelined steps average old rows and gradients with
        self.schedule = make_schedule(cfg)
        transfer = cfg is not None and cfg.predictor == "gated" and cfg.transfer and cfg.sync_policy != "adaptive"
        ids = np.asarray(halo_ids, dtype=np.int64)
        self.resolvers = {
            layer: HaloResolver(cfg, counters, table_id=layer, ids=ids, dim=dim,
                                agent=None if agent is None else (lambda: agent),
                                edge_counts=lambda _ids: edge_counts, transfer=transfer)
            for layer, dim in enumerate(dims, start=1)}
        self.sums = KeptSums()
        self._agents_lost = False  # some trainer's agent was gone at the end of the last training step
        self._last_training_step = None
        self._last_sync = None  # the last training sync step (the served rows' origin on the stale steps after it)
        self._predictor_s, self._agent_calls = 0.0, -1  # the agent's counters at the last stats (-1: never)
        self.plan_now: StepPlan | None = None

    # ------------------------------------------------------------------ the plan
    def plan(self, step: int, training: bool) -> StepPlan:
        """The plan of the forward pass of ``step`` (evaluation: ``training`` False). Also
        lets the agent start on what the step will ask of it: a stale step's rows (unless
        their sum is kept), a training sync step's preview (the drift transfer scores it),
        so it computes while the trainer does."""
        self.settle()
        mode = self._mode(step, training)
        stale = mode == "stale"
        if training and mode == "sync":
            self._last_sync = step
        sums = self.sum_stale and training
        layers = {}
        for layer, resolver in self.resolvers.items():
            summable = stale and sums and self.takes[layer].sum and not self.cfg.truth(layer)[0]
            kept, trended = self._kept_sum(layer, step) if summable else (None, False)
            if stale and kept is None and not self.cfg.truth(layer)[0] and self.cfg.prefetch:
                resolver.prefetch(step)  # the rows are needed: let the agent start on them
            elif not stale and training and self.cfg is not None and self.cfg.prefetch:
                resolver.prefetch_preview(step, own_rows=True)
            warm = self.cfg is None or step >= self.cfg.warmup  # a warm-up step sends its own rows
            layers[layer] = self._layer(layer, mode, training, kept, warm=warm, trended=trended)
        plan = StepPlan(step=step, training=training, mode=mode, bits=self.bits if training else 0,
                        smoothing=self.pipeline_smoothing if mode == "pipelined" else self.smoothing,
                        input_sum=sums and self.takes[0].sum and (stale or self.sync_sums != "rows"),
                        layers=layers, grad_smoothing=0.0 if self.cfg is not None and self.cfg.grad_average
                        else self.smoothing)
        self._count(plan)
        self.plan_now = plan
        return plan

    def _mode(self, step: int, training: bool) -> str:
        if self.pipeline_from is not None:
            ready = training and step >= self.pipeline_from and self._last_training_step == step - 1
            if training:
                self._last_training_step = step
            return "pipelined" if ready else "sync"
        mode = self.schedule.mode(step) if self.schedule is not None else "sync"
        if mode == "stale" and not training and not self.cfg.stale_eval:
            mode = "sync"  # exact evaluation: fresh rows (its traffic is eval_bytes)
        if mode == "stale" and self._agents_lost:
            mode = "sync"  # an agent was gone at the last step's end: every trainer syncs until it is back
        return mode

    def _layer(self, layer: int, mode: str, training: bool, kept: torch.Tensor | None, warm: bool = True,
               trended: bool = False) -> LayerPlan:
        cfg, stale = self.cfg, mode == "stale"
        true_rows, true_grads = cfg.truth(layer) if stale else (False, False)
        if mode == "pipelined":
            source = Source.PREVIOUS
        elif self.sample and training and not stale:
            source = Source.SAMPLED
        elif true_rows:
            source = Source.TRUE
        elif stale:
            source = Source.KEPT_SUM if kept is not None else Source.SERVED
        else:
            source = Source.TIER if self.tier_backed else Source.PULLED
        takes = self.takes[layer]
        summed = takes.sum and self.sum_stale and training and source is not Source.SAMPLED and \
            (stale or (mode == "sync" and self.sync_sums == "summed"))
        if summed:
            form = Form.SUM
        elif not takes.apart or mode == "pipelined" or self.tier_backed or source is Source.SAMPLED:
            # a layer that takes whole rows (attention, a DGL layer); a pipelined step's pushes
            # complete at its end; the tier reads rows unit by unit; sampled rows are pulled
            # when the layer asks
            form = Form.ROWS
        else:
            form = Form.APART
        if mode == "pipelined":
            grad = Grad.DEFERRED
        elif stale and cfg.stale_grad != "exchange" and not true_grads:
            grad = Grad.LAST if cfg.stale_grad == "last" else Grad.NONE
        else:
            grad = Grad.PUSH
        if form is Form.SUM:  # a sum of rows fetched now is kept (a kept sum or the truth is not)
            keep_sum = training and source not in (Source.KEPT_SUM, Source.TRUE)
        else:  # a sync step taking its rows apart sums them undropped in the same pass
            keep_sum = form is Form.APART and self.sum_stale and training and mode == "sync" \
                and self.resolvers[layer].versions_stale_rows()
        averaging = training and cfg is not None and not self.tier_backed  # rows in memory, every step
        return LayerPlan(
            source=source, form=form, grad=grad, kept=kept, trended=trended, keep_sum=keep_sum,
            average_rows=cfg.row_average if averaging else 0.0,
            average_grads=cfg.grad_average if averaging else 0.0, send_averages=warm,
            trend_rows=averaging and cfg.average_trend in ("rows", "both"),
            trend_grads=averaging and cfg.average_trend in ("grads", "both"),
            keep_grad=grad is Grad.PUSH and not stale and cfg is not None and cfg.stale_grad == "last",
            keep_previous=self.pipeline_from is not None and training and mode == "sync",
            measure_grad=stale and training and cfg.measure_staleness and grad in (Grad.LAST, Grad.NONE))

    def _kept_sum(self, layer: int, step: int) -> tuple:
        """Stale training step ``step``'s kept sum of layer ``layer``'s served rows: the sum kept
        at the last sync, where the cache's rows are known without asking the agent and are
        still those rows (``None``: the rows are needed); with ``--stale-trend``, continued
        along its change between the last two syncs (:meth:`KeptSums.continued`). Returns
        ``(sum, continued)``."""
        version = self.resolvers[layer].cache_version()
        kept = self.sums.current(layer, version)
        if kept is None or not self.cfg.stale_trend:
            return kept, False
        continued = self.sums.continued(layer, version, step, self.cfg.stale_trend)
        return continued, continued is not kept

    def _count(self, plan: StepPlan) -> None:
        """Count the rows the plan itself fixes: a kept sum's are the cache's (as the agent
        would have served them), a pipelined step's the previous step's."""
        for layer, lp in plan.layers.items():
            if lp.source is Source.KEPT_SUM and plan.training:
                self.resolvers[layer].count_cached()
            elif lp.source is Source.PREVIOUS:
                self.counters.add("pipelined_rows", self.num_halo)

    # ------------------------------------------------------------------ rows
    def fresh(self, layer: int, rows: np.ndarray, owned) -> Resolved:
        """A sync step's rows of layer ``layer``, fresh from their owners: observed by the
        layer's resolver (the agent's history, the smoothing, the drift transfer's base)."""
        plan = self.plan_now
        return self.resolvers[layer].fresh(plan.step, plan.training, rows, self._own(layer, owned),
                                           origin=Origin.TIER if self.tier_backed else Origin.PULLED)

    def served(self, layer: int, owned, wire) -> Resolved:
        """A stale step's rows of layer ``layer`` as its resolver serves them; ``wire``
        publishes, peeks and pulls where the resolver needs the owners (staleness measured,
        adaptive re-pulls: see :class:`~dgl_sni.halo.resolver.HaloSource`)."""
        plan = self.plan_now
        next_syncs = plan.training and self.cfg.prefetch and self.schedule.surely_syncs(plan.step + 1)
        return self.resolvers[layer].served(plan.step, plan.training, wire, self._own(layer, owned),
                                            next_syncs=next_syncs)

    def keep_sum(self, layer: int, resolved: Resolved, scale, total: torch.Tensor) -> None:
        """``total`` is the undropped sum of ``resolved``'s rows (a step whose plan keeps
        it): keep it, or the kept sum it updates, for the stale steps."""
        self.counters.add("summed_rows", int(resolved.rows.shape[0]))
        plan, cfg = self.plan_now, self.cfg
        # the rows of a trend (--stale-trend) are a training sync's after the warm-up: summed at
        # the sync (a layer that splits its rows), or, by a layer that takes them whole at syncs,
        # at the first stale step after it, from the cache's rows of that sync (a version)
        origin = plan.step if plan.mode == "sync" else \
            self._last_sync if plan.mode == "stale" and resolved.version is not None else None
        trended = cfg is not None and cfg.stale_trend > 0 and plan.training and origin is not None \
            and origin >= cfg.warmup
        self.sums.keep(layer, resolved, scale, total, step=origin if trended else None)

    def measure_grad(self, layer: int, used: torch.Tensor, true: torch.Tensor) -> None:
        """Staleness of a step's halo gradients (``--measure-staleness``): per owned row, the
        L2 error of the gradient ``used`` against the ``true`` one the others pushed, and the
        true one's norm, summed per layer (the metrics turn them into means)."""
        c, tag = self.counters, f"l{layer}_"
        c.add(tag + "grad_err_sum", float(torch.linalg.vector_norm(used - true, dim=1).sum()))
        c.add(tag + "grad_true_sum", float(torch.linalg.vector_norm(true, dim=1).sum()))
        c.add(tag + "grad_n", int(true.shape[0]))

    def _own(self, layer: int, owned):
        """The worker's own rows where the drift transfer reads them (training, in memory)."""
        if self.resolvers[layer].transfer is None or not self.plan_now.training \
                or not isinstance(owned, torch.Tensor):
            return None
        return owned.detach().numpy()

    def settle(self) -> None:
        """Do the work a sync step left to the resolvers (the drift transfer's scoring, see
        :meth:`HaloResolver.settle`). The exchange calls it where the trainer is about to
        wait on the network, so it takes the time of that wait, and at each step's start."""
        for resolver in self.resolvers.values():
            resolver.settle()

    # ------------------------------------------------------------------ the run
    def step_flags(self) -> tuple:
        """What this trainer adds to the all-reduce that ends a training step: 1.0 where its
        agent is gone (nothing without an agent). The sum tells every trainer the same thing,
        so they plan the next steps alike without a collective of their own."""
        if self.agent is None:
            return ()
        return (0.0 if self.agent.alive else 1.0,)

    def summed_flags(self, totals: tuple) -> None:
        """The sums of :meth:`step_flags` over the trainers: a stale step after them syncs
        instead where any agent was gone (one lost during that step is found when it is
        asked for rows: its trainer serves the rows of the last sync, and the step after syncs)."""
        if totals:
            self._agents_lost = totals[0] > 0

    def resume_at(self, step: int) -> None:
        """A run resumed at ``step``: that step syncs, seeding the agent's new tables (a
        pipelined run's first step after a resume is exact by itself: no previous rows)."""
        if self.schedule is not None:
            self.schedule.resume_at(step)

    def watch_weights(self, params) -> None:
        """The weights whose change since the last sync drives the ``drift`` policy (the
        layers whose outputs are exchanged); other policies ignore them."""
        if isinstance(self.schedule, DriftSchedule):
            self.schedule.meter = WeightDrift(params)

    def watch_loss(self, step: int, mode: str, loss: float) -> None:
        """Training step ``step`` ran in ``mode`` with global loss ``loss`` (the ``guarded``
        policy reads it; other policies ignore it)."""
        if isinstance(self.schedule, GuardedSchedule):
            self.schedule.observe(step, mode, loss)

    def end_epoch(self) -> dict:
        """Agent time spent in predictors since the last call (asked only when the tables
        sent the agent something since), and what the schedule decided on."""
        if self.agent is None:
            return {}
        calls = sum(r.table.agent_calls for r in self.resolvers.values() if r.table is not None)
        delta = 0.0
        if calls != self._agent_calls:
            total = self.agent.stats()["predictor_s"]
            delta, self._predictor_s, self._agent_calls = total - self._predictor_s, total, calls
        out = dict(predictor_s=delta)
        if isinstance(self.schedule, DriftSchedule):
            out["weight_drift"] = self.schedule.last_drift
        if isinstance(self.schedule, GuardedSchedule):
            out.update(sync_interval_now=self.schedule.interval, loss_gap=self.schedule.last_gap)
        return out

    def close(self) -> None:
        if self.agent is not None:
            self.agent.close()
