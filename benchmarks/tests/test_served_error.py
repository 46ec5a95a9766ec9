"""The served rows' error over seeds: sums over the stale epochs, not means of per-epoch ratios."""
from benchmarks.served_error import ratios


def test_ratios_are_ratios_of_sums_over_the_stale_epochs():
    errors = {"p": {"0": [dict(pred_rows_l2=1.0, pred_rows_cache_l2=2.0, staleness_l2=3.0, cache_l2=3.0),
                          dict(pred_rows_l2=3.0, pred_rows_cache_l2=2.0, staleness_l2=1.0, cache_l2=2.0),
                          dict(pred_rows_l2=0.0, pred_rows_cache_l2=0.0, staleness_l2=0.0, cache_l2=1.0)]}}
    r = ratios(errors)["p"]
    assert r["predicted_over_cache"] == [1.0]  # (1 + 3) / (2 + 2): an epoch without predicted rows adds nothing
    assert r["served_over_cache"] == [4.0 / 6.0]
