"""GraphSAGE (mean aggregation) with LayerNorm between layers, from DGL's ``SAGEConv``.

The model PipeGCN and BNS-GCN train by default (their ``--norm layer``), written as a DGL
mini-batch model (``forward(blocks, x)``); train it full-graph across machines with
``dgl-sni train --model-file examples/sage_layernorm.py:build``.
"""
import torch.nn as nn
import torch.nn.functional as F
from dgl.nn import SAGEConv


class SAGELayerNorm(nn.Module):
    def __init__(self, in_feats, hidden, num_classes, num_layers, dropout):
        super().__init__()
        dims = [in_feats] + [hidden] * (num_layers - 1) + [num_classes]
        self.convs = nn.ModuleList(SAGEConv(dims[i], dims[i + 1], "mean") for i in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d) for d in dims[1:-1])
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, x):
        h = x
        for i, (conv, block) in enumerate(zip(self.convs, blocks)):
            h = conv(block, self.dropout(h))
            if i < len(self.convs) - 1:
                h = F.relu(self.norms[i](h))
        return h


def build(in_feats, num_classes, cfg):
    return SAGELayerNorm(in_feats, cfg.hidden, num_classes, cfg.layers, cfg.dropout)
