"""A model of DGL layers that a test hands to ``dgl_sni.train`` as a function."""
import torch.nn as nn
import torch.nn.functional as F
from dgl.nn import SAGEConv


class SAGE(nn.Module):
    def __init__(self, in_feats, hidden, num_classes):
        super().__init__()
        self.convs = nn.ModuleList([SAGEConv(in_feats, hidden, "mean"), SAGEConv(hidden, num_classes, "mean")])
        self.dropout = nn.Dropout(0.5)

    def forward(self, blocks, x):
        h = F.relu(self.convs[0](blocks[0], self.dropout(x)))
        return self.convs[1](blocks[1], self.dropout(h))


def build(in_feats, num_classes, cfg):
    return SAGE(in_feats, cfg.hidden, num_classes)
