"""The autograd nodes through which a model's layers take their halo rows.

Each forward hands over to the exchange (which carries out the step's plan); each
backward sends the halo rows' gradients and adds the gradient the others sent for the
owned rows. Used by :class:`~dgl_sni.halo.exchange.KVHaloExchange`, one node per form
(:class:`~dgl_sni.halo.rows.Form`).
"""
from __future__ import annotations

import torch


class ExchangeFunction(torch.autograd.Function):
    """``[owned; halo] = exchange(owned)`` (the rows form); backward pushes the halo
    gradients and adds what the others sent for the owned rows."""

    @staticmethod
    def forward(ctx, owned, exchange, layer: int):
        ctx.exchange, ctx.layer = exchange, layer
        halo = exchange.forward_rows(layer, owned)
        return torch.cat((owned, halo), 0)

    @staticmethod
    def backward(ctx, grad_src):
        ex = ctx.exchange
        grad_owned = grad_src[: ex.num_owned]
        received = ex.backward_rows(ctx.layer, grad_src[ex.num_owned:])
        return grad_owned + received, None, None


class HaloGate(torch.autograd.Function):
    """``owned = gate(owned)``, made before a layer that takes its halo rows apart or summed
    uses its owned rows. Forward starts the halo rows' pull where the step pulls them;
    backward runs once every use of the owned rows has its gradient (after
    :class:`HaloSumFunction` pushed the halo gradients, so the owned rows' backward ran while
    they travelled) and adds the gradient the others sent for the owned rows."""

    @staticmethod
    def forward(ctx, owned, exchange, layer: int):
        ctx.exchange, ctx.layer = exchange, layer
        exchange.start_rows(layer, owned)
        return owned.view_as(owned)

    @staticmethod
    def backward(ctx, grad_owned):
        return grad_owned + ctx.exchange.received_grad(ctx.layer), None, None  # out of place


class HaloSumFunction(torch.autograd.Function):
    """``sum = halo_sum(owned)``; backward pushes the halo rows' gradient
    (``scale * A_halo^T dL/dsum``, dropped by the rows' ``mask``) where the step sends it;
    the gradient the others sent for ``owned`` is added by the :class:`HaloGate` ``owned``
    came through."""

    @staticmethod
    def forward(ctx, owned, exchange, layer: int, split, scale, mask):
        ctx.exchange, ctx.layer, ctx.split, ctx.scale, ctx.mask = exchange, layer, split, scale, mask
        total = exchange.summed(layer, owned, split, scale, mask)
        return total.view_as(total)  # a new tensor per step, over the kept sum (only read)

    @staticmethod
    def backward(ctx, grad_sum):
        ex = ctx.exchange
        if ex.pushes_grad(ctx.layer):
            ex.send_grad(ctx.layer, ctx.split.rows_grad(grad_sum, ctx.scale, ctx.mask))
        return None, None, None, None, None, None
