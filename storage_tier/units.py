"""Unit I/O of the storage tier: units between the host cache and the files, prefetched.

:class:`UnitStore` moves the units of :mod:`storage_tier.subparts` (one unit = one
sub-partition's, or the halo's, rows of one layer; keys ``("act", l, p)``,
``("grad", l, p)`` and ``("snap", l, s)``) between the host cache of
:mod:`storage_tier.host_cache` and the files of :mod:`storage_tier.io`. It owns the cache's
write-back and recycle hooks, the access schedule of the current pass, the record of which
gradient units are on storage, and the per-layer/phase time and byte counters. Its only
caller is :class:`storage_tier.engine.TierEngine`, which decides what each layer reads and
writes and computes in between.

Reading: :meth:`~UnitStore.fetch` (a cache hit, else the prefetched or a synchronous read,
admitted to the cache if it has room without evicting the ``active`` groups),
:meth:`~UnitStore.fetch_once` (output gradients and snapshots, read once and never
admitted) and :meth:`~UnitStore.gather` (a sub-partition's source rows, unit by unit).
Writing: :meth:`~UnitStore.emit` hands over a finished unit -- written straight to
storage (*bypass*, in the writer thread) with a clean copy kept only if the cache has
room, or, under a write-back policy, kept dirty in the cache and written only when it is
evicted. Gradient buffers: :meth:`~UnitStore.scatter` adds a sub-partition's input
gradient rows into the ``grad[l]`` units (dirty in the cache -- a unit the budget cannot
hold is read-modified-written through storage). Passes alternate direction
(:meth:`~UnitStore.order`: 0..P-1, then P-1..0) so the units touched last are read first.

Each pass publishes its access schedule (:class:`_Schedule`, :meth:`~UnitStore.schedule`):
``prefetch_depth`` units are read ahead by the reader threads, and when one layer exceeds
the cache budget the cache evicts the sub-partition unit needed farthest in the future
(Belady) instead of the least recently used one, which under the cyclic sub-partition
scans of a layer keeps a stable subset resident where LRU would miss on every access.
Whole-layer eviction stays LRU.

Metrics (per epoch, :meth:`UnitStore.metrics`, reported by
:meth:`storage_tier.engine.TierEngine.metrics`): storage bytes read/written (what the
read/write calls moved, headers and padding included) in total and per phase, cache
hits/misses/hit rate, peak resident bytes versus the budget, evictions, alpha, per-layer
time split (``io_wait_s`` = main thread blocked on reads or the write queue,
``gather_s`` = host gather/scatter copies, ``compute_s`` = model compute incl. autograd,
timed by the engine through :meth:`~UnitStore.time`), bandwidth of the I/O threads, and
peak RSS (VmHWM).

Memory bound (what a run's peak RSS stays under, measured in
``tests/storage_tier/test_storage_engine.py``): the process after setup (interpreter,
torch/DGL ~0.45 GB; the sub-partition blocks ~120 bytes per edge, and as much again for
the reverse blocks of a source-major backward) + the host-cache budget + one
sub-partition's working set in the engine (its gathered input, the input gradient and the
autograd intermediates: <= 8 x max_src_rows x width x 4 bytes, plus 2 recycled gathered
blocks; in a source-major backward a unit's gathered output gradient rows, the rows its
reverse block reads, in place of the gathered input) + (prefetch_depth + 2 queued writes +
1 + ``pool_units`` recycled buffers) x the largest unit + ~16 MiB allocator slack; the
first epoch adds a one-time ~40-64 MiB of library initialisation. None of it grows with
the number of layers or with the activations held on storage. Note that on graphs where
every sub-partition depends on every other one (random-like graphs), two layers must fit
in the budget (forward: a layer's inputs and outputs; source-major backward: the output
gradient and the inputs, each unit replaced by its gradient; destination-major backward
needs the inputs, the gradient buffer and the output gradient): otherwise each
sub-partition re-reads the units the cache could not keep (partition-wise granularity).

With ``device="cuda"`` output gradients read without a prefetch go to the GPU with
GPUDirect Storage via kvikio when it is installed; that path is **untested here**.
"""
from __future__ import annotations

import bisect
import time
from collections import defaultdict
from contextlib import contextmanager

