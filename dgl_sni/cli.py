"""``dgl-sni``: partition graphs, train full-graph on a local cluster, launch DistDGL scripts.

Subcommands:

* ``partition`` -- a dataset into DGL's partition format (METIS or random);
* ``train`` -- partition, start an emulated cluster, train, write metrics;
* ``launch`` -- run any DistDGL trainer script on the emulated cluster;
* ``cleanup`` -- remove namespaces left behind by killed runs;
* ``report`` -- plots and a summary of metrics files (:mod:`dgl_sni.report`);
* ``estimate`` -- the epoch time of a cluster from costs measured here (:mod:`dgl_sni.estimate`);
* ``agent`` -- standalone agents (``start``/``status``/``stop``) and ``deploy`` to BlueField DPUs
  (:mod:`dgl_sni.agent_cli`).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile

from .agent_cli import add_agent_parser
from .allocator import TCMALLOC_PACKAGE, TCMALLOC_SONAME
from .allocator import resolve as resolve_allocator
from .cluster import ClusterError, LocalCluster, cleanup_stale_namespaces, netns_available, python_cmd
from .config import (METHODS, ClusterConfig, DataConfig, add_part_arguments, add_train_arguments, from_args,
                     load_sweep, part_from_args)
from .config.output import check_writable
from .data import DatasetError, load_dataset

# DGL and torch are imported by the subcommands that need them (dgl_sni.partition), so
# that ``--help`` stays fast and works without them.


def _fail(message: str, code: int = 2) -> int:
    print(f"dgl-sni: error: {message}", file=sys.stderr)
    return code


def _cluster_mode(requested: str, workers: int) -> str:
    if requested != "auto":
        return requested
    ok, why = netns_available()
    if ok:
        return "netns"
    if workers == 1:
        return "loopback"
    raise ClusterError(f"{why}; run as root, or use --workers 1 (loopback)")


# ----------------------------------------------------------------------------- partition

def _load(cfg: DataConfig):
    return load_dataset(cfg.dataset, cfg.data_dir, **cfg.synthetic_args()).with_feature_norm(cfg.feature_norm)


def cmd_partition(ns) -> int:
    from .partition import partition
    check_writable("--out", ns.out, folder=True)
    data = _load(part_from_args(DataConfig, ns))
    config = partition(data, ns.parts, ns.out, method=ns.method, graph_name=ns.graph_name,
                       quiet=not ns.verbose)
    with open(os.path.join(ns.out, "sni_meta.json")) as fh:
        meta = json.load(fh)
    print(f"{config}: {ns.parts} parts ({ns.method}), edge cut {meta['edge_cut']:.3f}, "
          f"alpha {meta['alpha']:.2f}, balance {meta['balance']:.3f}, {meta['seconds']:.1f} s")
    return 0


# ----------------------------------------------------------------------------- train

class _ProgressTail:
    """Follows rank 0's progress file and draws one tqdm line per run."""

    def __init__(self, path: str, epochs: int, quiet: bool):
        self.path, self.offset, self.summary, self.run = path, 0, None, ""
        self.bar = None
        if not quiet:
            from .progress import progress_bar
            self.bar = progress_bar(epochs, "starting cluster")

    def poll(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path) as fh:
            fh.seek(self.offset)
            chunk = fh.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        for line in complete.splitlines():
            event = json.loads(line)
            if event["event"] == "starting" and self.bar is not None:
                self.bar.set_description("loading partitions")
            elif event["event"] == "run" and self.bar is not None:
                self.run = f"run {event['index'] + 1}/{event['count']} "
            elif event["event"] == "epoch" and self.bar is not None:
                self.bar.set_description(self.run + event["mode"], refresh=False)
                post = dict(loss=f"{event['loss']:.4f}")
                if "val_acc" in event:
                    post["val"] = f"{event['val_acc']:.3f}"
                self.bar.set_postfix(post, refresh=False)  # drawn by update, at its interval
                self.bar.update(1)
            elif event["event"] == "done":
                self.summary = event["summary"]

    def close(self) -> None:
        self.poll()
        if self.bar is not None:
            self.bar.close()


