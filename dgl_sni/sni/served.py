"""What the stock-script switch keeps per KVStore tensor on a trainer (:class:`ServedTensor`):
its counters, how it is used (:class:`ExchangeUse`, the per-layer exchange pattern detector),
and where its rows come from (a :class:`~dgl_sni.halo.resolver.HaloResolver` for rows that may
be served stale, a :class:`~dgl_sni.sni.static_cache.StaticRowCache` for static node data, or
DGL's pull). Made and driven by :class:`~dgl_sni.sni.kvstore.SNIKVClient`.
"""
from __future__ import annotations

import numpy as np
import torch
from dgl.distributed.kvstore import default_pull_handler as _default_pull_handler

from ..halo.resolver import HaloResolver
from ..metrics import Counters
from ..config import SNIConfig


def may_serve_stale(cfg: "SNIConfig | None") -> bool:
    """Whether a tensor under this configuration can ever be served without a pull (a stale
    step): never with no predictor or at sync interval 1, so the switch then starts no agent
    and passes every pull to DGL."""
    return cfg is not None and cfg.enabled and cfg.sync_interval > 1


class ExchangeUse:
    """Whether one tensor is used in the per-layer exchange pattern (owned by :class:`ServedTensor`).

    A step is one push followed by one pull. The pattern holds while every push writes
    only this machine's rows and every step has exactly one push and one pull; the tensor
    may be served from the agent once ``ELIGIBLE_AFTER`` steps have completed so (from its
    third step on). Anything else ends it for the rest of the run (``reason`` says what).
    """

    ELIGIBLE_AFTER = 2

    def __init__(self):
        self.pushes = self.pulls = self.steps = 0
        self.reason = ""

    @property
    def broken(self) -> bool:
        return bool(self.reason)

    def _break(self, why: str) -> None:
        if not self.reason:
            self.reason = why

    def on_push(self, only_own_rows: bool) -> None:
        if self.pulls:  # the previous step ended with its pull
            self.steps += 1
            self.pushes = self.pulls = 0
        self.pushes += 1
        if not only_own_rows:
            self._break("a push wrote rows of other machines")
        elif self.pushes > 1:
            self._break("two pushes in one step")

    def on_pull(self) -> bool:
        """Count a pull; whether it may be served (the pattern held for enough steps)."""
        self.pulls += 1
        if self.pushes == 0:
            self._break("a pull with no push before it")
        elif self.pulls > 1:
            self._break("two pulls in one step")
        return not self.broken and self.steps >= self.ELIGIBLE_AFTER


