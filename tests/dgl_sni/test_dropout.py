"""Keyed dropout: right keep rate, deterministic per key, same op forward and backward."""
import numpy as np
import pytest
import torch

from dgl_sni.dropout import derive_seed, keyed_dropout


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_keep_rate_and_scaling(p):
    x = torch.ones(20000, 33)
    y = keyed_dropout(x, torch.arange(20000), seed=3, p=p)
    kept = y != 0
    assert abs(kept.float().mean().item() - (1 - p)) < 0.01
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
    # no column or row pattern: every column keeps about the same share
    assert (kept.float().mean(0) - (1 - p)).abs().max() < 0.03


def test_mask_depends_on_key_not_position():
    x = torch.randn(1000, 16)
    keys = torch.randperm(1000)
    y = keyed_dropout(x, keys, seed=9, p=0.5)
    perm = torch.randperm(1000)
    y2 = keyed_dropout(x[perm], keys[perm], seed=9, p=0.5)
    assert torch.equal(y[perm], y2)
    assert not torch.equal(y, keyed_dropout(x, keys, seed=10, p=0.5))


def test_gradient_is_the_same_mask():
    x = torch.randn(500, 8, requires_grad=True)
    keys = torch.arange(500) * 7
    y = keyed_dropout(x, keys, seed=1, p=0.3)
    y.sum().backward()
    assert torch.equal(x.grad != 0, y != 0) or torch.equal(x.grad != 0, (y != 0) | (x == 0))
    assert torch.allclose(x.grad[x.grad != 0], torch.tensor(1 / 0.7))


def test_eval_and_zero_rate_are_identity():
    x = torch.randn(10, 4)
    assert keyed_dropout(x, torch.arange(10), 1, 0.5, training=False) is x
    assert keyed_dropout(x, torch.arange(10), 1, 0.0) is x


def test_bad_inputs():
    with pytest.raises(ValueError, match="one key per row"):
        keyed_dropout(torch.ones(4, 2), torch.arange(3), 0, 0.5)
    with pytest.raises(TypeError, match="float32"):
        keyed_dropout(torch.ones(4, 2, dtype=torch.float64), torch.arange(4), 0, 0.5)


def test_derive_seed_mixes_every_part():
    seeds = {derive_seed(0, s, l, t) for s in range(20) for l in range(4) for t in (1, 2)}
    assert len(seeds) == 160
    assert all(0 <= s < 2**64 for s in seeds)


def test_dropout_stream_keeps_the_weights_and_draws_other_masks():
    """``--dropout-stream``: stream 0 is the seed's own masks; another stream starts from the
    same weights, draws different masks, and draws them the same way every time."""
    from dgl_sni.data import synthetic
    from dgl_sni.reference import train_reference
    from dgl_sni.trainers import ModelConfig

    data = synthetic(num_nodes=600, avg_degree=6, feat_dim=8, seed=1)

    def run(stream, dropout=0.5):
        cfg = ModelConfig(model="gcn", layers=2, hidden=8, dropout=dropout, seed=4, dropout_stream=stream)
        _, records = train_reference(data, cfg, 2, evaluate=False)
        return cfg, [r["loss"] for r in records]

    cfg0, own = run(0)
    assert cfg0.dropout_seed == 4
    cfg1, other = run(1)
    assert cfg1.dropout_seed != 4
    assert run(1)[1] == other  # deterministic
    assert other[0] != own[0]  # other masks: another first loss
    assert run(1, dropout=0.0)[1] == run(0, dropout=0.0)[1]  # the same weights: equal without dropout
    with pytest.raises(ValueError, match="--dropout-stream must be >= 0"):
        ModelConfig(dropout_stream=-1).validate()
