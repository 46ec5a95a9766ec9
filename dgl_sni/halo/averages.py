"""Exponential averages over sync epochs and over steps, each in one compiled pass
(csrc/row_blend.hpp).

With ``--smooth S`` the stale path keeps three averages over syncs: the halo rows the agent
observes (:class:`~dgl_sni.halo.resolver.HaloResolver`), the kept halo sums that follow
them (:class:`~dgl_sni.halo.sums.KeptSums`) and, with ``--stale-grad last``, the received
halo gradients (:class:`~dgl_sni.halo.exchange.KVHaloExchange`). Each was two or three
element-wise passes that allocated their results; these give the same float32 values,
operation for operation, in one pass. The averages over steps (``--row-average``,
``--grad-average``; :class:`~dgl_sni.halo.exchange.KVHaloExchange`) are :func:`mix`, and
with ``--average-trend`` :func:`trend`.
"""
from __future__ import annotations

import numpy as np
import torch

from .. import _ops


def smooth_into(old: np.ndarray, fresh: np.ndarray, g: float, out: np.ndarray) -> np.ndarray:
    """``out = (old - fresh) * g + fresh`` (float32 arrays of one shape; ``out`` may be
    ``old``): numpy's ``subtract``, ``*= g``, ``+= fresh``."""
    return _ops.smooth_rows_into(old, np.ascontiguousarray(fresh, dtype=np.float32), g, out)


def mix(kept: torch.Tensor, g: float, new: torch.Tensor) -> torch.Tensor:
    """``g * kept + (1 - g) * new`` as a new float32 tensor (torch's values for that
    expression; not differentiable)."""
    kept, new = kept.detach().contiguous(), new.detach().contiguous()
    out = torch.empty_like(new)
    _ops.mix_rows_into(kept.numpy(), g, new.numpy(), 1.0 - g, out.numpy())
    return out


def trend(average: torch.Tensor, twice: torch.Tensor, g: float, new: torch.Tensor) -> torch.Tensor:
    """The double exponential average: ``average = mix(average, g, new)`` and ``twice =
    mix(twice, g, average)`` in place (contiguous float32 tensors no one else holds), and
    ``2 * average - twice`` as a new tensor (what ``mix(twice, -1, average)`` gives)."""
    new = new.detach().contiguous()
    out = torch.empty_like(new)
    _ops.trend_rows_into(average.numpy(), twice.numpy(), new.numpy(), g, 1.0 - g, out.numpy())
    return out
