"""The interfaces the storage tier is driven through, declared once for every caller.

:class:`HaloExchange` is the one exchange protocol of the project: the in-memory model
(``FullGraphGNN.forward`` calls ``exchange(layer, owned)``), both trainers and the tier
engine (``forward_rows``/``backward_rows`` with a layer's owned rows still in the tier)
all talk to an exchange through it. ``dgl_sni.halo`` implements it over DistDGL's
KVStore; :class:`NoExchange` is the single-process one. The tier imports nothing above it,
so the protocol lives here.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Protocol, Union, runtime_checkable

import numpy as np
import torch

if TYPE_CHECKING:  # annotation only: importing the block module loads DGL
    from .block import GraphBlock, ReverseBlock


@runtime_checkable
class OwnedRows(Protocol):
    """One layer's owned rows as the tier holds them, handed to an exchange to publish.

    ``units()`` yields ``(owned row ids, rows)`` chunk by chunk, each unit read once;
    ``rows(ids)`` reads any rows; ``sync()`` makes sure what the tier wrote reached
    storage (for tier-backed shards, whose rows servers read from the files).
    """

    def __call__(self, rows) -> np.ndarray: ...

    def units(self) -> Iterable[tuple]: ...

    def sync(self) -> None: ...


Owned = Union[torch.Tensor, OwnedRows]


@runtime_checkable
class HaloExchange(Protocol):
    """Moves one worker's halo rows between layers; one instance per worker and job.

    * ``begin_step(step, training)`` announces a forward pass and returns its mode
      (``"sync"``, ``"stale"`` or ``"pipelined"``);
    * ``forward_rows(layer, owned)`` publishes the owned rows of layer ``layer``'s input
      and returns the halo rows (block order after the owned ones);
    * ``backward_rows(layer, grad_halo)`` sends the halo rows' gradients to their owners
      and returns the gradient the others sent for the owned rows (``None``: nothing);
    * ``exchange(layer, owned)`` (``__call__``) is the autograd form the in-memory model
      uses: ``[owned; halo]`` forward, the two gradient moves backward;
    * ``resume_at(step)``: a run resumed from a checkpoint starts at ``step`` (that step
      exchanges exactly, so an agent's empty tables are seeded first);
    * ``complete_step()`` receives what the last step left on the wire (pipelined steps;
      the next ``begin_step`` does it otherwise), so its time is charged to that step;
    * ``step_flags()`` are the values this worker adds to the all-reduce that ends each
      training step (beside its loss); the trainer hands their sums over workers to
      ``summed_flags(totals)``, so every worker decides the next step's mode from the same
      numbers without a collective of its own (none: ``()``);
    * ``end_epoch()`` returns the epoch's extra metrics; ``close(complete)`` releases what
      it holds (``complete=False`` after an error: it waits for nothing).
    """

    num_owned: int

    def begin_step(self, step: int, training: bool) -> str: ...

    def forward_rows(self, layer: int, owned: Owned) -> torch.Tensor: ...

    def backward_rows(self, layer: int, grad_halo: torch.Tensor) -> torch.Tensor | None: ...

    def __call__(self, layer: int, owned: torch.Tensor) -> torch.Tensor: ...

    def resume_at(self, step: int) -> None: ...

    def complete_step(self) -> None: ...

    def step_flags(self) -> tuple: ...

    def summed_flags(self, totals: tuple) -> None: ...

    def end_epoch(self) -> dict: ...

    def close(self, complete: bool = True) -> None: ...


class NoExchange:
    """The single-process exchange: a worker that owns every row has no halo.

    The in-memory model's source rows are its owned rows unchanged; the tier engine
    gets empty halo rows and no gradient from elsewhere. An exchange of one's own may
    derive from it and override what it moves (the rest stays a no-op).
    """

    def __init__(self, num_owned: int = 0):
        self.num_owned = num_owned

    def begin_step(self, step: int, training: bool) -> str:
        return "sync"

    def forward_rows(self, layer: int, owned: Owned) -> torch.Tensor:
        width = owned.shape[1] if isinstance(owned, torch.Tensor) else 0
        return torch.zeros((0, width), dtype=torch.float32)

    def backward_rows(self, layer: int, grad_halo: torch.Tensor) -> torch.Tensor | None:
        return None

    def __call__(self, layer: int, owned: torch.Tensor) -> torch.Tensor:
        return owned

    def resume_at(self, step: int) -> None:
        pass

    def complete_step(self) -> None:
        pass

    def step_flags(self) -> tuple:
        return ()

    def summed_flags(self, totals: tuple) -> None:
        pass

    def end_epoch(self) -> dict:
        return {}

    def close(self, complete: bool = True) -> None:
        pass


@runtime_checkable
class TierModel(Protocol):
    """What :class:`~storage_tier.engine.TierEngine` needs of a model it runs layer by layer.

    * ``num_layers``: how many layers (``layer_forward`` is called for ``0 .. L-1``);
    * ``layer_forward(layer, block, h)``: the layer's output rows of ``block``'s destination
      rows (activation included, logits for the last layer) from its input rows ``h`` of
      every source row; ``block`` is a :class:`~storage_tier.block.GraphBlock`;
    * ``drop_rows(layer, h, keys)``: the input dropout of ``layer`` applied to rows ``h`` of
      the nodes ``keys`` (the engine applies it where hidden rows are produced);
    * ``set_predropped(layers)``: the layers whose input rows will arrive already dropped
      (their ``layer_forward`` must then not drop them again).

    Declared here so the engine imports no model class; the shipped models (and the base
    class user models derive from) live with the model code, above the tier.
    """

    @property
    def num_layers(self) -> int: ...

    def layer_forward(self, layer: int, block: "GraphBlock", h: torch.Tensor) -> torch.Tensor: ...

    def drop_rows(self, layer: int, h: torch.Tensor, keys: torch.Tensor) -> torch.Tensor: ...

    def set_predropped(self, layers: frozenset) -> None: ...


@runtime_checkable
class PartLoss(Protocol):
    """The training loss of one sub-partition, owned by the trainer; the engine only runs layers.

    ``loss(logits, part)``: the part's share of the step's loss from the logits of its
    destination rows (``part`` a :class:`~storage_tier.subparts.Subpartition`: its labels and
    masks), differentiable in ``logits``, and how many of its training rows it predicts right;
    ``None`` where the part has no training row. The engine backpropagates it."""

    def __call__(self, logits: torch.Tensor, part) -> "tuple[torch.Tensor, int] | None": ...


@runtime_checkable
class SourceMajorModel(TierModel, Protocol):
    """A :class:`TierModel` whose layers the engine can backpropagate source unit by source unit.

    A layer qualifies when its pre-activation output is linear in each source row (a
    weighted sum over in-edges, then projections; GCN, mean SAGE), followed by an
    elementwise activation whose derivative the stored output row determines (``relu``).
    Then a unit's input gradient is complete once the output gradients of every row it
    feeds are known, so backward needs the output gradient layer and a stream of the
    unit's input rows instead of every input row beside a gradient buffer scattered into
    (:meth:`storage_tier.engine.TierEngine.backward`):

    * ``source_major(layer)``: whether ``layer`` qualifies;
    * ``layer_backward_sources(layer, rblock, g_src, x, g_own, input_grad)``: with
      ``g_src`` the gradient of the layer's pre-activation output at ``rblock``'s source
      rows, ``x`` the layer's (dropped) input rows of the unit and ``g_own`` the output
      gradient of the unit's own rows (``None`` for the halo unit), add the unit's share
      to the parameters' ``.grad`` and return the gradient of ``x`` (``None`` unless
      ``input_grad``);
    * ``activation_backward(layer, grad, out)``: the gradient of ``layer``'s pre-activation
      from the gradient of its output rows ``out`` (after the next layer's dropout, whose
      backward the engine applies first).
    """

    def source_major(self, layer: int) -> bool: ...

    def layer_backward_sources(self, layer: int, rblock: "ReverseBlock", g_src: torch.Tensor,
                               x: torch.Tensor, g_own: torch.Tensor | None,
                               input_grad: bool) -> torch.Tensor | None: ...

    def activation_backward(self, layer: int, grad: torch.Tensor, out: torch.Tensor) -> torch.Tensor: ...
