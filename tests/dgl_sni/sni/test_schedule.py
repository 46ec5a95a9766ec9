"""Sync schedules: the fixed one, the drift-triggered one within its staleness budget, and the
loss-guarded one."""
import torch

from dgl_sni.sni.schedule import DriftSchedule, GuardedSchedule, SyncSchedule, WeightDrift


def test_fixed_schedule():
    s = SyncSchedule(warmup=2, interval=3)
    assert "".join("S" if s.is_sync(t) else "." for t in range(10)) == "SSS..S..S."


class Meter:
    """Reads a scripted drift; counts snapshots (taken at every sync after warm-up)."""

    def __init__(self, readings):
        self.readings, self.snapshots = list(readings), 0

    def __call__(self):
        return self.readings.pop(0)

    def snapshot(self):
        self.snapshots += 1


def test_drift_schedule_syncs_on_drift_and_within_its_budget():
    # after warm-up (steps 0, 1) the meter is read on every candidate stale step
    meter = Meter([0.01, 0.2, 0.01, 0.02, 0.03, 0.01, 0.01, 0.5])
    s = DriftSchedule(warmup=2, budget=4, bound=0.1, meter=meter)
    modes = ""
    for t in range(11):
        modes += "S" if s.mode(t) == "sync" else "."
        assert s.mode(t) == modes[-1].replace("S", "sync").replace(".", "stale")  # asked again: same
    # 2 stale (0.01); 3 drift 0.2 -> sync; 4-6 stale; 7 budget (4 since 3) -> sync unread;
    # 8, 9 stale; 10 drift 0.5 -> sync
    assert modes == "SS.S...S..S"
    assert meter.readings == [] and meter.snapshots == 5  # a sync resets what drift is measured from


def test_weight_drift_is_relative_to_the_last_snapshot():
    w = torch.nn.Parameter(torch.ones(4, 4))
    b = torch.nn.Parameter(torch.ones(4))
    meter = WeightDrift([w, b])
    assert meter() == 0.0
    with torch.no_grad():
        w += 0.5  # ||dW|| / ||W|| = 0.5
        b[0] += 2.0  # ||db|| / ||b|| = 2 / 2 = 1.0
    assert abs(meter() - 1.0) < 1e-6
    meter.snapshot()
    assert meter() == 0.0


def test_resumed_fixed_schedule_syncs_its_first_step_then_keeps_its_pattern():
    # a run resumed at stale step 3 (its agent tables are empty): step 3 syncs (seeding them),
    # 4 is stale again and 5, 8 sync as in the unbroken schedule
    s = SyncSchedule(warmup=2, interval=3)
    s.resume_at(3)
    assert "".join("S" if s.is_sync(t) else "." for t in range(3, 10)) == "S.S..S."
    assert s.mode(3) == "sync" and s.mode(4) == "stale"
    exact = SyncSchedule(warmup=0, interval=1)
    exact.resume_at(7)
    assert all(exact.is_sync(t) for t in range(7, 12))  # interval 1 stays exact


def test_resumed_drift_schedule_syncs_its_first_step_and_measures_from_there():
    meter = Meter([0.01, 0.01, 0.02])
    s = DriftSchedule(warmup=2, budget=4, bound=0.1, meter=meter)
    assert [s.mode(t) for t in range(4)] == ["sync", "sync", "stale", "stale"]
    s.resume_at(4)  # as a fresh schedule restarted at step 4: no sync seen yet
    assert s.mode(4) == "sync" and meter.snapshots == 3
    assert s.mode(5) == "stale"  # reads the meter again (0.02), measured from step 4
    assert meter.readings == []


def _run_guarded(s, losses):
    """Drive ``s`` with a loss per step: ``losses(step, mode)``; returns the modes as S/. ."""
    modes = ""
    for t in range(len(losses)):
        mode = s.mode(t)
        modes += "S" if mode == "sync" else "."
        s.observe(t, mode, losses[t](mode) if callable(losses[t]) else losses[t])
    return modes