import numpy as np
import torch

from .host_cache import HostCache
from .io import HEADER, IOEngine, kvikio_available, padded
from .memory import peak_rss_mb
from .subparts import SubpartitionPlan


class _Schedule:
    """The access list of one pass: drives prefetching and the cache's next-use eviction.

    ``accesses`` is every unit access of the pass in order, as ``(key, prefetchable)``
    (gradient accumulation targets are scheduled but not prefetched). The store calls
    :meth:`advance` at each access; up to ``depth`` prefetchable units not already cached
    are read ahead in the reader threads; :meth:`next_use` tells the cache when a unit is
    needed next in this pass (None: not again), which it uses to pick sub-partition victims.
    """

    def __init__(self, store: "UnitStore", accesses: list, depth: int, window: int = 64):
        self.store, self.depth, self.window = store, depth, window
        self.keys = [k for k, _ in accesses]
        self.fetchable = [f for _, f in accesses]
        self.positions: dict = defaultdict(list)
        for i, key in enumerate(self.keys):
            self.positions[key].append(i)
        self.pos = 0
        self.inflight: dict = {}
        self._fill()

    def advance(self, key):
        """Mark the access of ``key`` done; return the Future of its prefetch, if any."""
        i = self.pos
        while i < len(self.keys) and i < self.pos + self.window and self.keys[i] != key:
            i += 1
        if i < len(self.keys) and self.keys[i] == key:
            self.pos = i + 1
        fut = self.inflight.pop(key, None)
        self._fill()
        return fut

    def next_use(self, key):
        lst = self.positions.get(key)
        if not lst:
            return None
        j = bisect.bisect_left(lst, self.pos)
        return lst[j] if j < len(lst) else None

    def _fill(self) -> None:
        if self.depth <= 0:
            return
        i = self.pos
        cache, io = self.store.cache, self.store.io
        while len(self.inflight) < self.depth and i < len(self.keys) and i < self.pos + self.window:
            key = self.keys[i]
            i += 1
            if not self.fetchable[i - 1] or key in self.inflight or key in cache:
                continue
            self.inflight[key] = io.read_async(key)

    def close(self) -> None:
        for fut in self.inflight.values():
            try:
                fut.result()
            except Exception:
                pass
        self.inflight.clear()


