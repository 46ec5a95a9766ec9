"""A DistDGL script whose embedding tensor is tier-backed (``SNIDistTensor(..., storage=)``).

Each epoch every trainer writes its own rows of two tensors -- a plain DistTensor and a
tier-backed one -- then reads its halo rows and all its own rows of both, and records
whether they agree. Writes ``OUT/rank{r}.json``.
"""
import argparse
import json
import os

import dgl_sni  # noqa: F401
import dgl
import torch
import torch.distributed as dist

from dgl_sni import SNIDistTensor
from patches import kvstore_lazy_init
from storage_tier.shard import TierStorage

parser = argparse.ArgumentParser()
parser.add_argument("--ip_config", required=True)
parser.add_argument("--part_config", required=True)
parser.add_argument("--graph_name", default="graph")
parser.add_argument("--out", required=True)
parser.add_argument("--tier", required=True)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

kvstore_lazy_init.install()  # also runs in this script's server: the tier shard's shm stays untouched
dgl.distributed.initialize(args.ip_config)
dist.init_process_group("gloo")
rank = dist.get_rank()
g = dgl.distributed.DistGraph(args.graph_name, part_config=args.part_config)
pb = g.get_partition_book()
mine = dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool), pb, force_even=False)
lg = g.local_partition
halo = lg.ndata[dgl.NID][~lg.ndata["inner_node"].bool()]

storage = TierStorage(args.tier, cache_budget=4096, chunk_rows=16)  # most reads miss the cache
plain = dgl.distributed.DistTensor((g.num_nodes(), 4), torch.float32, name="plain_emb")
tiered = SNIDistTensor((g.num_nodes(), 4), torch.float32, name="tier_emb", storage=storage)
feats = g.ndata["features"]

same, sums = [], []
for epoch in range(args.epochs):
    rows = feats[mine][:, :4] * (epoch + 1) + rank
    plain[mine] = rows
    tiered[mine] = rows
    dist.barrier()
    ids = torch.cat([halo, mine[torch.randperm(mine.numel())]])
    a, b = plain[ids], tiered[ids]
    same.append(bool(torch.equal(a, b)))
    sums.append(float(b[: halo.numel()].sum()))
    dist.barrier()

foreign_error = ""
try:
    tiered[halo[:1]] = torch.ones(1, 4)
except ValueError as err:
    foreign_error = str(err)
stats = storage.stats()
with open(os.path.join(args.out, f"rank{rank}.json"), "w") as fh:
    json.dump(dict(rank=rank, halo=int(halo.numel()), same=same, halo_sums=sums,
                   shm_shard_zero=bool((tiered.local_partition == 0).all()),
                   shm_shard_nonzero_plain=bool((plain.local_partition != 0).any()),
                   foreign_error=foreign_error, storage=stats), fh)
dist.barrier()
storage.close()
dgl.distributed.exit_client()
