"""How a model's layers take their halo rows: the forms, and the one interface they ask.

A layer ``l >= 1`` of :class:`~dgl_sni.models.FullGraphGNN` reads the rows of its source
nodes: the owned rows the layer below produced and the halo rows other workers own. The
step's plan (:mod:`dgl_sni.halo.plan`) says in which :class:`Form` the layer takes them;
the model asks :meth:`HaloRows.form` and calls the matching method, never looking at what
the exchange is. The input layer (``l = 0``) has its halo rows in memory (the features);
its form says whether it takes their sum.

What a layer *can* take is declared by the model (:class:`Takes`, one per exchanged layer:
:meth:`~dgl_sni.models.TrainableModel.halo_takes`); the step planner picks each step's form
from that declaration, and the form it picks is what runs.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import torch

from storage_tier.protocols import HaloExchange, NoExchange

if TYPE_CHECKING:
    from ..dropout import KeyedMask
    from .sums import BlockSplit


class Form(str, enum.Enum):
    """How a layer takes its halo rows at a step."""

    ROWS = "rows"  # the whole block: ``exchange(l, owned)`` returns [owned; halo], dropout on every row
    APART = "apart"  # owned rows aggregated while the halo rows travel; the halo rows summed as dropped
    SUM = "sum"  # the undropped sum of the halo rows only (a stale step; the kept sum of the last sync)


@dataclass(frozen=True)
class Takes:
    """What one layer can take its halo rows as, declared by its model; the planner gives
    it :class:`Form.ROWS` where it declares neither.

    ``sum``: the layer is linear in each halo row, so a step that sums (a stale step under
    ``--stale-halo summed``) can feed it the sum over its halo in-edges (:class:`Form.SUM`);
    ``apart``: it also aggregates its owned rows while the halo rows travel, then takes
    their sum dropped by its own keyed masks (:class:`Form.APART`, the built-in GCN and SAGE).
    Index 0 of a model's declaration is its input layer, whose halo rows are the features."""

    sum: bool = False
    apart: bool = False

    @property
    def path(self) -> str:
        """``summed`` or ``rows``: how the layer's stale steps can take their rows."""
        return "summed" if self.sum else "rows"


ROWS_ONLY = Takes()  # attention, and any layer not known to be linear in its sources
SPLITS = Takes(sum=True, apart=True)  # the built-in GCN and SAGE layers


@runtime_checkable
class HaloRows(HaloExchange, Protocol):
    """What a model's layers get their halo rows through (the in-memory trainer's exchange).

    * ``form(layer)``: the :class:`Form` layer ``layer`` takes its halo rows in at this pass;
    * ``exchange(layer, owned)`` (``__call__``, :class:`Form.ROWS`): ``[owned; halo]``, its
      backward pushing the halo rows' gradients;
    * ``start_halo(layer, owned)`` (:class:`Form.APART` and :class:`Form.SUM`), called with the
      layer's owned input rows before the layer uses them: starts moving the halo rows where
      the step pulls them and returns the owned rows for the layer to use (same values; its
      backward adds the gradient the others sent for them once every use has its gradient);
    * ``halo_sum(layer, owned, split, scale, mask)``: the sum over the halo in-edges of
      ``scale * h_u`` (:meth:`~dgl_sni.halo.sums.BlockSplit.sum_rows`), of the rows dropped
      by ``mask`` (:class:`Form.APART`; ``None``: undropped) or undropped
      (:class:`Form.SUM`); ``owned`` is what ``start_halo`` returned. Backward pushes the
      halo rows' gradients where the step sends them.

    Implemented by :class:`~dgl_sni.halo.exchange.KVHaloExchange` and by
    :class:`WholeGraph` (one process: no halo).
    """

    def form(self, layer: int) -> Form: ...

    def splits(self) -> bool:
        """Some layer of this pass takes its halo rows apart or summed (a trainer then needs
        its block's :class:`~dgl_sni.halo.sums.BlockSplit`)."""
        ...

    def start_halo(self, layer: int, owned: torch.Tensor) -> torch.Tensor: ...

    def halo_sum(self, layer: int, owned: torch.Tensor, split: "BlockSplit", scale: torch.Tensor | None,
                 mask: "KeyedMask | None" = None) -> torch.Tensor: ...


class WholeGraph(NoExchange):
    """One process owning every node: every layer's source rows are its owned rows
    (:class:`Form.ROWS`, ``exchange`` the identity). The single-process reference's exchange."""

    def form(self, layer: int) -> Form:
        return Form.ROWS

    def splits(self) -> bool:
        return False

    def start_halo(self, layer: int, owned: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("one process has no halo rows to take apart")

    def halo_sum(self, layer, owned, split, scale, mask=None):
        raise RuntimeError("one process has no halo rows to sum")
