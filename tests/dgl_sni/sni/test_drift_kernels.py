"""The drift transfer's compiled arithmetic (csrc/drift_fit.hpp) against numpy's float64
least squares and the scores written out in numpy."""
import numpy as np
import pytest

from dgl_sni import _ops

RIDGE = 1e-6


def _fit_rows(owned, stride):
    rows = owned[::stride].astype(np.float64)
    return np.hstack([rows, np.ones((rows.shape[0], 1))])


def _ridged_gram(rows):
    gram = rows.T @ rows
    return gram + np.eye(gram.shape[0]) * RIDGE * max(np.trace(gram) / gram.shape[0], 1e-12)


@pytest.mark.parametrize("n, d, stride", [(700, 16, 1), (1000, 8, 3), (40, 4, 1), (301, 20, 2)])
def test_the_fit_is_numpys_ridged_least_squares_over_every_stride_th_row(n, d, stride):
    rng = np.random.default_rng(n)
    before = rng.random((n, d), dtype=np.float32)
    after = (before @ (np.eye(d) + 0.1 * rng.standard_normal((d, d))) + 0.2).astype(np.float32)
    _, base, chol, nonneg = _ops.drift_fit_rows(before, stride, rebase=True, ridge=RIDGE)
    want_base = _fit_rows(before, stride)
    np.testing.assert_array_equal(base, want_base)
    gram = _ridged_gram(want_base)
    np.testing.assert_allclose(chol @ chol.T, gram, rtol=1e-12, atol=1e-9)
    assert np.array_equal(chol, np.tril(chol)) and nonneg
    m, rows, new_chol, _ = _ops.drift_fit_rows(after, stride, base, chol)
    assert rows is None and new_chol is None  # not asked to re-base
    want = np.linalg.solve(gram, want_base.T @ after[::stride].astype(np.float64))
    np.testing.assert_allclose(m, want, rtol=1e-9, atol=1e-9)
    assert m.shape == (d + 1, d)


def test_the_moved_rows_are_the_map_applied_in_float64_and_clamped_where_asked():
    rng = np.random.default_rng(1)
    cache = rng.standard_normal((30, 5)).astype(np.float32)
    m = rng.standard_normal((6, 5))
    sampled = np.array([0, 4, 29, 7], dtype=np.int64)
    want = cache[sampled].astype(np.float64) @ m[:-1] + m[-1]
    np.testing.assert_array_equal(_ops.drift_move_rows(cache, sampled, m, False), want.astype(np.float32))
    np.testing.assert_array_equal(_ops.drift_move_rows(cache, sampled, m, True),
                                  np.maximum(want, 0).astype(np.float32))


def test_scores_decay_per_row_and_per_layer_from_the_state_before_them():
    rng = np.random.default_rng(2)
    ns, d, decay, margin, min_scores = 6, 3, 0.5, 0.9, 2
    sampled = np.array([1, 3, 4, 6, 8, 9], dtype=np.int64)
    err, scores, layer = np.zeros((2, ns)), np.zeros(ns, np.int64), np.zeros(2)
    ref_err, ref_scores, ref_layer = err.copy(), scores.copy(), None
    for step in range(5):
        fresh = rng.standard_normal((10, d)).astype(np.float32)
        agent = rng.standard_normal((10, d)).astype(np.float32)
        noise = np.array([0.1, 0.1, 0.1, 3.0, 3.0, 0.1 if step % 2 else 3.0])[:, None]  # transfers good and bad
        moved = (fresh[sampled] + rng.standard_normal((ns, d)) * noise).astype(np.float32)
        _ops.drift_score_rows(moved, agent, fresh, sampled, decay, margin, min_scores, err, scores, layer,
                              ref_layer is not None)
        e = np.stack([np.linalg.norm(moved.astype(np.float64) - fresh[sampled], axis=1),
                      np.linalg.norm(agent[sampled].astype(np.float64) - fresh[sampled], axis=1)])
        chosen = (ref_scores >= min_scores) & (ref_err[0] < margin * ref_err[1])
        sums = np.array([np.where(chosen, e[0], e[1]).sum(), e[1].sum()])
        ref_layer = sums if ref_layer is None else decay * ref_layer + (1 - decay) * sums
        ref_err = np.where(ref_scores == 0, e, decay * ref_err + (1 - decay) * e)
        ref_scores = ref_scores + 1
        np.testing.assert_allclose(err, ref_err, rtol=1e-12)
        np.testing.assert_allclose(layer, ref_layer, rtol=1e-12)
        np.testing.assert_array_equal(scores, ref_scores)
    assert chosen.any() and not chosen.all()  # the gates were really exercised


def test_a_partition_without_owned_rows_still_fits_a_map():
    """No owned rows (a worker with an empty partition): the ridge alone keeps the fit defined."""
    from dgl_sni.sni.transfer import DriftTransfer

    tr = DriftTransfer(np.ones(3, dtype=bool))
    empty = np.zeros((0, 4), np.float32)
    tr.sync(empty)
    assert tr.ready and not tr._nonneg
    np.testing.assert_array_equal(tr.fit(empty), np.zeros((5, 4)))


def test_bad_inputs_are_refused_by_name():
    rows = np.ones((10, 4), np.float32)
    _, base, chol, _ = _ops.drift_fit_rows(rows + np.eye(10, 4, dtype=np.float32), 1, rebase=True, ridge=RIDGE)
    with pytest.raises(ValueError, match="owned rows changed from 10 to 5 fit rows"):
        _ops.drift_fit_rows(rows[:5], 1, base, chol)
    with pytest.raises(ValueError, match="not positive definite"):
        _ops.drift_fit_rows(np.full((10, 4), np.nan, np.float32), 1, rebase=True, ridge=RIDGE)
    with pytest.raises(TypeError, match="owned rows must be float32"):
        _ops.drift_fit_rows(rows.astype(np.float64), 1, rebase=True)
    with pytest.raises(ValueError, match="stride must be at least 1"):
        _ops.drift_fit_rows(rows, 0, rebase=True)
    with pytest.raises(ValueError, match=r"sampled rows must lie in \[0, 10\)"):
        _ops.drift_move_rows(rows, np.array([10], np.int64), np.zeros((5, 4)), False)
    with pytest.raises(ValueError, match="map has shape"):
        _ops.drift_move_rows(rows, np.array([1], np.int64), np.zeros((4, 4)), False)