def _summary_line(s: dict, metrics_path) -> str:
    parts = []
    if s.get("best_val_acc") is not None:
        parts.append(f"best val acc {s['best_val_acc']:.4f} (epoch {s['best_epoch']}), "
                     f"test acc there {s['test_acc_at_best_val']:.4f}")
    if s:
        parts.append(f"{s['epochs']} epochs in {s['total_time_s']:.2f} s of training, "
                     f"{s['total_bytes'] / 2**20:.1f} MiB exchanged, peak trainer RSS {s['peak_rss_mb']:.0f} MiB")
    if metrics_path:
        parts.append(f"metrics in {metrics_path}")
    return "; ".join(parts) or "no epoch ran"


def _check_models(runs: list, data) -> None:
    """Build each model file's model once here, so that a file without ``build``, a ``build``
    that returns no module, or a model that cannot be trained on partitions is refused before
    any machine starts (a ``ValueError`` naming the problem)."""
    from .model_file import build
    for spec in dict.fromkeys(r.model.model_file for r in runs if r.model.model_file):
        cfg = next(r.model for r in runs if r.model.model_file == spec)
        build(cfg, data.feat_dim, data.num_classes)


def cmd_train(ns) -> int:
    from .partition import partition
    cfg = from_args(ns)
    cl, out = cfg.cluster, cfg.output
    out.check_writable()  # before anything trains: a run must be able to write what it trained
    if cfg.tier.storage_tier:
        check_writable("--storage-tier", cfg.tier.storage_tier, folder=True)
    mode = _cluster_mode(cl.cluster, cl.workers)
    allocator, preload = resolve_allocator(cl.allocator)
    if allocator != "tcmalloc" and cl.allocator == "auto":
        print(f"note: {TCMALLOC_SONAME} is not installed (Debian's {TCMALLOC_PACKAGE}): the workers use "
              "the system malloc, which page-faults large tensors again every epoch", file=sys.stderr)
    data = _load(cfg.data)
    if cl.workers > data.num_nodes:
        raise DatasetError(f"--workers {cl.workers} exceeds the {data.num_nodes} nodes of the graph")
    runs = load_sweep(out.sweep, cfg) if out.sweep else [cfg]  # validates the sweep early
    _check_models(runs, data)
    keep = cl.run_dir is not None
    run_dir = os.path.abspath(cl.run_dir) if keep else tempfile.mkdtemp(prefix="dgl-sni-run-")
    try:
        os.makedirs(run_dir, exist_ok=True)
        part_config = partition(data, cl.workers, os.path.join(run_dir, "parts"),
                                method=cl.partition, graph_name="graph")
        del data
        if out.metrics:
            out.metrics = os.path.abspath(out.metrics)
        if out.checkpoint_dir:
            out.checkpoint_dir = os.path.abspath(out.checkpoint_dir)
        progress_path = os.path.join(run_dir, "progress.jsonl")
        if os.path.exists(progress_path):
            os.remove(progress_path)
        worker = python_cmd("dgl_sni.worker", *cfg.to_argv(), "--part-config", part_config,
                            "--ip-config", os.path.join(run_dir, "ip_config.txt"),
                            "--progress", progress_path)
        if out.sweep:
            out.sweep = os.path.abspath(out.sweep)
        tail = _ProgressTail(progress_path, sum(r.model.epochs for r in runs), out.quiet)
        try:
            with LocalCluster(cl.workers, run_dir, mode=mode, bandwidth=cl.bandwidth,
                              port=cl.port, master_port=cl.master_port,
                              omp_threads=cl.threads, preload=preload) as cluster:
                cluster.start_servers(worker, part_config)
                cluster.start_trainers(worker, part_config, gate=True)
                cluster.wait(on_poll=tail.poll, timeout=cl.timeout)
        finally:
            tail.close()
        summary = tail.summary or {}
        print(_summary_line(summary, out.metrics) if "runs" not in summary
              else f"{summary['runs']} runs done" + (f"; metrics in {out.metrics}/" if out.metrics else ""))
        return 0
    finally:
        if not keep:
            shutil.rmtree(run_dir, ignore_errors=True)


