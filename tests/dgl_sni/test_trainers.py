"""The in-memory trainer in one process, against plain torch written from the definitions.

One training step is cross entropy averaged over the training nodes, its gradient and one Adam
step (the weights after it equal a plain torch loop's, from the same initial weights and the
same model output); evaluation counts argmax hits per split; checkpoints restore weights,
optimiser state and step counters, so training goes on as if never stopped."""
import copy

import pytest
import torch
import torch.nn.functional as F

from dgl_sni.data import synthetic
from dgl_sni.reference import whole_graph_view
from dgl_sni.trainers import FullGraphTrainer, ModelConfig


@pytest.fixture(scope="module")
def data():
    return synthetic(num_nodes=300, avg_degree=5, num_classes=3, feat_dim=8, seed=4)


def trainer(data, model="gcn", **kw):
    cfg = ModelConfig(model=model, layers=2, hidden=6, dropout=0.0, lr=0.05, weight_decay=1e-3, **kw)
    view = whole_graph_view(data, model)
    return FullGraphTrainer(cfg, view, data.feat_dim, data.num_classes), view


@pytest.mark.parametrize("model", ["gcn", "sage", "gat"])
def test_a_training_step_is_mean_cross_entropy_and_one_adam_step(data, model):
    t, view = trainer(data, model)
    plain = copy.deepcopy(t.model)
    opt = torch.optim.Adam(plain.parameters(), lr=0.05, weight_decay=1e-3)
    for epoch in range(3):
        mask = view.train_mask
        logits = plain(view.block, view.x_src)
        loss = F.cross_entropy(logits[mask], view.labels[mask])  # the mean over the training nodes
        opt.zero_grad()
        loss.backward()
        opt.step()
        rec = t.train_epoch(epoch)
        assert rec["loss"] == pytest.approx(loss.item(), rel=1e-5)
        acc = (logits[mask].argmax(1) == view.labels[mask]).float().mean().item()
        assert rec["train_acc"] == pytest.approx(acc)
    for p, q in zip(t.model.parameters(), plain.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
    assert t.step == 3


def test_evaluation_counts_argmax_hits_per_split(data):
    t, view = trainer(data)
    t.train_epoch(0)
    acc = t.evaluate()
    with torch.no_grad():
        pred = t.model.eval()(view.block, view.x_src).argmax(1)
    for key, mask in (("eval_train_acc", view.train_mask), ("val_acc", view.val_mask), ("test_acc", view.test_mask)):
        assert acc[key] == pytest.approx((pred[mask] == view.labels[mask]).float().mean().item())


def test_a_checkpoint_resumes_training_as_if_never_stopped(data, tmp_path):
    straight, _ = trainer(data)
    for epoch in range(4):
        straight.train_epoch(epoch)
    first, _ = trainer(data)
    for epoch in range(2):
        first.train_epoch(epoch)
    first.save_checkpoint(str(tmp_path / "ckpt.pt"), epoch=1)
    resumed, _ = trainer(data, seed=99)  # other initial weights: the checkpoint replaces them
    resumed.load_checkpoint(str(tmp_path / "ckpt.pt"))
    for epoch in range(2, 4):
        resumed.train_epoch(epoch)
    for p, q in zip(resumed.model.parameters(), straight.model.parameters()):
        torch.testing.assert_close(p, q)
    assert resumed.step == straight.step == 4


def test_an_empty_training_split_is_refused(data):
    view = whole_graph_view(data, "gcn")
    view.train_mask = torch.zeros_like(view.train_mask)
    with pytest.raises(ValueError, match="no training node"):
        FullGraphTrainer(ModelConfig(layers=2), view, data.feat_dim, data.num_classes)
