"""The switch for existing DistDGL scripts: ``DGL_SNI=1`` or ``dgl_sni.enable(config)``.

:func:`enable` (run automatically after ``dgl.distributed.initialize`` when ``DGL_SNI=1``
or ``DGL_SNI_CONFIG=path`` is set: the start-up hook imports ``dgl_sni`` with ``dgl``, so
the script needs no edit) puts :class:`SNIKVClient` in front of the trainer's KVClient
``pull`` and ``push``. Every pull's ids become int64 (DGL 2.1's distributed pull fails on
int32); a tensor with its own pull handler, or one that is not managed, goes to DGL's
``pull`` unchanged. Where rows come from is decided here, by the run's one sync schedule,
with one :class:`~dgl_sni.halo.resolver.HaloResolver` per served tensor (the rows' values,
as the full-graph trainers' resolvers give them) and one
:class:`~dgl_sni.sni.static_cache.StaticRowCache` per static tensor:

* **static node data** (input features: node data DistGraph loaded from the partitions and
  this machine never wrote, or tensors named in ``static``): remote rows come from a
  budgeted exact cache (``feature_cache_bytes``), filled on first pull, keeping the rows
  needed most (in-edges into this partition, then counted accesses); exact at every sync
  interval.
* **the per-layer exchange pattern** (a tensor the script created, whose every step is one
  push of only this machine's rows followed by one pull; from its third step on), or a
  tensor named in ``tensors``: on sync pulls (warm-up, then every ``sync_interval``-th)
  DGL pulls the remote rows and the agent observes them; on stale pulls the agent serves
  them. Local rows always come from shared memory.
* anything else is exact: any other use of a tensor (a push of other machines' rows, two
  pulls or two pushes in a step, a pull with no push before it, a second DistTensor
  constructed on the same data, as evaluation code does with ``persistent=True``) makes it
  exact for the rest of the run. A named tensor's rows this machine writes are
  pulled fresh until the next sync. At ``sync_interval`` 1 (or predictor ``none``)
  nothing can be stale: no agent starts and no pull is served.

Writes made on other machines: a trainer that writes static node data, or rows another
machine owns, posts a write notice (:mod:`dgl_sni.sni.notices`) that the first server of
every machine takes before its push returns; before answering a pull from memory, each trainer applies the
notices posted since its last look (an 8-byte shared-memory read when there are none). A
detected static tensor written anywhere, or an ``exchange`` tensor whose rows of other
machines were written anywhere, is exact from then on; a named static tensor drops the
written rows from its cache, a named tensor pulls them until the next sync. The servers
must run with the variables too (the notices are RPC services they register).

In standalone mode (one process, no servers) nothing can be stale and nothing is served:
the switch leaves the KVClient alone. Without the variables nothing here is imported or
patched: behaviour is DGL's.
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
from dgl.distributed.standalone_kvstore import KVClient as SAKVClient
from patches import (dist_tensor_class, distgraph_init_hook, initialize_hook, kvclient_pull, kvclient_push,
                     kvstore_lazy_init)

from ..config import SNIConfig
from ..config.sni import cache_budget
from .notices import NoticeBoard, register_services
from .served import ServedTensor, may_serve_stale
from .schedule import SyncSchedule
from .static_cache import StaticRowCache

_ORIGINAL_DIST_TENSOR = _dist_tensor.DistTensor
_STATE = {"client": None, "graph": None, "atexit": False}


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
    def created_data(self) -> bool:
        """Whether constructing this handle created the KVStore data (not attached to existing data)."""
        return bool(self._owner)

    @property
    def sni_stats(self) -> dict:
        client = _STATE["client"]
        tensor = client.tensors.get(self.kvstore_key) if client else None
        return dict(tensor.counters.extra) if tensor else {}


def _as_ids(id_tensor) -> torch.Tensor:
    """Row ids as DGL's distributed pull needs them: a 1-d int64 tensor."""
    ids = id_tensor if isinstance(id_tensor, torch.Tensor) else torch.as_tensor(id_tensor)
    if ids.dtype == torch.bool:
        raise TypeError("DistTensor rows are indexed by ids, not a boolean mask")
    if ids.dtype.is_floating_point or ids.dtype.is_complex:
        raise TypeError(f"DistTensor row ids must be integers, got {ids.dtype}")
    return ids.to(torch.int64) if ids.dtype != torch.int64 else ids


