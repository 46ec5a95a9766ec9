"""What every full-graph trainer shares: settings, the worker's view, the base class,
checkpoints (``--checkpoint-dir``) and resuming from them (``--resume``).

:class:`TrainerBase` is the base of :class:`~dgl_sni.trainers.full_graph.FullGraphTrainer`
(in memory) and :class:`~dgl_sni.trainers.tier.TierTrainer` (through the storage tier).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from storage_tier.block import GraphBlock
from ..config import ModelConfig  # noqa: F401  (re-exported by dgl_sni.trainers)

# what a checkpoint holds: 1 = epoch, model, optimizer; 2 adds the trainer's step counters
# and the model settings (a format-1 file is still loaded: one step per epoch)
CHECKPOINT_FORMAT = 2
_COUNT_SPLIT = 1 << 12  # a correct count is all-reduced as count // this and count % this (float32 sums stay exact)
_MODEL_KEYS = ("model", "model_file", "layers", "hidden", "heads", "dropout", "lr", "weight_decay", "seed")


def read_checkpoint(path: str) -> dict:
    """The checkpoint in ``path`` as a dict with ``epoch``, ``step``, ``epoch_step``, ``model``,
    ``optimizer`` (format 1 files get ``step = epoch + 1``); ``ValueError`` if it is none."""
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise ValueError(f"checkpoint {path} does not exist") from None
    except Exception as err:  # noqa: BLE001 -- truncated, not a torch file, foreign objects
        raise ValueError(f"checkpoint {path} cannot be read ({type(err).__name__}: {err})") from None
    if not isinstance(ckpt, dict) or not {"epoch", "model", "optimizer"} <= set(ckpt):
        raise ValueError(f"{path} is not a dgl-sni checkpoint (no epoch, model and optimizer in it)")
    fmt = ckpt.get("format", 1)
    if fmt > CHECKPOINT_FORMAT:
        raise ValueError(f"checkpoint {path} has format {fmt}, newer than this dgl-sni reads "
                         f"({CHECKPOINT_FORMAT})")
    ckpt = dict(ckpt)
    ckpt.setdefault("step", int(ckpt["epoch"]) + 1)  # format 1: one optimisation step per epoch
    ckpt.setdefault("epoch_step", ckpt["step"] - 1)
    return ckpt


def _state_mismatch(saved: dict, here: dict) -> list:
    """What differs between two state dicts' names and shapes, in words."""
    problems = []
    missing = [k for k in here if k not in saved]
    extra = [k for k in saved if k not in here]
    if missing:
        problems.append(f"missing from the checkpoint: {', '.join(missing)}")
    if extra:
        problems.append(f"only in the checkpoint: {', '.join(extra)}")
    for k in here:
        if k in saved and tuple(saved[k].shape) != tuple(here[k].shape):
            problems.append(f"{k} is {list(saved[k].shape)} in the checkpoint, {list(here[k].shape)} in this run")
    return problems


@dataclass
class LocalView:
    """What one worker trains on: its block, input rows, labels and split masks (owned rows)."""

    block: GraphBlock
    x_src: torch.Tensor
    labels: torch.Tensor
    train_mask: torch.Tensor
    val_mask: torch.Tensor
    test_mask: torch.Tensor


