"""Which training steps exchange halo embeddings for real."""
from __future__ import annotations


class SyncSchedule:
    """``warmup`` steps always sync; afterwards every ``interval``-th step syncs.

    Steps count from 0; step ``warmup + k * interval`` syncs for every ``k >= 0``, so
    ``interval = 1`` syncs every step (exact training).
    """

    def __init__(self, warmup: int, interval: int, enabled: bool = True):
        self.warmup, self.interval, self.enabled = warmup, interval, enabled

    def is_sync(self, step: int) -> bool:
        if not self.enabled or step < self.warmup:
            return True
        return (step - self.warmup) % self.interval == 0

    def mode(self, step: int) -> str:
        return "sync" if self.is_sync(step) else "stale"
