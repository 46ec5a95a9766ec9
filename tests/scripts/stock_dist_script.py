"""A stock DistDGL trainer script, written the way DGL's own examples are.

It knows nothing about dgl-sni except the optional environment switch that later
issues add. It reads node features through ``g.ndata``, creates a DistTensor, writes
its own nodes' rows, reads its neighbours' rows, and all-reduces a checksum, then
writes what it saw to ``OUT/rank{r}.json``.
"""
import argparse
import json
import os

import dgl_sni  # noqa: F401  (only for the DGL shims this torch needs)
import dgl
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--ip_config", required=True)
parser.add_argument("--part_config", required=True)
parser.add_argument("--graph_name", default="graph")
parser.add_argument("--out", required=True)
parser.add_argument("--epochs", type=int, default=3)
args = parser.parse_args()

dgl.distributed.initialize(args.ip_config)
dist.init_process_group("gloo")
rank = dist.get_rank()
g = dgl.distributed.DistGraph(args.graph_name, part_config=args.part_config)
pb = g.get_partition_book()
mine = dgl.distributed.node_split(torch.ones(g.num_nodes(), dtype=torch.bool), pb, force_even=False)

feats = g.ndata["features"]
emb = dgl.distributed.DistTensor((g.num_nodes(), 4), torch.float32, name="stock_emb")
lg = g.local_partition
halo = lg.ndata[dgl.NID][~lg.ndata["inner_node"].bool()]

sums = []
for epoch in range(args.epochs):
    emb[mine] = feats[mine][:, :4] * (epoch + 1)  # write own rows
    dist.barrier()
    remote = emb[halo]  # read neighbours' rows
    total = torch.tensor([float(remote.sum())], dtype=torch.float64)
    dist.all_reduce(total)
    sums.append(total.item())
    dist.barrier()

with open(os.path.join(args.out, f"rank{rank}.json"), "w") as fh:
    json.dump(dict(rank=rank, owned=int(mine.numel()), halo=halo.tolist(),
                   feature_sum=float(feats[halo].sum()), epoch_sums=sums), fh)
dist.barrier()
dgl.distributed.exit_client()