class SNIKVClient:
    """Sits in front of DGL's KVClient ``pull`` and ``push`` (the trainer's one instance).

    Created by :func:`enable`; in standalone mode (``standalone=True``) it touches nothing.
    """

    def __init__(self, kv, cfg: SNIConfig, standalone: bool = False):
        self.kv, self.cfg, self.standalone = kv, cfg, standalone
        self.schedule = SyncSchedule(cfg.warmup, cfg.sync_interval, cfg.enabled)  # the run's one schedule
        self.tensors = {}
        self._agent = None
        self.agent_started = False
        self._next_table = 0
        self._halo = None  # (ids, in-edge counts) of this partition's halo nodes
        self._cache_left = None  # bytes of the feature cache budget not yet given to a tensor
        self.notices = None
        if standalone:
            self.original_pull = self.original_push = None
            return
        self.original_pull, self.original_push = kv.pull, kv.push
        # where rows may be held in memory, writes that may leave copies stale are posted
        self.notices = NoticeBoard(kv.machine_id) if cfg.enabled and (
            may_serve_stale(cfg) or self._cache_on()) else None
        kvclient_pull.install(kv, self.pull)  # DistTensor.__getitem__ calls self.kvstore.pull(...)
        kvclient_push.install(kv, self.push)  # DistTensor.__setitem__ calls self.kvstore.push(...)

    @property
    def managed(self) -> dict:
        """The tensors whose rows may be served or cached now, by KVStore name."""
        return {n: t for n, t in self.tensors.items() if t.role != "plain"}

    def register(self, tensor, created_by_script: bool) -> None:
        """A DistTensor was constructed: decide its role (once per KVStore name)."""
        if self.standalone or not self.cfg.enabled:
            return
        name, user = tensor.kvstore_key, tensor.tensor_name
        if name in self.tensors and not tensor.created_data:
            # another handle on a known tensor: a buffer reused (persistent=True, as evaluation
            # code does), not the per-layer exchange
            self.tensors[name].on_new_handle()
            return
        policy = tensor.part_policy
        graph_node_data = not created_by_script and policy.policy_str.startswith("node")
        if user in self.cfg.static or (graph_node_data and user not in self.cfg.tensors):
            role = "static" if self._cache_on() else "plain"
        elif user in self.cfg.tensors:
            role = "named"
        elif created_by_script and not self.cfg.tensors:
            role = "exchange"
        else:
            role = "plain"
        self.tensors[name] = ServedTensor(self, name, user, role)

    def read_notices(self) -> None:
        """Apply what other machines wrote since the last look (before a pull from memory)."""
        for name, ids in self.notices.news():
            t = self.tensors.get(name)
            if t is not None:
                t.on_notice(ids)

    def _cache_on(self) -> bool:
        return cache_budget(self.cfg.feature_cache_bytes, 1 << 40) > 0

    def new_static_cache(self, tensor: ServedTensor) -> StaticRowCache:
        """The exact cache of a static tensor's remote rows, sized from ``feature_cache_bytes``."""
        row_bytes = int(np.prod(tensor.shape[1:], dtype=np.int64)) * \
            torch.empty((), dtype=self.kv.get_data_meta(tensor.name)[0]).element_size()
        remote_rows = tensor.shape[0] - tensor.policy.get_part_size()
        text = str(self.cfg.feature_cache_bytes).strip()
        if text.endswith("%"):
            budget = cache_budget(text, remote_rows * row_bytes)
        else:  # one pool per trainer, given out as tensors are created
            if self._cache_left is None:
                self._cache_left = cache_budget(text, 0)
            budget = min(self._cache_left, remote_rows * row_bytes)
            self._cache_left -= budget
        capacity = int(budget // max(row_bytes, 1))
        tensor.counters.extra["cache_capacity_rows"] = capacity
        return StaticRowCache(capacity, ranking=self.halo_ranking)

    def plain_pull(self, tensor: ServedTensor, ids: torch.Tensor) -> torch.Tensor:
        """DGL's own pull, with the remote rows counted."""
        rows = self.original_pull(tensor.name, ids)
        if ids.numel():
            remote = int((tensor.policy.to_partid(ids) != self.kv.machine_id).sum())
            c = tensor.counters
            c.add("remote_rows", remote)
            c.add("pulled_rows", remote)
            c.add("pulled_bytes", remote * (rows.numel() // max(ids.numel(), 1)) * rows.element_size())
        return rows

    def pull(self, name, id_tensor):
        ids = _as_ids(id_tensor)
        t = self.tensors.get(name)
        if t is None:
            return self.original_pull(name, ids)
        t.counters.add("pulls", 1)
        if t.role != "plain" and self.notices is not None:
            self.read_notices()
        if ids.numel() == 0:
            dtype, shape, _ = self.kv.get_data_meta(name)
            return torch.empty((0,) + tuple(shape[1:]), dtype=dtype)
        wire_before = t.counters.extra.get("pulled_bytes", 0)
        rows = t.pull(ids)
        log = t.counters.extra.setdefault("pulled_bytes_by_pull", [])  # benchmarks: bytes per epoch
        if len(log) < t.PULL_LOG:
            log.append(t.counters.extra.get("pulled_bytes", 0) - wire_before)
        return rows

    def push(self, name, id_tensor, data_tensor):
        ids = _as_ids(id_tensor)
        t = self.tensors.get(name)
        if t is not None and ids.numel():
            t.on_push(ids)
        return self.original_push(name, ids, data_tensor)

    def agent(self):
        if self._agent is None:
            self._agent = self.cfg.start_agent()
            self.agent_started = True
        return self._agent

    def new_table_id(self) -> int:
        self._next_table += 1
        return self._next_table

    def halo_ranking(self) -> tuple:
        """This partition's halo node ids and their in-edges into it (empty without a DistGraph)."""
        if self._halo is None:
            g = _STATE["graph"]
            if g is None:
                self._halo = (np.zeros(0, np.int64), np.zeros(0, np.int64))
            else:
                lg = g.local_partition
                u, v = lg.edges(form="uv", order="eid")
                inner = lg.ndata["inner_node"].bool()
                src = lg.ndata[dgl.NID][u[inner[v] & ~inner[u]]].numpy()
                self._halo = np.unique(src, return_counts=True)
        return self._halo

    def edge_counts(self, ids: np.ndarray) -> np.ndarray:
        """Edges from each id into this machine's partition (0 without a DistGraph)."""
        uniq, counts = self.halo_ranking()
        out = np.zeros(ids.size, np.int64)
        if uniq.size:
            pos = np.minimum(np.searchsorted(uniq, ids), uniq.size - 1)
            hit = uniq[pos] == ids
            out[hit] = counts[pos[hit]]
        return out

    def stats(self) -> dict:
        """Per tensor (by its name): its role and counters; ``__switch__``: the switch itself."""
        out = {t.user_name: dict(t.counters.extra, role=t.role) for t in self.tensors.values()}
        out["__switch__"] = dict(agent_started=self.agent_started, standalone=self.standalone)
        return out

    def close(self) -> None:
        if not self.standalone:
            kvclient_pull.uninstall()
            kvclient_push.uninstall()
        if self._agent is not None:
            self._agent.close()
            self._agent = None


def _is_standalone(kv) -> bool:
    return isinstance(kv, SAKVClient) or os.environ.get("DGL_DIST_MODE", "standalone") == "standalone"


def enable(config: SNIConfig | dict | None = None, graph=None) -> SNIKVClient:
    """Switch SNI on for this trainer (after ``dgl.distributed.initialize``). ``config``: the
    settings (a dict, as in ``DGL_SNI_CONFIG``: the switch's preset ``fast`` sets the rest; or
    an :class:`SNIConfig`, whose settings other than the defaults count as given); ``None``:
    from the environment, or the switch's preset alone."""
    if isinstance(config, SNIConfig):
        defaults = SNIConfig().as_dict()
        config = {k: v for k, v in config.as_dict().items() if k in config.given or v != defaults[k]}
    if isinstance(config, dict):
        config = SNIConfig.from_dict(config)
    cfg = config or SNIConfig.from_env() or SNIConfig.from_dict({})
    budget = os.environ.get("DGL_SNI_CACHE_BUDGET")  # dgl-sni launch --cache-budget
    if budget:
        cfg.feature_cache_bytes = budget
        cfg.validate()
    kv = get_kvstore()
    if kv is None:
        raise RuntimeError("dgl_sni.enable() must run after dgl.distributed.initialize()")
    client = _STATE["client"]
    if client is not None and client.kv is not kv:  # a new initialize() after exit_client()
        client.close()
        client = _STATE["client"] = None
        _STATE["graph"] = None
    if client is None:
        standalone = _is_standalone(kv)
        client = _STATE["client"] = SNIKVClient(kv, cfg, standalone=standalone)
        if not standalone:
            dist_tensor_class.install(SNIDistTensor)  # also what DistGraph constructs
            distgraph_init_hook.install(_remember_graph)
        if not _STATE["atexit"]:
            atexit.register(_at_exit)
            _STATE["atexit"] = True
    else:
        client.cfg = cfg
        client.schedule = SyncSchedule(cfg.warmup, cfg.sync_interval, cfg.enabled)
    if graph is not None:
        _STATE["graph"] = graph
    return client


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
    """Make ``dgl.distributed.initialize`` call :func:`enable` in trainers (DGL_SNI=1), and
    make the write notices' RPC services known to this process (servers answer them)."""
    # now, not at initialize: a server may be started without it (dgl.distributed.start_server)
    register_services()
    # before: tier-backed tensors' shm shards stay untouched in servers
    initialize_hook.install(before=kvstore_lazy_init.install, after=_enable_in_trainer)


def _enable_in_trainer() -> None:
    """After ``dgl.distributed.initialize``: :func:`enable` unless this is a server."""
    if os.environ.get("DGL_ROLE", "client") != "server":
        enable()
