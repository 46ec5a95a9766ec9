"""The switch for existing DistDGL scripts: ``DGL_SNI=1`` or ``dgl_sni.enable(config)``.

:func:`enable` (run automatically after ``dgl.distributed.initialize`` when
``DGL_SNI=1`` or ``DGL_SNI_CONFIG=path`` is set and the script imports ``dgl_sni``)
wraps the trainer's KVClient: every ``pull`` goes through :class:`SNIKVClient`, which
passes untouched any tensor it does not manage, reads local rows from shared memory
as DGL does, and hands the remote rows of a managed tensor to its
:class:`~dgl_sni.halo.resolver.HaloResolver` (the same one the full-graph exchange uses),
which decides per pull:

* sync pull (warm-up, then every ``sync_interval``-th pull of that tensor): DGL pulls
  them; the agent observes them;
* stale pull: rows come from the agent (history cache, predictions for the rows with
  the most edges into this machine's partition); rows the agent never saw are pulled.

A tensor's step is the number of pulls made on it, so a script that reads each
tensor once per epoch gets an epoch-based schedule without any change. Managed:
tensors created after ``enable`` (through :class:`SNIDistTensor`, which also becomes
what ``DistGraph`` creates) or named in ``tensors``; ``static`` tensors (read-only
data such as input features) are cached after their first pull, exactly. With the
flag off nothing here is imported or patched: behaviour is DGL's.
"""
from __future__ import annotations

import atexit
import json
import os

import numpy as np
import torch

import dgl_sni  # noqa: F401
import dgl
from dgl.distributed import dist_tensor as _dist_tensor
from dgl.distributed.kvstore import get_kvstore
from patches import dist_tensor_class, distgraph_init_hook, initialize_hook, kvclient_pull, kvstore_lazy_init

from ..halo.resolver import HaloResolver
from ..metrics import Counters
from ..config import SNIConfig

_ORIGINAL_DIST_TENSOR = _dist_tensor.DistTensor
_STATE = {"client": None, "graph": None}


class SNIDistTensor(_ORIGINAL_DIST_TENSOR):
    """``dgl.distributed.DistTensor`` with the same constructor and indexing.

    Constructed after :func:`enable`, a tensor created by the script (not one wrapping
    graph data loaded from the partitions) is managed by SNI; ``sni_stats`` reports
    what its pulls did.

    ``storage``: a :class:`storage_tier.shard.TierStorage` keeps this tensor's local
    shard in the storage tier instead of shared memory (which stays untouched): local
    reads page through the tier's host cache, remote pulls of these rows are answered
    by the owning machine's server from the tier files. The tensor starts as zeros, and
    each machine writes only the rows it owns (what full-graph training does).
    """

    def __init__(self, shape, dtype, name=None, init_func=None, part_policy=None,
                 persistent=False, is_gdata=True, attach=True, storage=None):
        self.tier_shard = None
        if storage is not None:
            if init_func is not None:
                raise ValueError("a tier-backed DistTensor starts as zeros: init_func is not supported "
                                 "with storage=")
            if persistent:
                raise ValueError("a tier-backed DistTensor lives as long as its TierStorage: "
                                 "persistent=True is not supported with storage=")
            from patches.kvstore_lazy_init import lazy_zeros
            init_func = lazy_zeros
        super().__init__(shape, dtype, name=name, init_func=init_func, part_policy=part_policy,
                         persistent=persistent, is_gdata=is_gdata, attach=attach)
        if storage is not None:
            policy = self.part_policy
            self.tier_shard = storage.attach(self.kvstore, self.kvstore_key, policy.get_part_size(),
                                             tuple(shape), dtype)
        client = _STATE["client"]
        if client is not None:
            client.register(self, created_by_script=attach)

    def __setitem__(self, idx, val):
        if self.tier_shard is not None:
            idx = _dist_tensor.totensor(idx)
            parts = self.part_policy.to_partid(idx)
            foreign = parts != self.kvstore.machine_id
            if bool(foreign.any()):
                raise ValueError(f"tier-backed DistTensor {self.tensor_name!r}: {int(foreign.sum())} of "
                                 f"{idx.numel()} rows written belong to other machines (e.g. row "
                                 f"{int(idx[foreign][0])} of machine {int(parts[foreign][0])}); each machine "
                                 f"writes only its own rows")
        super().__setitem__(idx, val)

    @property
    def sni_stats(self) -> dict:
        client = _STATE["client"]
        managed = client.managed.get(self.kvstore_key) if client else None
        return dict(managed.counters.extra) if managed else {}


