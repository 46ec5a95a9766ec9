"""The process DistDGL runs on every machine, as server and as trainer.

With ``DGL_ROLE=server`` it becomes the machine's ``DistGraphServer`` (inside
``dgl.distributed.initialize``, which never returns for servers). As a trainer it
builds its :class:`~dgl_sni.trainer.LocalView` from the local partition, trains with
a :class:`~dgl_sni.halo.exchange.KVHaloExchange`, and rank 0 writes progress and metrics.

Started by ``dgl-sni train`` on the emulated cluster, or on a real cluster by DGL's
launch tool::

    python3 dgl/tools/launch.py --workspace $PWD --num_trainers 1 --num_servers 1 \
        --num_samplers 0 --part_config parts/g.json --ip_config ip_config.txt \
        "python3 -m dgl_sni.worker --model gcn --layers 2 --epochs 100 --metrics out.json"
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import numpy as np
import torch

import dgl_sni  # noqa: F401
import dgl
from patches import kvstore_lazy_init, rpc_waits

from storage_tier.block import MODELS_WITH_SELF_LOOPS

from .allocator import in_use as allocator_in_use
from .cluster import SERVERS_READY_ENV, ClusterError, check_port_free
from .collective import GlooCollective
from .config import add_train_arguments, from_args, load_sweep, parse_bytes
from .halo import id_sets
from .halo.exchange import KVHaloExchange
from .halo.plan import HaloPlanner, sync_halo_form
from .halo.rows import ROWS_ONLY
from .halo.wire import HaloWire
from .halo.tensors import LayerTensors
from .metrics import Counters, host_steal_s, merge_epoch, peak_rss_mb, summarize, write_metrics
from .partition import read_meta
from .progress import EpochGate, Progress, emit
from .sni.sampling import halo_edge_counts
from .model_file import build
from .trainers import FullGraphTrainer
from .config.output import resume_point
from .trainers.view import build_local_view


def _parse(argv):
    parser = argparse.ArgumentParser(prog="dgl_sni.worker", description=__doc__.split("\n")[0])
    add_train_arguments(parser)
    parser.add_argument("--part-config", default=os.environ.get("DGL_CONF_PATH"))
    parser.add_argument("--ip-config", default=os.environ.get("DGL_IP_CONFIG"))
    parser.add_argument("--progress", default=None, help="append one JSON line per epoch here")
    parser.add_argument("--local-rank", "--local_rank", type=int, default=None,
                        help=argparse.SUPPRESS)  # torch.distributed.launch passes it
    ns = parser.parse_args(argv)
    if not ns.part_config:
        parser.error("--part-config (or DGL_CONF_PATH) is required")
    if not ns.ip_config:
        parser.error("--ip-config (or DGL_IP_CONFIG) is required")
    return ns


def _check_server_port(ip_config: str) -> None:
    server_id = int(os.environ.get("DGL_SERVER_ID", "0"))
    with open(ip_config) as fh:
        lines = [ln.split() for ln in fh if ln.strip()]
    ip, port = lines[server_id][0], int(lines[server_id][1]) if len(lines[server_id]) > 1 else 30050
    check_port_free(ip, port, "DGL server")


# epochs whose records are gathered at once: a gather of Python objects after every epoch
# cost about 5% of the wall time of a 200k-node run at interval 2 (py-spy, rank 0)
MERGE_EVERY = 16


def halo_paths(ran: dict, num_layers: int) -> list:
    """Per exchanged layer, how the run's stale steps took its halo rows (``summed`` or
    ``rows``), from what the exchange did (:meth:`~dgl_sni.halo.exchange.KVHaloExchange.ran`)."""
    stale = ran["halo_forms"].get("stale", {})
    return ["summed" if "sum" in stale.get(str(layer), {}) else "rows" for layer in range(1, num_layers + 1)]


class WorkerSession:
    """One trainer's loaded job: graph, collective, blocks and exchange tensors.

    Everything expensive happens once (DGL start-up, loading the partition, pulling halo
    features); :meth:`run` then trains one configuration, so a sweep of runs shares it.
    """

    def __init__(self, ns):
        self.ns = ns
        self.counters = Counters()
        self.collective = GlooCollective(self.counters)
        self.rank = self.collective.rank
        with open(ns.part_config) as fh:
            graph_name = json.load(fh)["graph_name"]
        self.meta = read_meta(ns.part_config)
        if self.rank == 0 and ns.progress:
            emit(ns.progress, dict(event="starting"))
        self.g = dgl.distributed.DistGraph(graph_name, part_config=ns.part_config)
        orig_path = os.path.join(os.path.dirname(os.path.abspath(ns.part_config)), "orig_nids.npy")
        self.orig_nids = np.load(orig_path, mmap_mode="r") if os.path.exists(orig_path) else None
        self._views, self._tensors, self._read = {}, {}, {}

    def view(self, model: str):
        """(view, owned, halo) for ``model``'s block shape (self loops or not), built once."""
        key = model in MODELS_WITH_SELF_LOOPS
        if key not in self._views:
            self._views[key] = build_local_view(self.g, model, self.counters, self.orig_nids)
        return self._views[key]

    def rows_peers_read(self, model: str) -> np.ndarray:
        """Positions (block order) of the owned rows of ``model``'s view that other trainers
        read: the rows in their halo sets, found once per view with one gather of every
        trainer's halo ids. Where they are few a publish writes only these (on a well-cut
        graph most owned rows are read by no one: 94% on CiteSeer's 4 METIS parts)."""
        key = model in MODELS_WITH_SELF_LOOPS
        if key not in self._read:
            _, owned, halo = self.view(model)
            every = self.collective.all_gather_object(halo.numpy().astype(np.int64))
            others = [ids for rank, ids in enumerate(every) if rank != self.rank]
            read = np.unique(np.concatenate(others)) if others else np.empty(0, dtype=np.int64)
            self._read[key] = np.flatnonzero(np.isin(owned.numpy(), read))
        return self._read[key]

    def tensors(self, dims: list, tier_root: str | None, quantize: int, pipeline: bool = False,
                adaptive: bool = False) -> LayerTensors:
        key = (tuple(dims), tier_root, quantize, pipeline, adaptive)
        if key not in self._tensors:
            self._tensors[key] = LayerTensors(self.g, dims, name=f"sni{len(self._tensors)}",
                                              tier_root=tier_root, quantize=quantize, pipeline=pipeline,
                                              adaptive=adaptive)
        return self._tensors[key]

    def exchange_layout(self, m, view, num_classes: int) -> tuple:
        """``(dims, takes)``: the width of the rows exchanged before each layer that takes halo
        rows, and what each layer can take them as (the input layer first:
        :meth:`~dgl_sni.models.TrainableModel.halo_takes`). A model of the user's shows them
        in a forward pass over a block with halo rows: every trainer that has one runs it, and
        all take the first such trainer's."""
        model = build(m, view.x_src.shape[1], num_classes)
        dims = model.exchange_dims(view.block, view.x_src)
        mine = None if dims is None else (dims, model.halo_takes(view.block, view.x_src))
        found = [d for d in self.collective.all_gather_object(mine) if d is not None]
        return found[0] if found else ([], [ROWS_ONLY])

    def num_classes(self, view) -> int:
        num_classes = self.meta.get("num_classes")
        if num_classes is None:  # partitions not made by dgl-sni: largest label over workers
            num_classes = max(self.collective.all_gather_object(int(view.labels.max()) + 1))
        return num_classes

    def run(self, cfg, progress=None) -> dict | None:
        """Train ``cfg``; rank 0 writes its metrics and returns the summary."""
        collective, counters, rank = self.collective, self.counters, self.rank
        view, owned_gids, halo_gids = self.view(cfg.model.arch)
        num_classes = self.num_classes(view)
        m = cfg.model
        dims, takes = self.exchange_layout(m, view, num_classes)
        if cfg.tier.storage_tier:
            takes = [ROWS_ONLY] * len(takes)  # the tier's engine reads rows unit by unit
        tier_root = os.path.abspath(cfg.tier.storage_tier) if cfg.tier.storage_tier else None
        pipelined = cfg.pipelined and collective.world_size > 1
        adaptive = cfg.sni.bit_choice == "adaptive"
        tensors = self.tensors(dims, tier_root if collective.world_size > 1 else None, cfg.sni.quantize, pipelined,
                               adaptive)
        sni = agent = edge_counts = None
        if cfg.sni_active:
            block_src = view.block.graph.edges()[0].numpy()
            edge_counts = halo_edge_counts(block_src, view.block.num_dst, view.block.num_src)
            sni = cfg.sni
            agent = sni.start_agent()
        sync_halo = sync_halo_form(cfg.sync_sums, view.block, collective)
        pipeline_from = cfg.sni.warmup if pipelined else None
        planner = HaloPlanner(sni, counters, halo_gids.numpy(), tensors.dims, agent=agent, edge_counts=edge_counts,
                              bits=tensors.quantize, tier_backed=tensors.tier_root is not None,
                              pipeline_from=pipeline_from, sum_stale=cfg.stale_sums, sync_sums=sync_halo,
                              sample=cfg.sni.halo_sample, takes=takes,
                              pipeline_smoothing=cfg.sni.smooth if pipelined else 0.0)
        weights = None  # a width per row: the owners weigh each halo row's variance by the rows aggregating it
        if adaptive:
            weights = edge_counts if edge_counts is not None else \
                halo_edge_counts(view.block.graph.edges()[0].numpy(), view.block.num_dst, view.block.num_src)
        wire = HaloWire(self.g, owned_gids, halo_gids, tensors, collective, counters, seed=m.seed, weights=weights,
                        published=self.rows_peers_read(cfg.model.arch),
                        barrier=pipeline_from is not None or (sni is not None and sni.sync_policy == "adaptive"))
        exchange = KVHaloExchange(wire, planner)
        if cfg.tier.storage_tier:
            trainer = self._tier_trainer(cfg, view, num_classes, exchange)
            if tensors.tier_root:
                trainer.write_shard_layouts(tensors.tier_root, self.rank, exchange.owned_local_offsets())
                collective.barrier()  # every server can now find every layout
        else:
            trainer = FullGraphTrainer(cfg.model, view, view.x_src.shape[1], num_classes,
                                       collective=collective, counters=counters, exchange=exchange)
        try:
            resumed_from = self._resume(trainer, cfg) if cfg.output.resume else None
        except BaseException:
            exchange.close(complete=False)
            if cfg.tier.storage_tier:
                trainer.close()  # removes its run directory
            raise
        exchange.watch_weights(trainer.model.exchanged_parameters())
        setup = dict(owned_nodes=int(owned_gids.numel()), halo_nodes=int(halo_gids.numel()),
                     owned_read_by_peers=int(len(self.rows_peers_read(cfg.model.arch))),
                     local_edges=view.block.num_edges)
        setups = collective.all_gather_object(setup)
        gate = EpochGate(cfg.output.epoch_gate, collective) if cfg.output.epoch_gate else None
        epochs, pending = [], []
        finished = False
        try:
            for epoch in range(0 if resumed_from is None else resumed_from + 1, cfg.model.epochs):
                if gate is not None and not gate.wait():
                    break
                rec = self._epoch(trainer, exchange, cfg, epoch, gate)
                if progress:
                    progress.update(rec)  # its global figures: loss, accuracies, mode
                pending.append(rec)
                if len(pending) == MERGE_EVERY:
                    epochs += self._merge(pending)
                    pending = []
            epochs += self._merge(pending)
            finished = True
        finally:
            exchange.close(complete=finished)  # on an error, wait for no peer
            if cfg.tier.storage_tier:
                trainer.close()
        ran = exchange.ran()  # what the training steps did (every rank plans alike)
        rss = collective.all_gather_object(peak_rss_mb())
        if rank != 0:
            return None
        summary = summarize(epochs, rss)
        summary["workers"] = [dict(s, peak_rss_mb=r) for s, r in zip(setups, rss)]
        if resumed_from is not None:
            summary["resumed_from"] = resumed_from  # epochs 0..resumed_from ran before (its checkpoint)
        if cfg.output.metrics:
            write_metrics(cfg.output.metrics, cfg.as_dict(), epochs, summary, partition=self.meta,
                          in_effect=dict(stale_halo="summed" if cfg.stale_sums else "rows",
                                         halo_paths=halo_paths(ran, len(dims)), sync_halo=sync_halo,
                                         **ran, allocator=allocator_in_use()))
        return summary

    def _resume(self, trainer, cfg) -> int:
        """Load the newest checkpoint of ``--resume`` into ``trainer`` on every rank; returns
        its epoch (training goes on at the next). Every rank reads the folder itself: the
        emulated machines share this filesystem; on a real cluster it must be a shared
        filesystem, or the same copy on every machine. The exchange's next step syncs, so
        the agent's new (empty) tables are seeded before any stale step."""
        path = epoch = problem = None
        try:
            path, epoch = resume_point(cfg.output.resume, cfg.model.epochs)
        except ValueError as err:
            problem = str(err)
        seen = self.collective.all_gather_object((epoch, problem))  # every rank fails alike, none hangs
        problems = {p for _, p in seen if p}
        if len(problems) == 1:
            raise ValueError(problems.pop())
        if problems:
            raise ValueError("; ".join(f"rank {r}: {p}" for r, (_, p) in enumerate(seen) if p))
        if len({e for e, _ in seen}) > 1:
            raise ValueError(f"--resume {cfg.output.resume}: the ranks see different newest checkpoints "
                             f"(epochs {[e for e, _ in seen]}); on a real cluster the folder must be "
                             f"shared, or the same copy on every machine")
        trainer.load_checkpoint(path)
        trainer.exchange.resume_at(trainer.step)
        if self.rank == 0:
            print(f"dgl-sni: resuming from {path} (epoch {epoch}, step {trainer.step})", file=sys.stderr)
        return epoch

    def _tier_trainer(self, cfg, view, num_classes: int, exchange):
        """A :class:`~dgl_sni.trainers.tier.TierTrainer` for this worker's view.

        P sub-partitions: ``--subparts``, or enough that one sub-partition's working set
        (at most ~8 rows of floats per gathered source row and layer width, see the
        engine's memory bound) fits ``--device-mem-budget``. With several workers the
        exchanged rows are the raw activations (no dropout hoisting), so the halo rows
        mean the same to every worker and to the agent.
        """
        from .trainers.tier import TierTrainer
        width = max([view.x_src.shape[1], cfg.model.hidden * (cfg.model.heads if cfg.model.model == "gat" else 1)])
        budget = parse_bytes(cfg.tier.device_mem_budget, "--device-mem-budget")
        parts = cfg.tier.subparts or max(1, -(-8 * 4 * width * view.block.num_src // budget))
        parts = min(parts, view.block.num_dst)
        return TierTrainer(cfg.model, view, view.x_src.shape[1], num_classes, num_subparts=parts,
                           storage_dir=os.path.join(os.path.abspath(cfg.tier.storage_tier), f"worker{self.rank}"),
                           host_cache_budget=parse_bytes(cfg.tier.host_cache_budget, "--host-cache-budget"),
                           collective=self.collective, exchange=exchange, counters=self.counters,
                           hoist_dropout=self.collective.world_size == 1)

    def _merge(self, records: list) -> list:
        """Every worker's records of the same epochs, merged per epoch (one gather)."""
        if not records:
            return []
        return [merge_epoch(list(same)) for same in zip(*self.collective.all_gather_object(records))]

    def _epoch(self, trainer, exchange, cfg, epoch: int, gate) -> dict:
        counters = self.counters
        cpu, steal = time.process_time(), host_steal_s()
        rec = trainer.train_epoch(epoch)
        start = time.perf_counter()  # what the step left running (pipelined rows, transfer scoring)
        trainer.exchange.complete_step()  # finishes now, charged to the step
        rec["time_s"] += time.perf_counter() - start
        rec["cpu_s"] = time.process_time() - cpu  # every thread of this trainer process
        if steal is not None:  # the host's cores lost to the hypervisor meanwhile (shared VMs)
            rec["steal_s"] = host_steal_s() - steal
        exchange.watch_loss(trainer.epoch_step, rec["mode"], rec["loss"])
        evaluate = (epoch + 1) % cfg.model.eval_every == 0 or epoch == cfg.model.epochs - 1
        if gate is not None:
            gate.done()
        rec.update(counters.snapshot_and_reset())
        rec["comp_s"] = max(rec["time_s"] - rec["comm_s"] - rec["sync_s"], 0.0)
        if evaluate:
            start = time.perf_counter()
            rec.update(trainer.evaluate())
            rec["eval_s"] = time.perf_counter() - start
            ev = counters.snapshot_and_reset()
            rec["eval_bytes"] = ev["bytes_sent"] + ev["bytes_recv"]
        rec.update(trainer.exchange.end_epoch())
        ckpt_dir = cfg.output.checkpoints_to  # --checkpoint-dir, else the --resume folder
        if self.rank == 0 and ckpt_dir and (epoch + 1) % cfg.output.checkpoint_every == 0:
            os.makedirs(ckpt_dir, exist_ok=True)
            trainer.save_checkpoint(os.path.join(ckpt_dir, f"epoch_{epoch}.pt"), epoch)
        return rec


def run_trainer(ns) -> None:
    """Train the configuration in ``ns``, or every run of ``--sweep``, in one session."""
    base = from_args(ns)
    runs = load_sweep(base.output.sweep, base) if base.output.sweep else [base]
    session = WorkerSession(ns)
    total = sum(r.model.epochs for r in runs)
    progress = Progress(total, base.output.quiet, ns.progress) if session.rank == 0 else None
    summaries = []
    for index, cfg in enumerate(runs):
        if progress:
            progress.begin_run(index, len(runs))
        summaries.append(session.run(cfg, progress))
    if progress:
        progress.close(summaries[0] if len(summaries) == 1 else dict(runs=len(summaries)))
    session.collective.barrier()


SERVERS_WAIT_S = 600.0  # at most this long for the launcher's gate; then DGL's own retries apply


def _wait_for_servers(ready: str | None, poll_s: float = 0.02, limit_s: float = SERVERS_WAIT_S) -> bool:
    """Under ``dgl-sni train``: wait until the launcher has seen every server listen (it creates
    ``ready``; see ``LocalCluster.start_trainers``), so DGL's first try to connect succeeds.
    Elsewhere (DGL's launch tool) nothing to wait for. The launcher stops the run if a server
    dies; after ``limit_s`` the trainer connects anyway. Returns whether the gate opened."""
    deadline = time.monotonic() + limit_s
    while ready and not os.path.exists(ready):
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


def main(argv=None) -> int:
    ns = _parse(argv if argv is not None else sys.argv[1:])
    id_sets.register_services()  # servers answer the halo exchange's registered-set requests
    rpc_waits.install()  # servers and trainers start together: retry connecting at once
    if os.environ.get("DGL_ROLE", "client") == "server":
        try:
            _check_server_port(ns.ip_config)
        except ClusterError as err:
            print(f"dgl-sni: {err}", file=sys.stderr)
            return 3
        kvstore_lazy_init.install()  # tier-backed shards stay empty in this server
        dgl.distributed.initialize(ns.ip_config)
        return 0  # not reached: servers exit inside initialize
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    kvstore_lazy_init.install()
    _wait_for_servers(os.environ.get(SERVERS_READY_ENV))
    dgl.distributed.initialize(ns.ip_config)
    try:
        run_trainer(ns)
    except Exception:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)  # peers are blocked in collectives; do not wait on DGL's exit barrier
    dgl.distributed.exit_client()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # everything is written and released; skip tearing down torch and DGL (1 s)


if __name__ == "__main__":
    sys.exit(main())