# ----------------------------------------------------------------------------- launch

# DGL launch tool options that cannot apply to machines emulated on this host, and why
_DGL_LAUNCH_UNSUPPORTED = {
    "workspace": "processes start in the folder dgl-sni launch is run from (its working directory); "
                 "cd there first",
    "ip_config": "the emulated cluster writes its own ip_config; pass {ip_config} to the script",
    "ssh_port": "the emulated machines are namespaces on this host, not reached over ssh",
    "ssh_username": "the emulated machines are namespaces on this host, not reached over ssh",
    "extra_envs": "the environment of dgl-sni launch is passed on as it is: set the variables before it",
    "keep_alive": "the emulated servers stop with the run",
}


def cmd_launch(ns) -> int:
    command = list(ns.command)
    if command and command[0] == "--":
        command = command[1:]
    for name, why in _DGL_LAUNCH_UNSUPPORTED.items():
        if getattr(ns, f"dgl_{name}") is not None:
            return _fail(f"--{name} of DGL's launch tool is not supported by dgl-sni launch: {why}")
    if not command:
        return _fail("launch needs a command after '--', e.g. -- python3 train.py")
    if ns.cache_budget is not None:
        from .config.sni import cache_budget
        try:
            cache_budget(ns.cache_budget, 0)
        except ValueError as err:
            return _fail(f"--cache-budget: {err}")
        os.environ["DGL_SNI_CACHE_BUDGET"] = ns.cache_budget  # read by the switch in every trainer
        if not os.environ.get("DGL_SNI_CONFIG"):
            os.environ.setdefault("DGL_SNI", "1")  # a budget means the switch is on
    if not os.path.exists(ns.part_config):
        return _fail(f"--part-config {ns.part_config} does not exist")
    mode = _cluster_mode(ns.cluster, ns.workers)
    with open(ns.part_config) as fh:
        parts = json.load(fh)["num_parts"]
    if parts != ns.workers:
        return _fail(f"{ns.part_config} has {parts} partitions but --workers is {ns.workers}")
    keep = ns.run_dir is not None
    run_dir = os.path.abspath(ns.run_dir) if keep else tempfile.mkdtemp(prefix="dgl-sni-launch-")
    part_config = os.path.abspath(ns.part_config)
    try:
        with LocalCluster(ns.workers, run_dir, mode=mode, bandwidth=ns.bandwidth, port=ns.port,
                          master_port=ns.master_port, omp_threads=ns.threads, trainers=ns.num_trainers,
                          samplers=ns.num_samplers, servers=ns.num_servers, cwd=os.getcwd()) as cluster:
            subst = dict(ip_config=cluster.ip_config, part_config=part_config)
            command = [arg.format(**subst) if "{" in arg else arg for arg in command]
            cluster.start_servers(command, part_config)
            cluster.start_trainers(command, part_config, log=False)
            cluster.wait(timeout=ns.timeout)
        return 0
    finally:
        if not keep:
            shutil.rmtree(run_dir, ignore_errors=True)


def cmd_cleanup(ns) -> int:
    removed = cleanup_stale_namespaces()
    print(f"removed {len(removed)} stale namespace(s)" + (": " + " ".join(removed) if removed else ""))
    return 0


# ----------------------------------------------------------------------------- report

def cmd_report(ns) -> int:
    from .report import draw, format_summary, load_runs, summarize
    runs = load_runs(ns.runs, ns.labels.split(",") if ns.labels else None)
    print(format_summary(summarize(runs)))
    if ns.out:
        written = draw(runs, ns.out)
        print(f"plots: {', '.join(sorted({os.path.splitext(os.path.basename(p))[0] for p in written}))} "
              f"(PNG and SVG) in {ns.out}")
    return 0


