"""One trainer's view of its partition: the block, input rows, labels and masks it trains on.

:func:`build_local_view` reads ``g.local_partition`` of a ``DistGraph`` (the worker calls it
once per block shape); :class:`UnusablePartitionError` names what is missing when the
partitions cannot be trained on.
"""
from __future__ import annotations

import numpy as np
import torch

import dgl_sni  # noqa: F401
import dgl

from storage_tier.block import MODELS_WITH_SELF_LOOPS, build_block

from ..metrics import Counters
from ..partition import NODE_FIELDS
from .base import LocalView


class UnusablePartitionError(ValueError):
    """The partitions cannot be trained on (missing fields, missing halo edges)."""


def build_local_view(g, model: str, counters: Counters, orig_nids: np.ndarray | None = None):
    """This trainer's block, inputs and labels from ``g.local_partition``.

    Returns ``(view, owned_gids, halo_gids)``. Owned nodes come first in global-id
    order (so they map to the local shards by a slice), halo nodes after them, also in
    global-id order (so rows of one owner are contiguous). Halo input features and
    out-degrees are pulled once here and charged to ``counters``. ``orig_nids`` maps
    DGL's ids to the dataset's (dropout keys); without it DGL's ids are the keys.
    """
    missing = [f for f in NODE_FIELDS if f not in g.ndata]
    if missing:
        raise UnusablePartitionError(
            f"the partitions lack node field(s) {', '.join(missing)}; make them with "
            "'dgl-sni partition' (or add these ndata before dgl.distributed.partition_graph)")
    lg = g.local_partition
    nid = lg.ndata[dgl.NID]
    inner = lg.ndata["inner_node"].bool()
    inner_lids = torch.nonzero(inner).flatten()
    halo_lids = torch.nonzero(~inner).flatten()
    inner_lids = inner_lids[torch.argsort(nid[inner_lids])]
    halo_lids = halo_lids[torch.argsort(nid[halo_lids])]
    owned_gids, halo_gids = nid[inner_lids], nid[halo_lids]
    n_owned, n_halo = owned_gids.numel(), halo_gids.numel()

    pos = torch.empty(lg.num_nodes(), dtype=torch.int64)
    pos[inner_lids] = torch.arange(n_owned)
    pos[halo_lids] = n_owned + torch.arange(n_halo)
    u, v = lg.edges(form="uv", order="eid")
    keep = inner[v]
    src, dst = pos[u[keep]].numpy(), pos[v[keep]].numpy()

    policy = g.get_node_partition_policy("_N")
    local = policy.to_local(owned_gids)

    def owned(name):
        return g.ndata[name].local_partition[local]

    def halo(name):
        if n_halo == 0:
            return owned(name)[:0]
        with counters.timing("comm_s"):
            rows = g.ndata[name][halo_gids]
        counters.bytes_recv += rows.numel() * rows.element_size()
        counters.add("pulled_rows", n_halo)
        return rows

    in_deg = owned("in_deg").numpy()
    local_in = np.bincount(dst, minlength=n_owned)
    if not np.array_equal(local_in, in_deg.astype(np.int64)):
        raise UnusablePartitionError(
            "the local partition does not hold every in-edge of its nodes; partition with one "
            "halo hop (num_hops=1), as 'dgl-sni partition' does")
    out_deg = torch.cat((owned("out_deg"), halo("out_deg"))).numpy()
    src_gids = torch.cat((owned_gids, halo_gids)).numpy()
    keys = orig_nids[src_gids] if orig_nids is not None else src_gids
    block = build_block(src, dst, n_owned + n_halo, n_owned, out_deg, in_deg,
                        self_loops=model in MODELS_WITH_SELF_LOOPS, src_keys=keys)
    x_src = torch.cat((owned("features"), halo("features")))
    view = LocalView(block=block, x_src=x_src, labels=owned("labels").long(),
                     train_mask=owned("train_mask").bool(), val_mask=owned("val_mask").bool(),
                     test_mask=owned("test_mask").bool())
    return view, owned_gids, halo_gids
