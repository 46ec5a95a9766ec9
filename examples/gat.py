"""GAT from DGL's ``GATConv``: ``--heads`` heads in hidden layers, one averaged head out.

``dgl-sni train --model-file examples/gat.py:build --heads 2``.
"""
import torch.nn as nn
import torch.nn.functional as F
from dgl.nn import GATConv


class GAT(nn.Module):
    def __init__(self, in_feats, hidden, num_classes, num_layers, heads, dropout):
        super().__init__()
        dims = [in_feats] + [hidden * heads] * (num_layers - 1)
        self.convs = nn.ModuleList(GATConv(dims[i], hidden, heads, feat_drop=dropout, attn_drop=dropout)
                                   for i in range(num_layers - 1))
        self.out = GATConv(dims[-1], num_classes, 1, feat_drop=dropout, attn_drop=dropout)

    def forward(self, blocks, x):
        h = x
        for conv, block in zip(self.convs, blocks):
            h = F.elu(conv(block, h).flatten(1))  # [nodes, heads * hidden]
        return self.out(blocks[-1], h).mean(1)


def build(in_feats, num_classes, cfg):
    return GAT(in_feats, cfg.hidden, num_classes, cfg.layers, cfg.heads, cfg.dropout)