class _ManagedTensor:
    """One managed tensor on this trainer: its pull count (the step) and the
    :class:`~dgl_sni.halo.resolver.HaloResolver` that decides where its remote rows come
    from. Local rows are read from shared memory as DGL does."""

    def __init__(self, client: "SNIKVClient", name: str, user_name: str, static: bool):
        self.client, self.name, self.static = client, name, static
        self.user_name = user_name
        _, _, self.policy = client.kv.get_data_meta(name)
        self.counters = Counters()
        self.step = 0
        self.resolver = HaloResolver(client.cfg, self.counters, table_id=client.new_table_id(),
                                     agent=client.agent, edge_counts=client.edge_counts, static=static)
        self._source = _PullSource(self)

    def pull(self, ids: torch.Tensor) -> torch.Tensor:
        kv, step = self.client.kv, self.step
        self.step += 1
        ids = ids.to(torch.int64)
        part = self.policy.to_partid(ids)
        local = part == kv.machine_id
        store = kv.data_store[self.name]
        out = torch.empty((ids.numel(),) + tuple(store.shape[1:]), dtype=store.dtype)
        out[local] = store[self.policy.to_local(ids[local])]
        remote = torch.nonzero(~local).flatten()
        if remote.numel():
            resolved = self.resolver.resolve(step, True, self._source, ids=ids[remote].numpy())
            out[remote] = torch.from_numpy(resolved.rows)
        return out


class _PullSource:
    """A managed tensor's remote rows through DGL's own pull (the script publishes its rows)."""

    def __init__(self, tensor: _ManagedTensor):
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


class SNIKVClient:
    """Sits in front of DGL's KVClient ``pull`` (the trainer's one instance)."""

    def __init__(self, kv, cfg: SNIConfig):
        self.kv, self.cfg = kv, cfg
        self.original_pull = kv.pull
        self.managed = {}
        self._agent = None
        self._next_table = 0
        kvclient_pull.install(kv, self.pull)  # DistTensor.__getitem__ calls self.kvstore.pull(...)

    def register(self, tensor, created_by_script: bool) -> None:
        name = tensor.kvstore_key
        user = tensor.tensor_name
        static = user in self.cfg.static
        wanted = user in self.cfg.tensors or static or (created_by_script and not self.cfg.tensors)
        if wanted and name not in self.managed and self.cfg.enabled:
            self.managed[name] = _ManagedTensor(self, name, user, static)

    def pull(self, name, id_tensor):
        managed = self.managed.get(name)
        if managed is None:
            return self.original_pull(name, id_tensor)
        return managed.pull(id_tensor)

    def agent(self):
        if self._agent is None:
            self._agent = self.cfg.start_agent()
        return self._agent

    def new_table_id(self) -> int:
        self._next_table += 1
        return self._next_table

    def edge_counts(self, ids: np.ndarray) -> np.ndarray:
        """Edges from each id into this machine's partition (0 without a DistGraph)."""
        g = _STATE["graph"]
        if g is None:
            return np.zeros(ids.size, np.int64)
        lg = g.local_partition
        u, v = lg.edges(form="uv", order="eid")
        inner = lg.ndata["inner_node"].bool()
        src = lg.ndata[dgl.NID][u[inner[v] & ~inner[u]]].numpy()
        uniq, counts = np.unique(src, return_counts=True)
        out = np.zeros(ids.size, np.int64)
        if uniq.size:
            pos = np.minimum(np.searchsorted(uniq, ids), uniq.size - 1)
            hit = uniq[pos] == ids
            out[hit] = counts[pos[hit]]
        return out

    def stats(self) -> dict:
        return {t.user_name: dict(t.counters.extra) for t in self.managed.values()}

    def close(self) -> None:
        if self._agent is not None:
            self._agent.close()
            self._agent = None


def enable(config: SNIConfig | dict | None = None, graph=None) -> SNIKVClient:
    """Switch SNI on for this trainer (after ``dgl.distributed.initialize``)."""
    if isinstance(config, dict):
        config = SNIConfig.from_dict(config)
    cfg = (config or SNIConfig.from_env() or SNIConfig()).validate()
    kv = get_kvstore()
    if kv is None:
        raise RuntimeError("dgl_sni.enable() must run after dgl.distributed.initialize()")
    if _STATE["client"] is None:
        _STATE["client"] = SNIKVClient(kv, cfg)
        dist_tensor_class.install(SNIDistTensor)  # also what DistGraph constructs
        distgraph_init_hook.install(_remember_graph)
        atexit.register(_at_exit)
    else:
        _STATE["client"].cfg = cfg
    if graph is not None:
        _STATE["graph"] = graph
    return _STATE["client"]


def sni_stats() -> dict:
    """What SNI did for each managed tensor of this trainer (empty when off)."""
    client = _STATE["client"]
    return client.stats() if client else {}


def _remember_graph(graph) -> None:
    """The ``DistGraph`` constructed last is the one :meth:`SNIKVClient.edge_counts` reads."""
    _STATE["graph"] = graph


def _at_exit() -> None:
    client = _STATE["client"]
    if client is None:
        return
    path = os.environ.get("DGL_SNI_STATS")
    if path:
        rank = os.environ.get("RANK", "0")
        with open(path.replace("{rank}", rank), "w") as fh:
            json.dump(client.stats(), fh)
    client.close()


def install_autoenable() -> None:
    """Make ``dgl.distributed.initialize`` call :func:`enable` in trainers (DGL_SNI=1)."""
    # before: tier-backed tensors' shm shards stay untouched in servers
    initialize_hook.install(before=kvstore_lazy_init.install, after=_enable_in_trainer)


def _enable_in_trainer() -> None:
    """After ``dgl.distributed.initialize``: :func:`enable` unless this is a server."""
    if os.environ.get("DGL_ROLE", "client") != "server":
        enable()
