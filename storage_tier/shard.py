"""DistTensor shards that live in the storage tier (remote pulls served from tier files).

When trainers page their activations through the tier, the per-layer embedding
``DistTensor`` of the halo exchange needs no copy of the owned rows in shared memory:
the tier already wrote them (bypass) as one file per sub-partition unit. A
:class:`TierShardLayout` records, for one worker and one layer, which unit file and row
holds each of its owned rows; :class:`TierPullHandler` is the DGL pull handler that the
machine's server runs for remote pulls of that tensor: it loads its machine's layout
and reads each needed unit file once (checksum verified), gathering the rows. The
shared-memory shard itself stays untouched (zero-initialised lazily, see
``patches.kvstore_lazy_init``), so it holds no memory.

Paths follow one rule on every machine -- ``<root>/worker<machine>/layout_l<layer>.npz``
-- so one handler object, registered by every trainer, serves every server.
"""
from __future__ import annotations

import os

import numpy as np
import torch

from .io_engine import read_unit

LAYOUT = "layout_l{layer}.npz"


def layout_path(root: str, machine: int, layer: int) -> str:
    return os.path.join(os.path.abspath(root), f"worker{machine}", LAYOUT.format(layer=layer))


class TierShardLayout:
    """Where each owned row of one layer lives in a trainer's tier files."""

    @staticmethod
    def write(path: str, unit_paths: list, part: np.ndarray, pos: np.ndarray) -> None:
        """``part[i]``/``pos[i]``: unit and row of the shard's local row ``i``."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = f"{path}.tmp.npz"
        np.savez(tmp, part=part.astype(np.int32), pos=pos.astype(np.int64),
                 paths=np.array(unit_paths, dtype=object), allow_pickle=True)
        os.replace(tmp, path)

    def __init__(self, path: str):
        with np.load(path, allow_pickle=True) as f:
            self.part, self.pos, self.paths = f["part"], f["pos"], list(f["paths"])
        self.mtime = os.stat(path).st_mtime_ns

    def gather(self, local: np.ndarray) -> np.ndarray:
        """Rows at local offsets ``local``, reading each touched unit once."""
        part, pos = self.part[local], self.pos[local]
        out = None
        for p in np.unique(part):
            sel = np.flatnonzero(part == p)
            unit = read_unit(self.paths[int(p)])
            if out is None:
                out = np.empty((local.shape[0],) + unit.shape[1:], dtype=unit.dtype)
            out[sel] = unit[pos[sel]]
        return out if out is not None else np.empty((0,), np.float32)


class TierPullHandler:
    """DGL pull handler reading a tier-backed shard from its owner's tier files.

    Picklable (DGL sends it to every server); runs in the server of the machine that
    owns the rows, and in a trainer for its own local rows.
    """

    def __init__(self, root: str, layer: int, dim: int):
        self.root, self.layer, self.dim = os.path.abspath(root), layer, dim
        self._layout = None

    def __getstate__(self):
        return dict(root=self.root, layer=self.layer, dim=self.dim, _layout=None)

    def _machine(self) -> int:
        if os.environ.get("DGL_ROLE") == "server":
            return int(os.environ["DGL_SERVER_ID"])  # one server per machine
        from dgl.distributed.kvstore import get_kvstore
        return get_kvstore().machine_id

    def layout(self) -> TierShardLayout:
        path = layout_path(self.root, self._machine(), self.layer)
        if self._layout is None or os.stat(path).st_mtime_ns != self._layout.mtime:
            self._layout = TierShardLayout(path)  # a new run of a sweep rewrites it
        return self._layout

    def __call__(self, data_store, name, local_offsets):
        local = np.asarray(local_offsets, dtype=np.int64)
        if local.size == 0:
            return torch.zeros((0, self.dim), dtype=torch.float32)
        return torch.from_numpy(self.layout().gather(local))
