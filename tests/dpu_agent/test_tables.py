"""The C++ history tables (csrc/tables.hpp) give the former numpy tables' results to the bit."""
import numpy as np
import pytest

from dpu_agent.tables import Agent, HistoryTable

from tests.dpu_agent.table_ref import HistoryTable as NumpyTable


def _same(a, b):
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes(), np.abs(a.astype(np.float64) - b).max()


@pytest.mark.parametrize("kind", ["cache", "linear-trend", "gated", "holt", "window-trend"])
@pytest.mark.parametrize("num_rows,dim", [(7, 3), (150, 16), (300, 131), (1100, 5)])
def test_tables_equal_the_numpy_tables_to_the_bit(kind, num_rows, dim):
    rng = np.random.default_rng(num_rows * 31 + dim)
    sampled = rng.random(num_rows) < 0.4
    ours, ref = HistoryTable(num_rows, dim, sampled, kind), NumpyTable(num_rows, dim, sampled, kind)
    base = rng.standard_normal((num_rows, dim)).astype(np.float32)
    vel = (rng.standard_normal((num_rows, dim)) * 0.1).astype(np.float32)
    step = 0
    for epoch in range(14):
        step += int(rng.integers(1, 3))
        rows = (base + vel * step + rng.standard_normal((num_rows, dim)) * 0.01).astype(np.float32)
        if epoch < 2 or epoch % 3 == 0:
            ours.observe(step, rows)
            ref.observe(step, rows)
        elif epoch % 3 == 1:
            ids = rng.choice(num_rows, size=max(1, num_rows // 4), replace=False).astype(np.int64)
            ours.observe(step, rows[ids], ids)
            ref.observe(step, rows[ids], ids)
        else:
            _same(ours.serve(step, preview=True)[0], ref.serve(step, preview=True)[0])
            for _ in range(2):  # memoised
                a, b = ours.serve(step), ref.serve(step)
                _same(a[0], b[0])
                _same(a[1], b[1])
        _same(ours.drift(step + 1), ref.drift(step + 1))
    _same(ours.cache, ref.cache)


def test_table_errors_are_clear():
    table = HistoryTable(4, 2, np.ones(4, bool), "gated")
    with pytest.raises(ValueError, match="never synchronised"):
        table.serve(1)
    with pytest.raises(ValueError, match=r"observe needs rows of shape \(4, 2\)"):
        table.observe(0, np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="out of range"):
        table.observe(0, np.zeros((1, 2), np.float32), np.array([9]))
    with pytest.raises(ValueError, match="duplicate row id 1"):
        table.observe(0, np.zeros((2, 2), np.float32), np.array([1, 1]))
    with pytest.raises(ValueError, match="unknown predictor"):
        HistoryTable(4, 2, np.ones(4, bool), "nope")
    agent = Agent()
    with pytest.raises(ValueError, match="no table 3"):
        agent.table(3)


def test_every_predictor_kind_has_one_code_everywhere():
    """The kinds' names and wire codes are one list (dpu_agent.predictors.PREDICTOR_NAMES): the
    protocol, the compiled tables and the agent binary number them alike."""
    from dpu_agent import _core, protocol
    from dpu_agent.predictors import PREDICTOR_NAMES
    assert protocol.KINDS == PREDICTOR_NAMES
    assert _core.KIND_CODES == {name: code for code, name in enumerate(PREDICTOR_NAMES)}
    for kind in PREDICTOR_NAMES:  # the compiled tables accept each, under its own name
        assert HistoryTable(3, 2, np.ones(3, bool), kind).kind == kind
