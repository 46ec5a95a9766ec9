"""The storage-tier part: activations paged through host memory and SSD."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from storage_tier.sizes import parse_bytes

from .options import option


@dataclass
class TierConfig:
    """Where the storage tier keeps its files and how much memory it may use."""

    TITLE: ClassVar[str] = "storage tier (partitions larger than memory)"

    storage_tier: str | None = option(None, "train through the storage tier, with its files under this folder",
                                      common=True)
    device_mem_budget: str = option("1G", "compute memory for one sub-partition's working set "
                                          "(e.g. 512M, 2G); sets P", needs=("--storage-tier", lambda c: bool(c.storage_tier)))
    host_cache_budget: str = option("2G", "host memory for cached activations and gradients (e.g. 4G)",
                                    needs=("--storage-tier", lambda c: bool(c.storage_tier)))
    subparts: int = option(0, "sub-partitions per worker (0: derive from --device-mem-budget)",
                           needs=("--storage-tier", lambda c: bool(c.storage_tier)))

    def validate(self) -> "TierConfig":
        """Raise ``ValueError`` naming the first bad setting."""
        for flag, value in (("--device-mem-budget", self.device_mem_budget),
                            ("--host-cache-budget", self.host_cache_budget)):
            if parse_bytes(value, flag) <= 0:
                raise ValueError(f"{flag} must be positive")
        if self.subparts < 0:
            raise ValueError(f"--subparts must be >= 0 (0: derive from --device-mem-budget), got {self.subparts}")
        return self
