"""The owners' push handler for float32 halo gradients: the compiled loop equals ``index_add_``."""
import numpy as np
import pytest
import torch

from dgl_sni import _ops
from dgl_sni.halo.tensors import accumulate_push_handler


def test_float_rows_add_as_index_add_does_repeats_included():
    g = torch.Generator().manual_seed(0)
    offsets = torch.randint(0, 50, (400,), generator=g)  # many repeats: up to ~20 rows per target
    rows = torch.randn(400, 16, generator=g) * torch.logspace(-6, 6, 400).unsqueeze(1)
    start = torch.randn(50, 16, generator=g, dtype=torch.float64)
    store = {"g": start.clone()}
    accumulate_push_handler(store, "g", offsets, rows)
    assert torch.equal(store["g"], start.clone().index_add_(0, offsets, rows.double()))


def test_other_dtypes_and_shapes_take_index_add():
    store = {"g": torch.zeros(4, 2, 3)}  # not 2-d: torch's index_add_
    accumulate_push_handler(store, "g", torch.tensor([1, 1]), torch.ones(2, 2, 3))
    assert float(store["g"][1].sum()) == 12.0 and float(store["g"].sum()) == 12.0
    store = {"g": torch.zeros(4, 3, dtype=torch.float64)}
    accumulate_push_handler(store, "g", torch.tensor([2]), torch.ones(1, 3, dtype=torch.float64))
    assert store["g"][2].tolist() == [1.0, 1.0, 1.0]


def test_the_compiled_accumulate_names_a_bad_input():
    target = np.zeros((5, 16))
    with pytest.raises(IndexError, match=r"offsets must lie in \[0, 5\)"):
        _ops.accumulate_float_rows_into(np.zeros((1, 16), np.float32), np.array([5]), target)
    with pytest.raises(ValueError, match="need one offset per row: 2 rows"):
        _ops.accumulate_float_rows_into(np.zeros((2, 16), np.float32), np.array([1]), target)
    with pytest.raises(ValueError, match="rows of 8 values cannot be added into a target of 16 columns"):
        _ops.accumulate_float_rows_into(np.zeros((1, 8), np.float32), np.array([1]), target)
    with pytest.raises(TypeError, match="rows must be float32"):
        _ops.accumulate_float_rows_into(np.zeros((1, 16)), np.array([1]), target)
    assert not target.any()  # nothing was added before the refusals
