"""A stock DistDGL script in standalone mode (one process, no servers: DGL_DIST_MODE=standalone).

No ``import dgl_sni``: with ``DGL_SNI=1`` the switch must leave this mode alone (nothing can
be stale). Writes what it read to ``OUT``.
"""
import argparse
import json

import dgl
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--part_config", required=True)
parser.add_argument("--ip_config", required=True)
parser.add_argument("--out", required=True)
args = parser.parse_args()

dgl.distributed.initialize(args.ip_config)
g = dgl.distributed.DistGraph("graph", part_config=args.part_config)
emb = dgl.distributed.DistTensor((g.num_nodes(), 3), torch.float32, name="sa_emb")
ids = torch.arange(g.num_nodes())
sums = []
for epoch in range(4):
    emb[ids] = g.ndata["features"][ids][:, :3] * (epoch + 1)
    sums.append(float(emb[ids[::3]].sum()))
feats = g.ndata["features"][torch.tensor([5, 1, 5, 0], dtype=torch.int32)]
with open(args.out, "w") as fh:
    json.dump(dict(sums=sums, feats=feats.tolist(), standalone=type(emb.kvstore).__module__), fh)
dgl.distributed.exit_client()
