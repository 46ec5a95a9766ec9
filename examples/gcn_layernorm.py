"""GCN with LayerNorm between layers and residual connections, from DGL's ``GraphConv``.

Written as a DGL mini-batch model (``forward(blocks, x)``); train it full-graph across
machines with ``dgl-sni train --model-file examples/gcn_layernorm.py:build``.
"""
import torch.nn as nn
import torch.nn.functional as F
from dgl.nn import GraphConv


class GCNLayerNorm(nn.Module):
    def __init__(self, in_feats, hidden, num_classes, num_layers, dropout):
        super().__init__()
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        self.convs = nn.ModuleList(GraphConv(dims[i], dims[i + 1]) for i in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for d in dims[1:-1])
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            out = conv(block, self.dropout(h))
            if i < len(self.convs) - 1:
                out = F.relu(self.norms[i](out))
                if out.shape[1] == h.shape[1]:
                    out = out + h[: block.num_dst_nodes()]  # residual: the destinations' own rows
            h = out
        return h


def build(in_feats, num_classes, cfg):
    return GCNLayerNorm(in_feats, cfg.hidden, num_classes, cfg.layers, cfg.dropout)
