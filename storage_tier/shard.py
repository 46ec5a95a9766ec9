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

Paths follow one rule on every machine -- ``<root>/worker<machine>/layout_<tag>.npz``
-- so one handler object, registered by every trainer, serves every server.

:class:`TierStorage` is the same mechanism for any script's tensor:
``SNIDistTensor(shape, dtype, name=..., storage=TierStorage(root))`` keeps the local
shard in chunk units on storage, paged through a host cache (:class:`TierShard`).
"""
from __future__ import annotations

import os
import re

import numpy as np
import torch

from .host_cache import HostCache
from .io import IOEngine, read_unit
from .sizes import parse_bytes

LAYOUT = "layout_{tag}.npz"
_LOCAL_SHARDS: dict = {}  # (root, tag) -> TierShard owned by this trainer process


def layer_tag(layer: int) -> str:
    """Tag of the trainer's per-layer embedding tensor ``layer`` (tier-backed halo exchange)."""
    return f"h{layer}"


def layout_path(root: str, machine: int, tag: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", str(tag))
    return os.path.join(os.path.abspath(root), f"worker{machine}", LAYOUT.format(tag=safe))


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

    Picklable (DGL sends it to every server). In the server of the machine that owns the
    rows it reads that machine's layout and unit files; in the owning trainer, where a
    :class:`TierShard` is registered for the tensor, local reads page through the
    trainer's host cache instead.
    """

    def __init__(self, root: str, tag: str, row_shape):
        self.root, self.tag = os.path.abspath(root), str(tag)
        self.row_shape = (int(row_shape),) if np.ndim(row_shape) == 0 else tuple(row_shape)
        self._layout = None

    def __getstate__(self):
        return dict(root=self.root, tag=self.tag, row_shape=self.row_shape, _layout=None)

    def _machine(self) -> int:
        if os.environ.get("DGL_ROLE") == "server":
            return int(os.environ["DGL_SERVER_ID"])  # one server per machine
        from dgl.distributed.kvstore import get_kvstore
        return get_kvstore().machine_id

    def layout(self) -> TierShardLayout:
        path = layout_path(self.root, self._machine(), self.tag)
        if self._layout is None or os.stat(path).st_mtime_ns != self._layout.mtime:
            self._layout = TierShardLayout(path)  # a new run of a sweep rewrites it
        return self._layout

    def __call__(self, data_store, name, local_offsets):
        local = np.asarray(local_offsets, dtype=np.int64)
        if local.size == 0:
            return torch.zeros((0,) + self.row_shape, dtype=torch.float32)
        shard = _LOCAL_SHARDS.get((self.root, self.tag))
        if shard is not None:
            return shard.read(local)
        return torch.from_numpy(self.layout().gather(local))


class TierPushHandler:
    """DGL push handler of a tier-backed shard: the owning trainer writes through its tier.

    Rows are written by the machine that owns them (full-graph training writes only
    owned rows); the plugin's tier-backed DistTensor refuses other writes
    before they are sent, so a server never runs this.
    """

    def __init__(self, root: str, tag: str):
        self.root, self.tag = os.path.abspath(root), str(tag)

    def __call__(self, data_store, name, local_offsets, data):
        shard = _LOCAL_SHARDS.get((self.root, self.tag))
        if shard is None:
            raise RuntimeError(f"tier-backed tensor {name!r}: rows can only be written by the "
                               f"trainer of the machine that owns them")
        shard.write(np.asarray(local_offsets, dtype=np.int64), data)


class TierStorage:
    """Where tier-backed DistTensors keep their local shards: ``SNIDistTensor(..., storage=tier)``.

    Owns, per trainer, the I/O engine (unit files under ``<root>/worker<machine>/``) and
    one host cache (``cache_budget`` bytes) shared by every tensor it backs. Shards are
    cut into units of ``chunk_rows`` rows; writes go through to storage at once (so the
    machine's server always answers remote pulls with the current rows) and stay cached.
    ``root`` must be a path that every process of a machine sees (a local disk).
    """

    def __init__(self, root: str, cache_budget: int | str = 64 << 20, chunk_rows: int = 65536,
                 io_mode: str = "auto"):
        self.root = os.path.abspath(root)
        self.cache = HostCache(parse_bytes(cache_budget, "cache_budget"))
        if int(chunk_rows) < 1:
            raise ValueError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.chunk_rows = int(chunk_rows)
        self.io_mode = io_mode
        self.io = None
        self._next_id = 0

    def _engine(self, machine: int) -> IOEngine:
        if self.io is None:
            self.io = IOEngine(os.path.join(self.root, f"worker{machine}"), io_mode=self.io_mode)
            self.cache.recycle = self.io.pool.release
        return self.io

    def attach(self, kv, key: str, num_rows: int, shape: tuple, dtype) -> "TierShard":
        """Create the local shard of tensor ``key`` and register its handlers with DGL
        (collective: every trainer creates the tensor, as for any DistTensor)."""
        shard = TierShard(self, self._engine(kv.machine_id), self._next_id, key, num_rows,
                          tuple(shape[1:]), dtype, kv.machine_id)
        self._next_id += 1
        _LOCAL_SHARDS[(self.root, shard.tag)] = shard
        kv.register_pull_handler(key, TierPullHandler(self.root, shard.tag, tuple(shape[1:])))
        kv.register_push_handler(key, TierPushHandler(self.root, shard.tag))
        return shard

    def stats(self) -> dict:
        io = self.io.stats if self.io is not None else {}
        return dict(self.cache.snapshot(), bytes_read=io.get("bytes_read", 0),
                    bytes_written=io.get("bytes_written", 0))

    def close(self) -> None:
        for k in [k for k, v in _LOCAL_SHARDS.items() if v.storage is self]:
            del _LOCAL_SHARDS[k]
        if self.io is not None:
            self.io.close()
            self.io = None


class TierShard:
    """One tier-backed tensor's local rows on its owning trainer: chunk units on storage,
    paged through the storage's host cache (created by :meth:`TierStorage.attach`)."""

    def __init__(self, storage: TierStorage, io: IOEngine, shard_id: int, tag: str, num_rows: int,
                 row_shape: tuple, dtype, machine: int):
        self.storage, self.io, self.tag = storage, io, str(tag)
        self.num_rows, self.row_shape = int(num_rows), tuple(row_shape)
        self.dtype = torch.empty(0, dtype=dtype).numpy().dtype
        self.chunk = storage.chunk_rows
        self.num_chunks = max(1, -(-self.num_rows // self.chunk))
        self._key = lambda c: ("shard", shard_id, c)
        for c in range(self.num_chunks):  # the shard starts as zeros, like DGL's default init
            rows = min(self.chunk, self.num_rows - c * self.chunk)
            io.write(self._key(c), np.zeros((rows,) + self.row_shape, self.dtype))
        local = np.arange(self.num_rows)
        TierShardLayout.write(layout_path(storage.root, machine, self.tag),
                              [io.path(self._key(c)) for c in range(self.num_chunks)],
                              local // self.chunk, local % self.chunk)

    def _unit(self, c: int) -> np.ndarray:
        key = self._key(c)
        arr = self.storage.cache.get(key)
        if arr is None:
            arr = self.io.read(key)
            self.storage.cache.admit(key, arr)
        return arr

    def read(self, local: np.ndarray) -> torch.Tensor:
        out = np.empty((local.shape[0],) + self.row_shape, self.dtype)
        chunk = local // self.chunk
        for c in np.unique(chunk):
            sel = np.flatnonzero(chunk == c)
            out[sel] = self._unit(int(c))[local[sel] - c * self.chunk]
        return torch.from_numpy(out)

    def write(self, local: np.ndarray, data) -> None:
        data = np.asarray(data.numpy() if isinstance(data, torch.Tensor) else data, dtype=self.dtype)
        chunk = local // self.chunk
        for c in np.unique(chunk):
            sel = np.flatnonzero(chunk == c)
            unit = np.array(self._unit(int(c)))  # a private copy: cached buffers are shared
            unit[local[sel] - c * self.chunk] = data[sel]
            self.io.write(self._key(int(c)), unit)  # through to storage before returning
            self.storage.cache.admit(self._key(int(c)), unit)
