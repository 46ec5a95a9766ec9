"""Collectives among trainers: all-reduce, barrier, gather of small objects.

:class:`LocalCollective` is the single-process stand-in (world size 1);
:class:`GlooCollective` wraps ``torch.distributed`` with the gloo backend, which
DistDGL trainers use next to DGL's RPC. Waiting time is charged to ``sync_s``.
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from .metrics import Counters


class LocalCollective:
    """World of one: every collective is the identity."""

    rank = 0
    world_size = 1

    def __init__(self, counters: Counters | None = None):
        self.counters = counters or Counters()

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def barrier(self) -> None:
        return None

    def all_gather_object(self, obj) -> list:
        return [obj]

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        return tensor


class GlooCollective(LocalCollective):
    """torch.distributed (gloo) among the trainers of a DistDGL job."""

    def __init__(self, counters: Counters | None = None):
        super().__init__(counters)
        if not dist.is_initialized():
            dist.init_process_group("gloo")
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        with self.counters.timing("sync_s"):
            dist.all_reduce(tensor)
        return tensor

    def barrier(self) -> None:
        with self.counters.timing("sync_s"):
            dist.barrier()

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        with self.counters.timing("sync_s"):
            dist.broadcast(tensor, src)
        return tensor

    def all_gather_object(self, obj) -> list:
        out = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out