def test_guarded_schedule_keeps_its_budget_while_syncs_show_no_rise():
    s = GuardedSchedule(warmup=2, budget=3, tolerance=0.01)
    falling = [1.0 - 0.01 * t for t in range(11)]  # every sync's loss below the stale step's before it
    assert _run_guarded(s, falling) == "SSS..S..S.." and s.interval == 3


def test_guarded_schedule_halves_on_a_rise_and_grows_back_after_two_clean_syncs():
    s = GuardedSchedule(warmup=1, budget=4, tolerance=0.01)
    # steps 1.. after warm-up; the sync at step 5 shows a 10% rise over stale step 4
    losses = [1.0, 0.9, 0.89, 0.88, 0.87, 0.96] + [0.95 - 0.01 * t for t in range(14)]
    modes = _run_guarded(s, losses)
    # interval 4 (syncs 1, 5), halved to 2 at 5 (syncs 7, 9), then 3 after two clean syncs (12, 15)
    # and back to 4 after two more (19)
    assert modes == "SS...S.S.S..S..S...S"
    assert s.interval == 4


def test_guarded_schedule_goes_down_to_exact_training_and_probes_again():
    s = GuardedSchedule(warmup=1, budget=2, tolerance=0.01)
    # every sync after a stale step rises 5%; exact steps fall
    losses = [lambda m: 1.0] + [(lambda m: 1.05 if m == "sync" else 1.0)] * 12
    modes = _run_guarded(s, losses)
    assert modes.startswith("SS.S")  # interval 2, halved to 1 at step 3
    assert s.interval in (1, 2) and "SSS" in modes  # exact steps, then a probe at interval 2 again
    never = GuardedSchedule(warmup=1, budget=1, tolerance=0.0)
    assert _run_guarded(never, [1.0 + t for t in range(6)]) == "SSSSSS"  # budget 1: exact training


def test_resumed_guarded_schedule_syncs_its_first_step_and_restarts_from_its_budget():
    s = GuardedSchedule(warmup=1, budget=3, tolerance=0.01)
    assert _run_guarded(s, [1.0, 0.9, 0.89, 0.88, 0.99]) == "SS..S"  # the sync at 4 rose 12.5%
    assert s.interval == 1
    s.resume_at(5)
    assert s.mode(5) == "sync" and s.interval == 3
    assert [s.mode(t) for t in (6, 7, 8)] == ["stale", "stale", "sync"]



def test_a_step_surely_syncs_only_where_nothing_before_it_can_make_it_stale():
    """The exchange asks for the next sync's preview a step ahead only where the schedule is
    sure (asked before the step's mode): checked against the modes each schedule then gives."""
    fixed = SyncSchedule(warmup=2, interval=3)
    assert [fixed.surely_syncs(t) for t in range(9)] == [fixed.is_sync(t) for t in range(9)]

    quiet = DriftSchedule(warmup=2, budget=3, bound=0.5, meter=Meter([0.0] * 20))
    sure = []
    for t in range(10):  # a meter that never reads above the bound: warm-up and the spent budget
        sure.append(quiet.surely_syncs(t))
        assert sure[-1] == (quiet.mode(t) == "sync")
    assert [t for t, s in enumerate(sure) if s] == [0, 1, 4, 7]
    jumpy = DriftSchedule(warmup=2, budget=3, bound=0.5, meter=Meter([0.0, 1.0] * 10))
    for t in range(10):  # drift syncs the schedule could not foresee; never a sure step that is stale
        sure = jumpy.surely_syncs(t)
        assert not sure or jumpy.mode(t) == "sync"

    for losses in ([1.0] * 12, [1.0, 2.0] * 6):  # clean syncs grow the interval; rises halve it
        guarded = GuardedSchedule(warmup=1, budget=3, tolerance=0.01)
        seen = []
        for t in range(12):
            sure = guarded.surely_syncs(t)
            mode = guarded.mode(t)
            assert not sure or mode == "sync", (losses, t)
            seen.append(sure)
            guarded.observe(t, mode, losses[t])
        assert any(seen[2:])  # the budget's end is foreseen