class UnitStore:
    """Units between the host cache and the files, for one :class:`~storage_tier.engine.TierEngine`.

    Owns the pass schedule (prefetch + next-use eviction), the pass direction, the set of
    gradient units on storage, the per-layer/phase time and byte counters, and the cache's
    ``writeback``/``recycle`` hooks; uses (does not own) the plan, the I/O engine (and its
    buffer pool) and the cache handed to the engine. The engine sets ``active`` (the
    groups a layer must not evict) and ``gwidth`` (the width of ``grad[l]`` units).
    """

    def __init__(self, plan: SubpartitionPlan, io: IOEngine, cache: HostCache, dims: list,
                 prefetch_depth: int = 2, device: torch.device = torch.device("cpu")):
        self.plan, self.io, self.cache = plan, io, cache
        self.dims = dims  # width of act[l], l = 0..L-1 (the engine's list)
        self.prefetch_depth = int(prefetch_depth)
        self.device = device
        self._gds = device.type == "cuda" and kvikio_available()
        self._flip = False
        self._grad_stored: set = set()
        self.active: set = set()
        self._sched = None
        self.gwidth: dict = {}  # width of grad[l] units (the logits' for l = L)
        self.pool = io.pool
        self.cache.writeback = self.writeback
        self.cache.recycle = self.pool.release
        self.reset_metrics()

    # ------------------------------------------------------------------ metrics
    def reset_metrics(self) -> None:
        self.io.reset_stats()
        self.cache.reset_stats()
        self.times = defaultdict(lambda: defaultdict(float))
        self._phase_bytes = {}

    @contextmanager
    def time(self, layer: int, phase: str, what: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.times[layer][f"{phase}_{what}"] += time.perf_counter() - start

    def mark_phase(self, phase: str) -> None:
        s = self.io.stats
        self._phase_bytes[phase] = (s["bytes_read"], s["bytes_written"])

    def metrics(self, **settings) -> dict:
        """The record of the epoch so far (module docstring); ``settings`` (the engine's
        policies) are recorded after ``io_mode``."""
        s = dict(self.io.stats)
        c = self.cache.snapshot()
        layers = []
        for layer in sorted(self.times):
            row = {"layer": layer}
            row.update({k: round(v, 6) for k, v in sorted(self.times[layer].items())})
            layers.append(row)
        tot = defaultdict(float)
        for row in layers:
            for k, v in row.items():
                if k != "layer":
                    tot[k.split("_", 1)[1]] += v
        out = dict(
            storage_bytes_read=s["bytes_read"], storage_bytes_written=s["bytes_written"],
            storage_bytes=s["bytes_read"] + s["bytes_written"],
            storage_payload_read=s["payload_read"], storage_payload_written=s["payload_written"],
            storage_reads=s["reads"], storage_writes=s["writes"],
            storage_read_s=round(s["read_s"], 6), storage_write_s=round(s["write_s"], 6),
            storage_read_gbps=(s["bytes_read"] / s["read_s"] / 1e9) if s["read_s"] > 0 else None,
            storage_write_gbps=(s["bytes_written"] / s["write_s"] / 1e9) if s["write_s"] > 0 else None,
            io_mode=self.io.mode, **settings,
            io_wait_s=round(tot["io_wait_s"], 6), gather_s=round(tot["gather_s"], 6),
            compute_s=round(tot["compute_s"], 6), layer_times=layers,
            peak_rss_mb=peak_rss_mb())
        if "bwd" in self._phase_bytes:
            r0, w0 = self._phase_bytes.get("fwd", (0, 0))
            r1, w1 = self._phase_bytes["bwd"]
            out.update(fwd_bytes_read=r1 - r0, fwd_bytes_written=w1 - w0,
                       bwd_bytes_read=s["bytes_read"] - r1, bwd_bytes_written=s["bytes_written"] - w1)
        out.update(c)
        out.update(self.plan.stats())
        return out

    # ------------------------------------------------------------------ sizes
    def unit_shape(self, layer: int, part: int) -> tuple:
        return (self.plan.unit_rows(part), self.dims[layer])

    def layer_bytes(self, layer: int, snapshot: bool = False) -> int:
        """Bytes on disk of one layer's units (or of its snapshots)."""
        d = self.dims[layer] * 4
        if snapshot:
            return sum(HEADER + padded(p.num_src * d) for p in self.plan.parts)
        return sum(HEADER + padded(self.plan.unit_rows(p) * d) for p in self.plan.unit_parts)

    def disk_needed(self, num_layers: int, snapshots: bool = False, logits_width: int | None = None) -> int:
        """Most bytes the run directory holds at once (activations + two gradient layers
        [+ snapshots]); ``logits_width``: a source-major backward's logits gradient units."""
        L = num_layers
        acts = sum(self.layer_bytes(l) for l in range(L))
        grads = max([self.layer_bytes(l) + self.layer_bytes(l + 1) for l in range(1, L - 1)]
                    + [self.layer_bytes(l) for l in range(1, L)] + [0])
        if logits_width is not None:  # the logits' gradient beside grad[L-1] (units of out_width)
            logits = sum(HEADER + padded(self.plan.unit_rows(p) * logits_width * 4)
                         for p in self.plan.unit_parts)
            grads = max(grads, logits + (self.layer_bytes(L - 1) if L > 1 else 0))
        snaps = sum(self.layer_bytes(l, True) for l in range(L)) if snapshots else 0
        return acts + grads + snaps

    # ------------------------------------------------------------------ unit plumbing
    def write_inputs(self, features) -> None:
        """Write layer 0 (input features, permuted into tier order) as units; kept for the run."""
        plan = self.plan
        self.active = {("act", 0)}
        for part in plan.unit_parts:
            lo, hi = plan.unit_range(part)
            rows = plan.perm[lo:hi] if part != plan.halo_part else np.arange(lo, hi)
            if isinstance(features, torch.Tensor):
                block = features.index_select(0, torch.from_numpy(rows)).numpy()
            else:
                block = np.asarray(features[rows])
            buf = self.pool.alloc((hi - lo, self.dims[0]), zero=False)
            buf[...] = block
            del block
            self.io.write_async(("act", 0, part), buf)
            self.cache.admit(("act", 0, part), buf, protect_groups=self.active, unit_eviction=False)
            del buf
        self.io.wait()

    def writeback(self, key, arr) -> None:
        """The cache's hook for an evicted dirty unit."""
        self.io.write_async(key, arr)
        if key[0] == "grad":
            self._grad_stored.add(key)

    def write(self, key, arr, layer: int, phase: str) -> None:
        with self.time(layer, phase, "io_wait_s"):  # blocks only when the write queue is full
            self.io.write_async(key, arr)
        if key[0] == "grad":
            self._grad_stored.add(key)

    def _wait(self, fut, key, layer, phase):
        with self.time(layer, phase, "io_wait_s"):
            return self.io.read(key) if fut is None else self.io._wait_future(fut)

    def fetch(self, key, pf, layer: int, phase: str, admit: bool = True) -> np.ndarray:
        """A unit for reading: cache hit, else the prefetched or a synchronous read."""
        arr = self.cache.get(key)
        fut = pf.advance(key) if pf is not None else None
        if arr is not None:
            return arr
        arr = self._wait(fut, key, layer, phase)
        if admit:
            self.cache.admit(key, arr, protect_groups=self.active)
        return arr

    def fetch_once(self, key, pf, layer: int, phase: str) -> np.ndarray:
        """A unit read exactly once (output gradients, snapshots): never admitted, dropped after."""
        arr = self.cache.get(key)
        fut = pf.advance(key) if pf is not None else None
        if arr is not None:
            self.cache.discard(key)
            return arr
        if self._gds and fut is None and key[0] == "grad":  # UNTESTED here: GDS to the GPU
            with self.time(layer, phase, "io_wait_s"):
                return self.io.read_to_device(key, self.device)
        return self._wait(fut, key, layer, phase)

    def emit(self, key, out: torch.Tensor, layer: int, phase: str, lazy: bool,
             unit_eviction: bool = False) -> None:
        """Hand over a finished unit: under a write-back policy (``lazy``) the cache keeps it
        dirty if it can make room, else it is written (bypass) and the cache keeps a clean
        copy if it has room. Outputs make room only by whole groups; gradient units, which
        the next layer reads, also by single units (``unit_eviction``)."""
        with self.time(layer, phase, "gather_s"):
            buf = self.pool.alloc(tuple(out.shape), zero=False)
            np.copyto(buf, out.detach().to("cpu").numpy())
        self.cache.discard(key)  # any older version is stale
        self._grad_stored.discard(key)
        kw = dict(protect_groups=self.active, unit_eviction=unit_eviction)
        if lazy and self.cache.admit(key, buf, dirty=True, **kw):
            return
        self.write(key, buf, layer, phase)
        if not lazy and self.cache.admit(key, buf, **kw):
            return
        self.pool.release(buf)  # recycled once its write is done

    def grad_unit(self, key, layer: int):
        """The accumulation buffer of a gradient unit: (array, resident in cache)."""
        if self._sched is not None:
            self._sched.advance(key)
        arr = self.cache.get(key, count=False)
        if arr is not None:
            self.cache.hits += 1
            return arr, True
        if key in self._grad_stored:
            self.cache.misses += 1
            arr = self._wait(None, key, layer, "bwd")
        else:
            arr = self.pool.alloc(self.unit_shape(layer, key[2]))
        ok = self.cache.admit(key, arr, dirty=True, protect_groups=self.active)
        return arr, ok

    def release(self, key, arr, dead: bool = False) -> None:
        """Done with a fetched unit: recycle a transient (not admitted) one's buffer, or,
        ``dead``, drop the cached one."""
        if self.cache.peek(key) is not arr:
            self.pool.release(arr)  # a transient (not admitted) unit
        elif dead:
            self.cache.discard(key)

    def delete_snapshots(self, layer: int) -> None:
        for s in range(self.plan.num_parts):
            self.io.delete(("snap", layer, s))

    # ------------------------------------------------------------------ gradient layers
    def reset_grads(self, layer: int) -> None:
        """Forget ``grad[layer]`` before a backward pass accumulates it anew."""
        for p in self.plan.unit_parts:
            self._grad_stored.discard(("grad", layer, p))
            self.cache.discard(("grad", layer, p))

    def delete_grads(self, layer: int) -> None:
        """``grad[layer]`` is dead: out of the cache, its files deleted."""
        self.cache.discard_group(("grad", layer))
        for p in self.plan.unit_parts:
            self._grad_stored.discard(("grad", layer, p))
            self.io.delete(("grad", layer, p))

    def delete(self, key) -> None:
        """One dead gradient unit: out of the cache, its file deleted."""
        self.cache.discard(key)
        self._grad_stored.discard(key)
        self.io.delete(key)

    def add_owned_grads(self, layer: int, extra: np.ndarray) -> None:
        """Add ``extra`` (owned rows, view numbering: what other workers computed) to the
        ``grad[layer]`` units, read-modified-written through storage where not cached."""
        plan = self.plan
        for p in range(plan.num_parts):
            k = ("grad", layer, p)
            lo, hi = plan.unit_range(p)
            g, resident = self.grad_unit(k, layer)
            g += extra[plan.perm[lo:hi]]
            if not resident:
                self.write(k, g, layer, "bwd")

    def flush_grads(self, layer: int) -> None:
        """Write the dirty ``grad[layer]`` units to storage (they stay cached)."""
        self.cache.flush([("grad", layer, p) for p in self.plan.unit_parts])
        for p in self.plan.unit_parts:
            if ("grad", layer, p) in self.cache:
                self._grad_stored.add(("grad", layer, p))

    # ------------------------------------------------------------------ passes
    def order(self) -> list:
        """The sub-partitions in this pass's order (alternating with each call)."""
        self._flip = not self._flip
        order = list(range(self.plan.num_parts))
        return order if self._flip else order[::-1]

    @contextmanager
    def schedule(self, accesses: list):
        """Run one pass under a :class:`_Schedule` (prefetch + next-use eviction)."""
        sched = _Schedule(self, accesses, self.prefetch_depth)
        self._sched = sched
        self.cache.next_use = sched.next_use
        try:
            yield sched
        finally:
            sched.close()
            self._sched = None
            self.cache.next_use = None

    def gather(self, layer: int, part, pf, phase: str, tier_buffer: bool = False,
               kind: str = "act") -> np.ndarray:
        """The sub-partition's source rows of ``act[layer]`` (or of ``grad[layer]``), unit by unit.

        Row copies use torch's ``index_select``/``index_add_`` into numpy-owned buffers:
        measured here (one thread, 20k sorted rows of 128 floats) 2.3x faster than
        ``np.take`` and 2.6x faster than numpy's fancy-index ``+=``.
        """
        width = self.dims[layer] if kind == "act" else self.gwidth[layer]
        shape = (part.block.num_src, width)
        # numpy's allocator (huge pages, heap reuse) is the faster home for a block that is
        # never written; snapshots are written, so they get an aligned tier buffer
        x = self.pool.alloc(shape, zero=False) if tier_buffer else np.empty(shape, dtype=np.float32)
        for src in part.sources:
            key = (kind, layer, src.part)
            unit = self.fetch(key, pf, layer, phase)
            with self.time(layer, phase, "gather_s"):
                if src.rows is None:
                    x[src.start: src.stop] = unit
                else:
                    torch.index_select(torch.from_numpy(unit), 0, src.index,
                                       out=torch.from_numpy(x[src.start: src.stop]))
            if self.cache.peek(key) is not unit:
                self.pool.release(unit)  # a transient (not admitted) unit: recycle its buffer
            del unit
        return x

    def scatter(self, layer: int, part, grad: np.ndarray) -> None:
        """Scatter-add a sub-partition's input gradient rows into the ``grad[layer]`` units."""
        for src in part.sources:
            key = ("grad", layer, src.part)
            unit, resident = self.grad_unit(key, layer)
            with self.time(layer, "bwd", "gather_s"):
                g = grad[src.start: src.stop]
                if src.rows is None:
                    np.add(unit, g, out=unit)
                else:  # rows are unique within a source: the sum is order-independent
                    torch.from_numpy(unit).index_add_(0, src.index, torch.from_numpy(g))
            if not resident:  # read-modify-write through storage
                self.write(key, unit, layer, "bwd")
                self.pool.release(unit)


__all__ = ["UnitStore"]