def cmd_estimate(ns) -> int:
    from . import estimate as est
    meta = {}
    if ns.fit:
        runs = est.load(ns.fit, ns.cores)
        costs = est.fit(runs)
        print(est.format_check(est.check(costs, runs)))
        print("each graph with the costs fitted on the others only:")
        print(est.format_check(est.holdout(runs)))
        if ns.save:
            est.save(costs, ns.save, dict(fitted_on=ns.fit, runs=len(runs)))
            print(f"costs in {ns.save}")
    else:
        path = ns.costs or est.DEFAULT_COSTS
        meta = est.read_file(path)
        costs = est.Costs(**meta["costs"])
        if not ns.costs:
            print(f"costs shipped with dgl-sni: {meta.get('fitted_on', '?')} ({meta.get('runs', '?')} runs; largest "
                  f"error with each graph held out {meta.get('holdout_error', float('nan')):.0%})")
    if ns.workers is None:
        if ns.plot:
            return _fail("--plot needs a cluster to project: --workers, --nodes, --avg-degree, --feat-dim, --classes")
        return 0
    missing = [f"--{k.replace('_', '-')}" for k in ("nodes", "avg_degree", "feat_dim", "classes")
               if getattr(ns, k) is None]
    if missing:
        return _fail(f"a projection needs {', '.join(missing)}")
    if ns.compute_speed <= 0:
        return _fail(f"--compute-speed must be positive, got {ns.compute_speed}")
    ratio = ns.halo_ratio if ns.halo_ratio is not None else meta.get("halo_ratio", est.HALO_RATIO)
    owned = ns.nodes / ns.workers
    cl = est.Cluster(workers=ns.workers, rate_bits=est._rate(ns.bandwidth), owned=owned, halo=ratio * owned,
                     edges=owned * (ns.avg_degree + 1), feat_dim=ns.feat_dim, hidden=ns.hidden, classes=ns.classes,
                     layers=ns.layers, bits=ns.bits, interval=ns.interval, cores=None, compute_speed=ns.compute_speed)
    out = est.project(costs, cl)
    print(f"{ns.workers} workers, {ns.bandwidth or 'unshaped'} links, {ns.nodes} nodes of degree {ns.avg_degree}, "
          f"halo ratio {ratio:.2f}, compute x{ns.compute_speed:g}: sync step {out['sync_s'] * 1000:.0f} ms (compute "
          f"{out['compute_s'] * 1000:.0f}, exchange {out['comm_s'] * 1000:.0f}), stale step {out['stale_s'] * 1000:.0f} "
          f"ms; epoch at interval {ns.interval}, {ns.bits}-bit: {out['epoch_s'] * 1000:.0f} ms, {out['speedup']:.2f}x "
          f"interval 1's {out['exact_epoch_s'] * 1000:.0f} ms")
    print("assumptions: " + "; ".join(est.ASSUMPTIONS))
    if ns.plot:
        est.plot_advantage(costs, cl, ns.plot)
        print(f"plot in {ns.plot}")
    return 0


# ----------------------------------------------------------------------------- parser

