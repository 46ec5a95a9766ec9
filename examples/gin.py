"""GIN (Xu et al.) from DGL's ``GINConv``: sum aggregation, a two-layer MLP per layer.

``dgl-sni train --model-file examples/gin.py:build``.
"""
import torch.nn as nn
import torch.nn.functional as F
from dgl.nn import GINConv


def mlp(d_in, d_out):
    return nn.Sequential(nn.Linear(d_in, d_out), nn.ReLU(), nn.Linear(d_out, d_out))


class GIN(nn.Module):
    def __init__(self, in_feats, hidden, num_classes, num_layers, dropout):
        super().__init__()
        dims = [in_feats] + [hidden] * (num_layers - 1)
        self.convs = nn.ModuleList(GINConv(mlp(dims[i], hidden), "sum", learn_eps=True)
                                   for i in range(num_layers - 1))
        self.norms = nn.ModuleList(nn.LayerNorm(hidden) for _ in range(num_layers - 1))
        self.out = GINConv(nn.Linear(dims[-1], num_classes), "mean")
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for conv, norm, block in zip(self.convs, self.norms, blocks):
            h = F.relu(norm(conv(block, self.dropout(h))))
        return self.out(blocks[-1], self.dropout(h))


def build(in_feats, num_classes, cfg):
    return GIN(in_feats, cfg.hidden, num_classes, cfg.layers, cfg.dropout)
