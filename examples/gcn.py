"""DGL's full-graph GCN example, ported: ``GraphConv`` layers, dropout before every layer but the first.

The model of DGL's ``examples/pytorch/gcn/train.py`` with ``forward(blocks, x)`` in place of
``forward(g, features)`` (docs/models.md); ``--layers`` layers. Also the single-process floor of
the results report: ``dgl-sni train --workers 1 --model-file examples/gcn.py``.
"""
import torch.nn as nn
import torch.nn.functional as F
from dgl.nn import GraphConv


class GCN(nn.Module):
    def __init__(self, in_size, hid_size, out_size, num_layers, dropout):
        super().__init__()
        dims = [in_size] + [hid_size] * (num_layers - 1) + [out_size]
        self.layers = nn.ModuleList(GraphConv(dims[i], dims[i + 1], activation=F.relu if i < num_layers - 1 else None)
                                    for i in range(num_layers))
        self.dropout = nn.Dropout(dropout)

    def forward(self, blocks, features):
        h = features
        for i, (layer, block) in enumerate(zip(self.layers, blocks)):
            if i != 0:
                h = self.dropout(h)
            h = layer(block, h)
        return h


def build(in_feats, num_classes, cfg):
    return GCN(in_feats, cfg.hidden, num_classes, cfg.layers, cfg.dropout)