def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dgl-sni", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="cmd", required=True)

    p = sub.add_parser("partition", help="partition a dataset into DGL's format")
    add_part_arguments(p.add_argument_group(DataConfig.TITLE), DataConfig())
    p.add_argument("--parts", type=int, required=True, help="number of partitions")
    p.add_argument("--method", default=ClusterConfig().partition, choices=METHODS, help="partition method")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--graph-name", default=None)
    p.add_argument("--verbose", action="store_true", help="show DGL's partitioning log")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("train", help="full-graph training on an emulated cluster")
    add_train_arguments(p)
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("launch", help="run a DistDGL script on the emulated cluster")
    p.add_argument("--part-config", required=True, help="the partitions' JSON file (as DGL writes it)")
    add_part_arguments(p.add_argument_group(ClusterConfig.TITLE), ClusterConfig(),
                       exclude=("partition",), required=("workers",))
    dgl = p.add_argument_group("as DGL's launch tool (per emulated machine)")
    dgl.add_argument("--num_trainers", "--num-trainers", type=int, default=1,
                     help="trainer processes per machine (torch.distributed ranks)")
    dgl.add_argument("--num_samplers", "--num-samplers", type=int, default=0,
                     help="sampler processes per trainer")
    dgl.add_argument("--num_servers", "--num-servers", type=int, default=1,
                     help="DGL servers per machine (the first one main, the others backups)")
    for name in _DGL_LAUNCH_UNSUPPORTED:
        dgl.add_argument(f"--{name}", dest=f"dgl_{name}", default=None, help=argparse.SUPPRESS)
    p.add_argument("--cache-budget", default=None,
                   help="memory per trainer for the exact cache of remote static node data "
                        "(feature_cache_bytes), e.g. 512M or 20%% of the remote rows; 0: off. Turns "
                        "DGL_SNI on unless DGL_SNI or DGL_SNI_CONFIG is set")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- python3 SCRIPT.py ARGS ({ip_config} and {part_config} are filled in)")
    p.set_defaults(func=cmd_launch)

    p = sub.add_parser("report", help="plots and a summary of metrics files, several runs overlaid")
    p.add_argument("runs", nargs="+", help="metrics files (dgl-sni train --metrics) or --sweep folders; "
                                           "the first is the reference the others' speed-ups are against")
    p.add_argument("--out", default=None, help="folder for the plots (none: only the summary)")
    p.add_argument("--labels", default=None, help="comma-separated names of the runs, in order")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("estimate", help="the epoch time of a cluster, from costs measured here")
    p.add_argument("--fit", nargs="+", metavar="METRICS", help="fit the costs to these metrics files or folders "
                   "and print the model's error on each configuration")
    p.add_argument("--save", default=None, help="write the fitted costs here (JSON)")
    p.add_argument("--costs", default=None, help="costs saved by --fit --save (default: the costs shipped with dgl-sni, "
                   "fitted to the results report's runs)")
    p.add_argument("--cores", type=int, default=None, help="cores the measured runs' workers shared (default: this host's)")
    p.add_argument("--workers", type=int, default=None, help="project: machines (one worker each)")
    p.add_argument("--bandwidth", default=None, help="project: each machine's link, e.g. 10gbit (none: unshaped)")
    p.add_argument("--nodes", type=int, default=None)
    p.add_argument("--avg-degree", type=float, default=None)
    p.add_argument("--feat-dim", type=int, default=None)
    p.add_argument("--classes", type=int, default=None)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--halo-ratio", type=float, default=None,
                   help="halo rows per owned row (default: as measured at the most machines the costs' runs had)")
    p.add_argument("--compute-speed", type=float, default=1.0,
                   help="a machine's compute against one core of the host the costs were fitted on (a GPU: "
                        "a factor you state, e.g. 20)")
    p.add_argument("--plot", default=None, metavar="FILE.png",
                   help="draw the speed-up of --interval/--bits over link rates, for compute x1, x10 and x100")
    p.add_argument("--interval", type=int, default=1, help="sync interval")
    p.add_argument("--bits", type=int, default=32, help="bits of the exchanged rows (32, 8, 4)")
    p.set_defaults(func=cmd_estimate)

    p = sub.add_parser("cleanup", help="remove namespaces left by killed runs")
    p.set_defaults(func=cmd_cleanup)

    add_agent_parser(sub)
    return parser


def main(argv=None) -> int:
    ns = build_parser().parse_args(argv)
    try:
        return ns.func(ns)
    except KeyboardInterrupt:
        return _fail("interrupted; the cluster was torn down", 130)
    except (DatasetError, ClusterError, ValueError, FileNotFoundError) as err:
        return _fail(str(err))


if __name__ == "__main__":
    sys.exit(main())
