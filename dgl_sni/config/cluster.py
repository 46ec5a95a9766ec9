"""The cluster part: how many machines, how the graph is split over them, how they are wired."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..allocator import ALLOCATORS
from ..cluster import validate_rate
from .options import option

METHODS = ("metis", "random", "switching")  # partition methods (dgl_sni.partition)
CLUSTER_MODES = ("auto", "netns", "loopback")


@dataclass
class ClusterConfig:
    """The emulated cluster: machines, partitioning, link shaping, ports and limits."""

    TITLE: ClassVar[str] = "cluster"

    workers: int = option(2, "emulated machines (1 trainer each)", common=True)
    partition: str = option("metis", "how the graph is split over the machines", choices=METHODS)
    bandwidth: str | None = option(None, "shape each machine's link, e.g. 1gbit", common=True)
    cluster: str = option("auto", "netns: one network+mount namespace per machine (root); loopback: "
                                  "1 machine on 127.0.0.1; auto: netns when root", choices=CLUSTER_MODES)
    port: int = option(30050, "DGL server port on every machine")
    master_port: int = option(29500, "torch.distributed store port on machine 0")
    threads: int | None = option(None, "OMP threads per trainer")
    allocator: str = option("auto", "malloc of the servers and trainers: tcmalloc (keeps freed pages, so "
                                    "epochs do not page-fault their tensors again), system; auto: tcmalloc "
                                    "when installed", choices=ALLOCATORS)
    timeout: float | None = option(None, "give up after this many seconds")
    run_dir: str | None = option(None, "keep the run's files (partitions, ip_config, logs) here")

    def validate(self) -> "ClusterConfig":
        """Raise ``ValueError`` naming the first bad setting (normalises ``bandwidth``)."""
        checks = [
            (self.workers >= 1, f"--workers must be at least 1, got {self.workers}"),
            (self.partition in METHODS, f"--partition must be one of {', '.join(METHODS)}"),
            (self.cluster in CLUSTER_MODES, "--cluster must be auto, netns or loopback"),
            (self.allocator in ALLOCATORS, f"--allocator must be one of {', '.join(ALLOCATORS)}"),
            (self.timeout is None or self.timeout > 0, "--timeout must be positive"),
            (self.threads is None or self.threads >= 1, "--threads must be at least 1"),
            (self.port != self.master_port,
             f"--port and --master-port are both {self.port}: the DGL server and the "
             "torch.distributed store would collide on machine 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if self.bandwidth:
            self.bandwidth = validate_rate(self.bandwidth)
        return self
