"""A stock DistDGL trainer script, written the way DGL's own examples are.

It knows nothing about dgl-sni: no ``import dgl_sni`` (the installed start-up hook makes
``import dgl`` work with this torch, and ``DGL_SNI=1``/``DGL_SNI_CONFIG`` switch the plugin
on from outside). Each epoch it writes its own nodes' rows of a DistTensor and reads its
neighbours' rows (the per-layer exchange pattern); then it exercises the paths the
switch must keep exact: an evaluation-style buffer rewritten in chunks and read in chunks
(a pull handler of its own on another tensor; slices, duplicates and empty indices;
int32 ids with ``--int32``: stock DGL 2.1 cannot pull them), mini-batch reads of the
graph's features, and with ``--write-remote`` a write of another machine's row that this
machine then reads. What it saw goes to ``OUT/rank{r}.json``.
"""
import argparse
import json
import os

import dgl
import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("--ip_config", required=True)
parser.add_argument("--part_config", required=True)
parser.add_argument("--graph_name", default="graph")
parser.add_argument("--out", required=True)
parser.add_argument("--epochs", type=int, default=3)
parser.add_argument("--int32", action="store_true", help="also read with int32 ids (DGL 2.1 alone crashes)")
parser.add_argument("--write-remote", action="store_true",
                    help="rank 0 also writes one row of another machine before each read")
parser.add_argument("--write-static", action="store_true",
                    help="at the end, rank 0 rewrites input features of its own that rank 1 has read")
args = parser.parse_args()


def doubled_plus_one(data_store, name, local_ids):
    """A pull handler of the script's own (runs where the rows live)."""
    return data_store[name][local_ids] * 2 + 1


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
kv = dgl.distributed.kvstore.get_kvstore()


def checksum(rows):
    total = torch.tensor([float(rows.double().sum())], dtype=torch.float64)
    dist.all_reduce(total)
    return total.item()


sums, remote_marks = [], []
for epoch in range(args.epochs):
    emb[mine] = feats[mine][:, :4] * (epoch + 1)  # write own rows
    dist.barrier()
    if args.write_remote and rank == 0:  # then rank 0 writes one of rank 1's rows
        emb[halo[:1]] = torch.full((1, 4), 1000.0 + epoch)
    dist.barrier()
    remote = emb[halo]  # read neighbours' rows
    if args.write_remote and rank == 0:
        remote_marks.append(remote[0].tolist())
    sums.append(checksum(remote))
    dist.barrier()

# an evaluation buffer: rewritten in chunks every round, then read in chunks
half = mine.numel() // 2
both = torch.cat([halo, mine[:50]])
eval_sums = []
for rnd in range(3):
    ev = dgl.distributed.DistTensor((g.num_nodes(), 4), torch.float32, name="stock_eval", persistent=True)
    ev[mine[:half]] = feats[mine[:half]][:, :4] + rnd
    ev[mine[half:]] = feats[mine[half:]][:, :4] - rnd
    dist.barrier()
    eval_sums.append([checksum(ev[both[:100]]), checksum(ev[both[100:]])])
    dist.barrier()

# an evaluation buffer as DGL's example has one: created again (persistent) at each evaluation,
# written in one push and read in one pull, like the per-layer exchange
reused_sums = []
for rnd in range(6):
    ev1 = dgl.distributed.DistTensor((g.num_nodes(), 4), torch.float32, name="stock_eval1", persistent=True)
    ev1[mine] = feats[mine][:, :4] * (rnd + 2)
    dist.barrier()
    reused_sums.append(checksum(ev1[halo]))
    dist.barrier()

# a tensor with the script's own pull handler, read with local and remote rows mixed
custom = dgl.distributed.DistTensor((g.num_nodes(), 2), torch.float32, name="stock_custom")
kv.register_pull_handler("stock_custom", doubled_plus_one)
custom_sums = []
for epoch in range(3):
    custom[mine] = torch.ones(mine.numel(), 2) * (epoch + rank + 1)
    dist.barrier()
    custom_sums.append(checksum(custom[both]))
    dist.barrier()

# index forms: a slice, duplicates, nothing
shapes = dict(slice=list(emb[0:7].shape), empty=list(emb[torch.tensor([], dtype=torch.int64)].shape))
index_sums = dict(slice=checksum(emb[0:7]), dup=checksum(emb[torch.cat([halo, halo[:5], mine[:3]])]))
if args.int32:
    index_sums["int32"] = checksum(emb[halo.to(torch.int32)])
    index_sums["int64"] = checksum(emb[halo])

# mini-batch reads of the graph's input features: the same remote rows again and again
gen = torch.Generator().manual_seed(rank)
batch_sums = []
for step in range(4):
    batch = halo[torch.randint(0, halo.numel(), (64,), generator=gen)]
    batch_sums.append(checksum(feats[torch.cat([batch, mine[:16]])]))

# input features rewritten by their owner after another machine read them (rank 1 caches
# rank 0's rows), then read there again: the second read must see the write
feature_sum = float(feats[halo].sum())
static_rewrite = []
if args.write_static:
    rows0 = pb.partid2nids(0)[:20]
    first = feats[rows0] if rank == 1 else None
    dist.barrier()
    if rank == 0:
        feats[rows0] = torch.full((rows0.numel(), feats.shape[1]), 7777.0)
    dist.barrier()
    if rank == 1:
        static_rewrite = [float(first.sum()), float(feats[rows0].sum()),
                          float(feats[rows0[:5]].sum())]
    dist.barrier()

with open(os.path.join(args.out, f"rank{rank}.json"), "w") as fh:
    json.dump(dict(rank=rank, static_rewrite=static_rewrite, owned=int(mine.numel()), halo=halo.tolist(),
                   feature_sum=feature_sum, epoch_sums=sums, remote_marks=remote_marks,
                   eval_sums=eval_sums, reused_sums=reused_sums, custom_sums=custom_sums, shapes=shapes, index_sums=index_sums,
                   batch_sums=batch_sums), fh)
dist.barrier()
dgl.distributed.exit_client()
