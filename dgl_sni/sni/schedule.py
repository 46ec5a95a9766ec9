"""Which training steps exchange halo embeddings for real.

:class:`SyncSchedule` is the fixed schedule (warm-up, then every ``interval``-th step);
:class:`DriftSchedule` syncs when the weights have moved too far since the last sync
(:class:`WeightDrift`), within a staleness budget; :class:`GuardedSchedule` halves its
interval when a sync shows that the stale steps before it raised the exact loss. The
full-graph exchange owns one per job; the stock-script switch gives each managed tensor
a fixed one.
"""
from __future__ import annotations

from typing import Protocol


class SyncSchedule:
    """``warmup`` steps always sync; afterwards every ``interval``-th step syncs.

    Steps count from 0; step ``warmup + k * interval`` syncs for every ``k >= 0``, so
    ``interval = 1`` syncs every step (exact training).
    """

    def __init__(self, warmup: int, interval: int, enabled: bool = True):
        self.warmup, self.interval, self.enabled = warmup, interval, enabled
        self.resumed_at = None

    def resume_at(self, step: int) -> None:
        """A run resumed from a checkpoint starts at ``step`` with empty agent tables: that
        step syncs (its observation seeds them); the steps after it follow the schedule."""
        self.resumed_at = step

    def is_sync(self, step: int) -> bool:
        if not self.enabled or step < self.warmup or step == self.resumed_at:
            return True
        return (step - self.warmup) % self.interval == 0

    def mode(self, step: int) -> str:
        return "sync" if self.is_sync(step) else "stale"

    def surely_syncs(self, step: int) -> bool:
        """Whether ``step`` syncs whatever the steps before it do (here: whether it syncs)."""
        return self.is_sync(step)


class DriftMeter(Protocol):
    """How far what the halo rows depend on has moved since the last sync."""

    def __call__(self) -> float: ...

    def snapshot(self) -> None: ...


class WeightDrift:
    """Relative change of a model's weights since the last sync: the largest over the given
    parameters of ``||W - W_sync|| / ||W_sync||``. The weights are the same on every worker,
    so every worker measures the same, with no traffic. Made by the worker for the layers
    whose outputs are exchanged, read by :class:`DriftSchedule`."""

    def __init__(self, params):
        self.params = [p for p in params]
        self.snapshot()

    def snapshot(self) -> None:
        self._ref = [p.detach().clone() for p in self.params]

    def __call__(self) -> float:
        drift = 0.0
        for p, ref in zip(self.params, self._ref):
            scale = float(ref.norm())
            drift = max(drift, float((p.detach() - ref).norm()) / max(scale, 1e-12))
        return drift


class DriftSchedule:
    """Warm-up steps sync; afterwards a step syncs when its meter reads more than ``bound``
    (the weights moved that far since the last sync), or when ``budget`` steps have passed
    since the last sync.

    Early in training, or after a jump, the weights move fast and steps sync often; later
    the schedule runs up to ``budget``. Without a meter it is the fixed schedule of interval
    ``budget`` after warm-up.
    """

    def __init__(self, warmup: int, budget: int, bound: float, meter: DriftMeter | None = None,
                 enabled: bool = True):
        self.warmup, self.budget, self.bound, self.enabled = warmup, budget, bound, enabled
        self.meter = meter
        self._modes = {}
        self._last_sync = None
        self.last_drift = 0.0

    def mode(self, step: int) -> str:
        if step not in self._modes:
            sync = self._syncs(step)
            self._modes = {step: "sync" if sync else "stale"}  # only the current step is asked again
            if sync:
                self._last_sync = step
                if self.meter is not None:
                    self.meter.snapshot()
        return self._modes[step]

    def is_sync(self, step: int) -> bool:
        return self.mode(step) == "sync"

    def surely_syncs(self, step: int) -> bool:
        """Whether ``step`` syncs whatever the meter reads by then: a warm-up step, or the
        budget is spent (asked before :meth:`mode`, it does not decide the step)."""
        return not self.enabled or step < self.warmup or self._last_sync is None \
            or step - self._last_sync >= self.budget

    def resume_at(self, step: int) -> None:
        """A run resumed from a checkpoint starts at ``step`` with empty agent tables: as at
        a fresh start, that step syncs (no sync has happened yet) and re-takes the meter's
        reference weights."""
        self._modes = {}
        self._last_sync = None

    def _syncs(self, step: int) -> bool:
        if not self.enabled or step < self.warmup or self._last_sync is None:
            return True
        if step - self._last_sync >= self.budget:
            return True
        self.last_drift = self.meter() if self.meter is not None else 0.0
        return self.last_drift > self.bound


class GuardedSchedule:
    """Warm-up steps and the step after them sync; afterwards a step syncs when
    ``interval`` steps have passed since the last sync, and the interval follows what
    staleness costs. A sync step sees the exact training loss, the stale step before it a
    loss computed on served rows. When the sync's loss is more than ``tolerance``
    (relative) above that stale loss, the stale steps were fitting rows that were no longer
    true: the interval halves (down to 1, exact training). After ``grow_after`` syncs in a
    row without such a rise it grows by one, up to ``budget``; at interval 1 the
    comparison is with the exact step before.

    The losses are the all-reduced training losses, the same on every worker, so every
    worker takes the same decisions with no traffic. Fed by the worker after each
    training step (:meth:`observe`), through :meth:`~dgl_sni.halo.plan.HaloPlanner.watch_loss`.
    """

    def __init__(self, warmup: int, budget: int, tolerance: float, enabled: bool = True, grow_after: int = 2):
        self.warmup, self.budget, self.tolerance, self.enabled = warmup, budget, tolerance, enabled
        self.grow_after = grow_after
        self.interval = budget
        self._modes = {}
        self._last_sync = None
        self._last = None  # (step, mode, loss) of the last training step observed
        self._clean = 0
        self.last_gap = 0.0

    def mode(self, step: int) -> str:
        if step not in self._modes:
            sync = (not self.enabled or step <= self.warmup or self._last_sync is None
                    or step - self._last_sync >= self.interval)
            self._modes = {step: "sync" if sync else "stale"}  # only the current step is asked again
            if sync:
                self._last_sync = step
        return self._modes[step]

    def is_sync(self, step: int) -> bool:
        return self.mode(step) == "sync"

    def surely_syncs(self, step: int) -> bool:
        """Whether ``step`` syncs whatever the losses before it say: a warm-up step, or one
        past the interval's longest (a clean sync may still grow the interval by one)."""
        return not self.enabled or step <= self.warmup or self._last_sync is None \
            or step - self._last_sync >= self.budget

    def observe(self, step: int, mode: str, loss: float) -> None:
        """Training step ``step`` ran in ``mode`` with global loss ``loss``."""
        last, self._last = self._last, (step, mode, loss)
        if mode != "sync" or step <= self.warmup or last is None or last[0] != step - 1 or last[2] <= 0:
            return
        self.last_gap = loss / last[2] - 1.0
        if self.last_gap > self.tolerance and last[1] == "stale":
            self.interval, self._clean = max(1, self.interval // 2), 0
        elif self.last_gap <= self.tolerance:
            self._clean += 1
            if self._clean >= self.grow_after:
                self.interval, self._clean = min(self.budget, self.interval + 1), 0

    def resume_at(self, step: int) -> None:
        """A resumed run starts at ``step`` with empty agent tables: that step syncs; the
        interval starts again from ``budget`` (what the run learnt of it is not kept)."""
        self._modes, self._last_sync, self._last = {}, None, None
        self.interval, self._clean = self.budget, 0