class TrainerBase:
    """What every full-graph trainer shares: gradient all-reduce, the exchange's step
    announcements, accuracy bookkeeping and checkpoints.

    Subclasses (:class:`FullGraphTrainer`, :class:`~dgl_sni.trainers.tier.TierTrainer`) set
    ``cfg`` (their :class:`ModelConfig`), ``model``, ``optimizer``, ``params``, ``collective``,
    ``exchange``, ``global_counts``, ``step`` and ``epoch_step``.
    """

    def _all_reduce_step(self, loss: float, correct: int) -> tuple[float, float]:
        """Sum the weight gradients over workers, and with them the step's loss and correct
        count and the exchange's :meth:`~storage_tier.protocols.HaloExchange.step_flags`,
        in the one flat float32 all-reduce of every training step; the flags' sums go back
        to the exchange (so a stale step needs no collective of its own to agree on its
        mode). Returns the global loss and correct count. With a float64 all-reduce of the
        stats after the optimiser step and one on the agents at each stale step, Cora's stale
        epochs took 26 ms; with this one, 22 ms (medians, 4 workers at 1 Gbit/s on 2 cores).
        The count travels as two parts below 2^24 each, so its sum is exact; the loss sums in
        float32."""
        flags = tuple(self.exchange.step_flags())
        high, low = divmod(int(correct), _COUNT_SPLIT)
        tail = torch.tensor([loss, high, low, *flags], dtype=torch.float32)
        if self.collective.world_size > 1:
            grads = [p.grad.reshape(-1) for p in self.params]
            flat = torch.cat(grads + [tail])
            self.collective.all_reduce(flat)
            offset = 0
            for p in self.params:
                n = p.numel()
                p.grad.copy_(flat[offset: offset + n].view_as(p))
                offset += n
            tail = flat[offset:]
        total = tail.tolist()
        if flags:
            self.exchange.summed_flags(tuple(total[3:]))
        return total[0], total[1] * _COUNT_SPLIT + total[2]

    def _begin(self, step: int, training: bool) -> str:
        """Tell the exchange which step a forward pass belongs to; returns its mode."""
        return self.exchange.begin_step(step, training)

    def _accuracies(self, correct: torch.Tensor) -> dict:
        """Train/val/test accuracy from this worker's correct counts (float64 [3])."""
        self.collective.all_reduce(correct)
        acc = (correct / self.global_counts.clamp(min=1)).tolist()
        return dict(eval_train_acc=acc[0], val_acc=acc[1], test_acc=acc[2])

    def save_checkpoint(self, path: str, epoch: int) -> None:
        """Write weights, optimiser state and step counters atomically (the previous file stays
        intact on error); :meth:`load_checkpoint` continues from it."""
        tmp = f"{path}.tmp"
        settings = {k: getattr(self.cfg, k) for k in _MODEL_KEYS}
        torch.save(dict(format=CHECKPOINT_FORMAT, epoch=epoch, step=self.step, epoch_step=self.epoch_step,
                        model_config=settings, model=self.model.state_dict(),
                        optimizer=self.optimizer.state_dict()), tmp)
        os.replace(tmp, path)

    def load_checkpoint(self, path: str) -> int:
        """Continue from the checkpoint in ``path``: weights, optimiser state (Adam moments and
        step) and the step counters (they key the dropout masks, so training goes on as if
        never stopped). The optimiser's settings (lr, weight decay) stay this trainer's.
        Returns the checkpoint's epoch; a ``ValueError`` names what does not fit."""
        ckpt = read_checkpoint(path)
        here = self.model.state_dict()
        problems = _state_mismatch(ckpt["model"], here)
        if problems:
            saved_cfg = ckpt.get("model_config", {})
            differ = [f"--{k.replace('_', '-')} {saved_cfg[k]} in the checkpoint, {getattr(self.cfg, k)} in this run"
                      for k in saved_cfg if k in _MODEL_KEYS and saved_cfg[k] != getattr(self.cfg, k)]
            raise ValueError(f"checkpoint {path} was written for a different model: {'; '.join(problems)}"
                             + (f" (settings: {'; '.join(differ)})" if differ else
                                " (check --model, --layers, --hidden, --heads, --storage-tier)"))
        kept = [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]
        try:
            self.optimizer.load_state_dict(ckpt["optimizer"])
        except ValueError as err:
            raise ValueError(f"checkpoint {path}: its optimizer state does not fit this model ({err})") from None
        for group, settings in zip(self.optimizer.param_groups, kept):
            group.update(settings)
        self.model.load_state_dict(ckpt["model"])
        self.step, self.epoch_step = int(ckpt["step"]), int(ckpt["epoch_step"])
        return int(ckpt["epoch"])

    def state(self) -> dict:
        """Current weights by parameter name (for comparisons and checkpoints)."""
        return {k: v.detach().clone() for k, v in self.model.state_dict().items()}