class ServedTensor:
    """What the switch knows about one KVStore tensor on this trainer: its counters, how it
    is used, and (where its rows may be served or cached) its
    :class:`~dgl_sni.halo.resolver.HaloResolver` or
    :class:`~dgl_sni.sni.static_cache.StaticRowCache`. Local rows are read from shared memory
    as DGL does."""

    PULL_LOG = 100_000  # the wire bytes of a tensor's first pulls are kept, one number each

    def __init__(self, client, name: str, user_name: str, role: str):  # client: the trainer's SNIKVClient
        self.client, self.name, self.user_name = client, name, user_name
        self.role = role  # "static", "exchange" (pattern-detected), "named" (cfg.tensors) or "plain"
        _, shape, self.policy = client.kv.get_data_meta(name)
        self.shape = tuple(shape)
        self.counters = Counters()
        self.cached_elsewhere = role == "static"  # other machines may hold any row: every write is posted
        self.use = ExchangeUse()
        self.step = 0
        self.resolver = self.static_cache = None
        self._dirty = None  # named tensors: rows this machine wrote since the last sync
        self._source = _PullSource(self)
        if role == "static":
            self.static_cache = client.new_static_cache(self)
        elif role in ("exchange", "named") and may_serve_stale(client.cfg):
            self.resolver = HaloResolver(client.cfg, self.counters, table_id=client.new_table_id(),
                                         agent=client.agent, edge_counts=client.edge_counts)
        else:
            self.role = "plain"

    # ------------------------------------------------------------------ writes
    def on_push(self, ids: torch.Tensor) -> None:
        """This machine writes rows ``ids``: what may no longer be served from memory, here
        and (through a notice) on the machines that may hold them."""
        board = self.client.notices
        if board is None and self.role == "plain":
            return
        own = self.policy.to_partid(ids) == self.client.kv.machine_id
        if board is not None and (self.cached_elsewhere or not bool(own.all())):
            board.post(self.name, (ids if self.cached_elsewhere else ids[~own]).numpy())
        if self.role == "plain":
            return
        if self.role == "static":
            if self.user_name in self.client.cfg.static:
                self.static_cache.invalidate(ids.numpy())
            else:  # detected as read-only, but written: exact from now on
                self.static_cache.invalidate()
                self._to_plain("written by this machine")
        elif self.role == "exchange":
            self.use.on_push(bool(own.all()))
            if self.use.broken:
                self._to_plain(self.use.reason)
        elif not bool(own.all()):  # named: remote rows written here are pulled until a sync
            written = ids[~own].numpy()
            self._dirty = written if self._dirty is None else np.union1d(self._dirty, written)

    def on_notice(self, ids: np.ndarray | None) -> None:
        """Another machine wrote rows ``ids`` (None: any row): copies of them held here go.
        Rows this machine owns are read from its shared memory, never held: they are ignored."""
        if ids is not None:
            ids = ids[(self.policy.to_partid(torch.from_numpy(ids)) != self.client.kv.machine_id).numpy()]
            if not ids.size:
                return
        if self.role == "static":
            if self.user_name in self.client.cfg.static:
                self.static_cache.invalidate(ids)
            else:  # detected as read-only, but written elsewhere: exact from now on
                self.static_cache.invalidate()
                self._to_plain("written by another machine")
        elif self.role == "exchange":
            self._to_plain("another machine wrote rows of other machines")
        elif self.role == "named":  # pulled until the next sync observes them
            written = np.arange(self.shape[0], dtype=np.int64) if ids is None else ids
            self._dirty = written if self._dirty is None else np.union1d(self._dirty, written)

    def on_new_handle(self) -> None:
        """The script constructed another DistTensor on this data (a reused buffer)."""
        if self.role == "exchange":
            self.use.reason = self.use.reason or "created again (a reused buffer)"
            self._to_plain(self.use.reason)

    def _to_plain(self, why: str) -> None:
        self.role, self.resolver, self.static_cache = "plain", None, None
        self.counters.extra["exact_because"] = why

    # ------------------------------------------------------------------ reads
    def pull(self, ids: torch.Tensor) -> torch.Tensor:
        kv = self.client.kv
        step = self.step  # the tensor's step is its pull count, exact pulls included
        self.step += 1
        if self.role == "exchange" and not self.use.on_pull():
            if self.use.broken:
                self._to_plain(self.use.reason)
            return self.client.plain_pull(self, ids)
        # DGL 2.1's KVClient keeps its handlers in ``_pull_handlers`` (no public accessor)
        if self.role == "plain" or kv._pull_handlers.get(self.name) is not _default_pull_handler:
            return self.client.plain_pull(self, ids)  # a handler of the script's own sees every row
        part = self.policy.to_partid(ids)
        local = part == kv.machine_id
        store = kv.data_store[self.name]
        out = torch.empty((ids.numel(),) + tuple(store.shape[1:]), dtype=store.dtype)
        out[local] = store[self.policy.to_local(ids[local])]
        remote = torch.nonzero(~local).flatten()
        self.counters.add("remote_rows", int(remote.numel()))
        if remote.numel():
            rids = ids[remote].numpy()
            fresh = self._fresh_rows(step, rids)
            if fresh is not None and fresh.any():
                rows = self.client.original_pull(self.name, torch.from_numpy(rids[fresh]))
                out[remote[torch.from_numpy(fresh)]] = rows
                self.counters.add("pulled_rows", int(fresh.sum()))
                self.counters.add("pulled_bytes", rows.numel() * rows.element_size())
                remote, rids = remote[torch.from_numpy(~fresh)], rids[~fresh]
            if rids.size:
                if self.static_cache is not None:
                    resolved = self.static_cache.lookup(rids, self._source.pull, self.counters)
                else:
                    resolved = self.resolver.resolve_ids(step, self._mode(step), self._source, rids)
                out[remote] = torch.from_numpy(resolved.rows)
        return out

    def _mode(self, step: int) -> str:
        """``sync`` or ``stale`` at this tensor's step ``step``: the run's schedule, once the
        agent has history to serve (a table, made at the first sync)."""
        return "sync" if self.resolver.table is None else self.client.schedule.mode(step)

    def _fresh_rows(self, step: int, rids: np.ndarray):
        """Named tensors: which of ``rids`` must be pulled now (written here since the last sync)."""
        if self._dirty is None:
            return None
        if self._mode(step) == "sync":  # the sync pulls and observes them all
            self._dirty = None
            return None
        return np.isin(rids, self._dirty)


class _PullSource:
    """A tensor's remote rows through DGL's own pull (the script publishes its rows)."""

    def __init__(self, tensor: ServedTensor):
        self.tensor = tensor

    def publish(self) -> None:
        pass

    def pull(self, ids: np.ndarray | None) -> np.ndarray:
        t = self.tensor
        rows = t.client.original_pull(t.name, torch.from_numpy(ids))
        t.counters.add("pulled_rows", int(ids.size))
        t.counters.add("pulled_bytes", rows.numel() * rows.element_size())
        return rows.numpy()

    def peek(self) -> np.ndarray:
        return self.tensor.client.original_pull(self.tensor.name, torch.from_numpy(self.tensor.resolver.ids)).numpy()
