"""The peers' own code, from their repositories at pinned commits, on this project's graphs and emulated cluster.

Nothing of a peer is shipped with the project: the script takes a clone (or a bare mirror) of
the peer's repository (:data:`PEERS`: BNS-GCN, PipeGCN), extracts the pinned commit into a
scratch folder and ports it to the CPU there, then trains it on 4 emulated machines (one
network namespace each, every link shaped by ``tc tbf``, as ``dgl-sni train`` runs) and
evaluates every epoch's weights exactly on the whole graph after training. Its summary has
the layout of ``bench_e2e.py``'s runs (per epoch: cumulative training time, loss, validation
and test accuracy; per run: configuration, commit, machine), and each run is judged against
its own code's exact variant of the same seed and against the same seed's interval-1 run of
this project (``--against``, a ``bench_e2e.py`` output trained alongside).

What the port changes, and only that (each textual change is counted against the pinned
commit, so another commit fails loudly rather than running half-ported):

* device strings ``'cuda'`` become ``'cpu'`` and pinned host buffers plain ones; ``.cuda()``
  and ``.pin_memory()`` return the tensor or module itself; CUDA streams, events,
  ``set_device`` and memory statistics do nothing (the peers' gloo paths already move every
  message through host memory, and their threads keep their order);
* DGL 2.1 names what DGL 0.x called ``fn.copy_src`` ``fn.copy_u``;
* its dataset loader reads this project's graph (its own tail, self loops removed then added
  once per node, is kept); its METIS partitioning (by volume, its default) is its own;
* its evaluation, a full-graph inference in a thread on rank 0 every ``--log-every`` epochs,
  runs after training on every epoch's weights instead (the same forward in eval mode), so
  that it neither competes for the 2 shared cores nor is skipped between logs. An epoch is
  timed from the first call of its loop's body to the end of its optimizer step, as its own
  ``Time(s)`` column times it, and over the ranks from the last one starting it to the last
  one ending it (the ranks share this host's clock).

    python benchmarks/peer_code.py --peer bns-gcn --repo /path/to/BNS-GCN --graph syn200k \\
        --seeds 0,1,2 --against benchmarks/results/bns-code-ours.json
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from dgl_sni.report import TARGET_MARGIN  # noqa: E402  (a target: an exact run's best validation minus this)

WORKERS = 4
MASTER_PORT = 18118  # the peers' own default --port


@dataclass(frozen=True)
class Peer:
    """One peer's code: where it lives, how it is ported to the CPU, how its loop is timed and
    which variants of it run (the first is its exact training)."""
    name: str
    key: str  # its runs are named f"{key}-{variant}"
    url: str
    commit: str
    port: tuple  # (file, text, replacement, occurrences at the commit)
    model: str  # its --model
    variants: tuple  # (variant, its extra flags, what it is); the first is its exact training
    epoch_start: str  # "select_node": its loop's body starts by calling it; "train": by calling model.train()
    epoch_end: str  # the timer (an attribute path from its train module) whose clear() ends each epoch
    partition_takes_graph: bool  # graph_partition(g, args), where BNS-GCN's takes args alone
    sizes_on_command_line: bool  # it reads the graph's feature width, classes and training rows from its flags

    def flags(self, variant: str) -> list:
        return next(f for v, f, _ in self.variants if v == variant)

    def run_name(self, variant: str) -> str:
        return f"{self.key}-{variant}"


BNS_GCN = Peer(
    "BNS-GCN", "bns-code", "https://github.com/GATECH-EIC/BNS-GCN", "b4a48bdaf25212bfddce46ec84af0ca2e351be7a",
    port=(("helper/feature_buffer.py", "'cuda'", "'cpu'", 2),
          ("helper/feature_buffer.py", "pin_memory=True", "pin_memory=False", 4),
          ("helper/reducer.py", "pin_memory=True", "pin_memory=False", 1),
          ("helper/utils.py", "'cuda'", "'cpu'", 1),
          ("helper/utils.py", "pin_memory=True", "pin_memory=False", 2),
          ("train.py", "'cuda'", "'cpu'", 5)),
    model="gcn", variants=(("1", ["--sampling-rate", "1.0"], "rate 1: every boundary row, its exact training"),
                           ("0.3", ["--sampling-rate", "0.3"], "rate 0.3"), ("0.1", ["--sampling-rate", "0.1"], "rate 0.1")),
    epoch_start="select_node", epoch_end="comm_timer", partition_takes_graph=False, sizes_on_command_line=False)

PIPEGCN = Peer(
    "PipeGCN", "pipegcn-code", "https://github.com/GATECH-EIC/PipeGCN", "73ab9496f4467c84b0491bb5623a83ebd258045e",
    port=(("helper/feature_buffer.py", "'cuda'", "'cpu'", 5),
          ("helper/reducer.py", "pin_memory=True", "pin_memory=False", 1),
          ("helper/utils.py", "'cuda'", "'cpu'", 2),
          ("module/layer.py", "fn.copy_src(src=", "fn.copy_u(u=", 2),
          ("train.py", "'cuda'", "'cpu'", 6),
          ("train.py", "fn.copy_src(src=", "fn.copy_u(u=", 1)),
    model="graphsage", variants=(("exact", [], "no pipelining, its exact training"),
                                 ("pipeline", ["--enable-pipeline"], "pipelined: rows and gradients one epoch stale"),
                                 ("gf", ["--enable-pipeline", "--feat-corr", "--grad-corr"],
                                  "pipelined, both smoothed (momentum 0.95): PipeGCN-GF")),
    epoch_start="train", epoch_end="ctx.comm_timer", partition_takes_graph=True, sizes_on_command_line=True)

PEERS = {"bns-gcn": BNS_GCN, "pipegcn": PIPEGCN}


class PortError(RuntimeError):
    """The repository given lacks the pinned commit, or its files are not the commit's."""


# ---------------------------------------------------------------------------------- host side
def extract(peer: Peer, repo: str, scratch: str, commit: str | None = None) -> str:
    """Write ``commit`` (the pinned one) of the clone or mirror ``repo`` to ``scratch/src`` and port it."""
    commit = commit or peer.commit
    src = os.path.join(scratch, "src")
    stamp, mark = os.path.join(src, ".ported"), f"{commit} {hashlib.sha256(repr(peer.port).encode()).hexdigest()}"
    if os.path.exists(stamp) and open(stamp).read().strip() == mark:  # this commit, ported as the table says
        return src
    try:
        blob = subprocess.run(["git", "-C", repo, "archive", "--format=tar", commit], check=True,
                              capture_output=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        why = err.stderr.decode().strip() if isinstance(err, subprocess.CalledProcessError) else str(err)
        raise PortError(f"cannot read commit {commit} from {repo} (clone {peer.url}): {why}") from err
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(src, filter="data")
    for rel, old, new, count in peer.port:
        path = os.path.join(src, rel)
        text = open(path).read()
        if text.count(old) != count:
            raise PortError(f"{rel} holds {text.count(old)} of {old!r} where {peer.name}'s commit "
                            f"{peer.commit[:7]} holds {count}")
        with open(path, "w") as fh:
            fh.write(text.replace(old, new))
    with open(stamp, "w") as fh:
        fh.write(mark)
    return src


def graph_flags(name: str) -> list:
    from benchmarks.bench_e2e import GRAPHS
    if name not in GRAPHS:
        raise SystemExit(f"unknown graph '{name}': use one of {', '.join(GRAPHS)}")
    return [str(x) for x in GRAPHS[name]]


def write_graph(name: str, scratch: str) -> str:
    """This project's graph ``name`` as a DGL graph file the peers' loaders read (features normalised as a run does)."""
    path = os.path.join(scratch, f"{name}.bin")
    if os.path.exists(path):
        return path
    import dgl_sni  # noqa: F401  (makes DGL importable with this torch)
    import dgl
    from dgl_sni.config.data import DataConfig
    from dgl_sni.config.flags import add_part_arguments, part_from_args
    from dgl_sni.data import load_dataset
    from dgl_sni.partition import to_dgl_graph
    parser = argparse.ArgumentParser()
    add_part_arguments(parser, DataConfig())  # bench_e2e's flags of the graph, read as dgl-sni train reads them
    cfg = part_from_args(DataConfig, parser.parse_args(graph_flags(name)))
    g = to_dgl_graph(load_dataset(cfg.dataset, cfg.data_dir, **cfg.synthetic_args()).with_feature_norm(cfg.feature_norm))
    g.ndata["feat"], g.ndata["label"] = g.ndata.pop("features").float(), g.ndata.pop("labels").long()
    for degrees in ("in_deg", "out_deg"):  # each peer's partitioning writes its own
        g.ndata.pop(degrees)
    dgl.save_graphs(path + ".tmp", [g])
    os.replace(path + ".tmp", path)
    return path


def their_flags(peer: Peer, a, variant: str, seed: int, master: str, meta: dict) -> list:
    """The peer's own command line for one run (its parser reads it)."""
    flags = ["--dataset", "sni", "--model", peer.model, "--n-partitions", str(WORKERS), "--parts-per-node", "1",
             "--n-epochs", str(a.epochs), "--n-layers", str(a.layers), "--n-hidden", str(a.hidden),
             "--lr", str(a.lr), "--dropout", str(a.dropout), "--use-pp", "--log-every", "10", "--fix-seed",
             "--seed", str(seed), "--backend", "gloo", "--master-addr", master, "--port", str(MASTER_PORT),
             "--no-eval", "--skip-partition", "--partition-method", "metis", "--partition-obj", "vol",
             "--graph-name", f"{a.graph}-{WORKERS}", *peer.flags(variant)]
    if peer.sizes_on_command_line:  # PipeGCN; its partitions lie under partitions/ in its working folder
        flags += ["--n-feat", str(meta["n_feat"]), "--n-class", str(meta["n_class"]), "--n-train", str(meta["n_train"])]
    else:  # BNS-GCN reads them from its partitioning's meta.json, under the folder it is given
        flags += ["--part-path", "partitions"]
    return flags


def self_cmd(*args) -> list:
    return [sys.executable, os.path.abspath(__file__), *map(str, args)]


def inside(peer: Peer, mode: str, src: str, graph_bin: str, workdir: str, record: str | None, flags: list) -> list:
    return self_cmd("--inside", mode, "--peer", peer.key, "--src", src, "--graph-bin", graph_bin, "--workdir", workdir,
                    *(["--record", record] if record else []), "--", *flags)


def graph_meta(graph_bin: str) -> dict:
    import dgl_sni  # noqa: F401
    import dgl
    g = dgl.load_graphs(graph_bin)[0][0]
    return dict(n_feat=int(g.ndata["feat"].shape[1]), n_class=int(g.ndata["label"].max()) + 1,
                n_train=int(g.ndata["train_mask"].sum()))


def partition(peer: Peer, a, src: str, graph_bin: str, workdir: str, meta: dict) -> None:
    """Run the peer's own partitioning once per graph (METIS, in this host's namespace)."""
    name = f"{a.graph}-{WORKERS}"
    if not os.path.exists(os.path.join(workdir, "partitions", name, f"{name}.json")):
        flags = their_flags(peer, a, peer.variants[0][0], 0, "127.0.0.1", meta)
        flags.remove("--skip-partition")
        subprocess.run(inside(peer, "partition", src, graph_bin, workdir, None, flags), check=True)


def train_run(peer: Peer, a, src: str, graph_bin: str, workdir: str, variant: str, seed: int, run_dir: str,
              meta: dict) -> None:
    """One run of the peer's code on 4 emulated machines; each rank writes ``run_dir/rank{r}.pt``."""
    from dgl_sni.cluster import SUBNET, LocalCluster
    os.makedirs(run_dir, exist_ok=True)
    name = f"{a.graph}-{WORKERS}"
    flags = their_flags(peer, a, variant, seed, f"{SUBNET}.1", meta)
    part_config = os.path.join(workdir, "partitions", name, f"{name}.json")
    with LocalCluster(WORKERS, run_dir, mode="netns", bandwidth=a.link, master_port=MASTER_PORT + 1) as cluster:
        cluster.start_trainers(inside(peer, "train", src, graph_bin, workdir, run_dir, flags), part_config)
        cluster.wait(timeout=a.timeout)
    subprocess.run(inside(peer, "evaluate", src, graph_bin, workdir, run_dir,
                          their_flags(peer, a, variant, seed, "127.0.0.1", meta)), check=True)


def summarise(peer: Peer, run_dir: str, variant: str, seed: int, a) -> dict:
    """The run in ``bench_e2e.py``'s layout, from what the ranks recorded and the evaluation wrote."""
    import torch
    from benchmarks.report_suite import machine
    ranks = [torch.load(os.path.join(run_dir, f"rank{r}.pt"), weights_only=True) for r in range(WORKERS)]
    with open(os.path.join(run_dir, "evaluation.json")) as fh:
        ev = json.load(fh)
    epochs = len(ranks[0]["ends"])
    # the ranks meet at every layer's exchange and at the all-reduce, and share this host's clock: an
    # epoch runs from when the last rank began it (or ended the one before) to when the last rank ends it
    times, last_end = [], None
    for e in range(epochs):
        start = max(r["starts"][e] for r in ranks)
        end = max(r["ends"][e] for r in ranks)
        times.append(end - (start if last_end is None else max(start, last_end)))
        last_end = end
    n_train = sum(r["part_train"] for r in ranks)
    curve, elapsed = [], 0.0
    for e in range(epochs):
        elapsed += times[e]
        loss = sum(r["losses"][e] for r in ranks) / n_train
        curve.append(dict(epoch=e, mode="stale" if variant != peer.variants[0][0] else "sync",
                          train_time_s=round(elapsed, 4), loss=round(loss, 5),
                          val_acc=round(ev["val"][e], 6), test_acc=round(ev["test"][e], 6)))
    best = max(range(epochs), key=lambda e: (ev["val"][e], -e))
    sent = sum(r["tx_bytes"] for r in ranks)
    steady = sorted(times[5:]) or sorted(times)
    return dict(
        name=peer.run_name(variant), peer=peer.name, url=peer.url, commit=peer.commit,
        config=dict(variant=variant, flags=peer.flags(variant), seed=seed, model=peer.model, use_pp=True,
                    norm="layer", lr=a.lr, dropout=a.dropout, hidden=a.hidden, layers=a.layers,
                    partition="metis vol", bandwidth=a.link, workers=WORKERS),
        machine=machine(), saved=time.strftime("%Y-%m-%d %H:%M"), epochs=epochs,  # the report's: commit, host
        train_time_s=elapsed, epoch_s=steady[len(steady) // 2], bytes_per_epoch=sent / epochs,
        best_val_acc=ev["val"][best], best_epoch=best, test_acc_at_best_val=ev["test"][best],
        final_test_acc=ev["test"][-1], curve=curve)


def time_to(curve: list, target: float) -> tuple:
    """``(training time s, epochs)`` to the first epoch at or above ``target``, as ``bench_e2e.py`` counts them."""
    from benchmarks.bench_e2e import first_at
    point = first_at(curve, target)
    return (None, None) if point is None else (point["train_time_s"], point["epoch"] + 1)


def judge(run: dict, against: dict | None, seed: int, own_exact: dict | None) -> dict:
    """The run against its own code's exact variant (that run's best validation minus the margin is the
    target) and against the same seed's interval-1 run of this project (its target, its time to it, and
    ``fast``'s where the sweep holds it)."""
    out = {}
    if own_exact is not None and own_exact is not run:
        target = own_exact["best_val_acc"] - TARGET_MARGIN
        t, ep = time_to(run["curve"], target)
        t1, ep1 = time_to(own_exact["curve"], target)
        out["own"] = dict(target_val_acc=target, time_to_target_s=t, exact_time_to_target_s=t1,
                          time_to_target_speedup=t1 / t if t else None,
                          epochs_to_target_ratio=ep / ep1 if ep else None,
                          final_test_delta=run["final_test_acc"] - own_exact["final_test_acc"])
    by_seed = (against or {}).get(str(seed))
    if by_seed:
        ours = {r["name"]: r for r in by_seed["runs"]}
        target = by_seed["target_val_acc"]
        t, ep = time_to(run["curve"], target)
        int1_t, int1_ep = time_to(ours["interval1"]["curve"], target)
        out["ours"] = dict(target_val_acc=target, time_to_target_s=t, interval1_time_to_target_s=int1_t,
                           time_to_target_speedup=int1_t / t if t else None,
                           epochs_to_target_ratio=ep / int1_ep if ep else None,
                           final_test_delta=run["final_test_acc"] - ours["interval1"]["final_test_acc"],
                           fast_time_to_target_s=time_to(ours["fast"]["curve"], target)[0] if "fast" in ours else None)
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--peer", required=True, choices=sorted(PEERS))
    p.add_argument("--repo", required=True, help="a clone or bare mirror of the peer's repository holding its pinned commit")
    p.add_argument("--graph", default="syn200k")
    p.add_argument("--link", default="1gbit")
    p.add_argument("--variants", default=None, help="comma-separated (default: every one; the first is its exact training)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=150)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--against", default=None, help="a bench_e2e.py result holding the same seeds' interval1 runs")
    p.add_argument("--scratch", default=None, help="default benchmarks/results/<peer>-code/")
    p.add_argument("--out", default=None, help="default benchmarks/results/<peer>-code.json")
    a = p.parse_args(argv)
    peer = PEERS[a.peer]
    known = [v for v, *_ in peer.variants]
    variants = a.variants.split(",") if a.variants else known
    unknown = [v for v in variants if v not in known]
    if unknown:
        raise SystemExit(f"--variants: {', '.join(unknown)} not among {peer.name}'s: {', '.join(known)}")
    try:
        seeds = [int(x) for x in a.seeds.split(",")]
    except ValueError as err:
        raise SystemExit(f"--seeds takes comma-separated integers: {err}")
    against = None
    if a.against:
        with open(a.against) as fh:
            against = json.load(fh)["graphs"][a.graph][a.link]["by_seed"]
    results = os.path.join(ROOT, "benchmarks", "results")
    scratch = a.scratch or os.path.join(results, f"{a.peer}-code")
    out = a.out or os.path.join(results, f"{a.peer}-code.json")
    os.makedirs(scratch, exist_ok=True)
    try:
        src = extract(peer, a.repo, scratch)
    except PortError as err:
        raise SystemExit(f"peer_code: {err}")
    graph_bin = write_graph(a.graph, scratch)
    meta = graph_meta(graph_bin)
    partition(peer, a, src, graph_bin, scratch, meta)
    runs = []
    for seed in seeds:
        done = {}
        for variant in variants:
            run_dir = os.path.join(scratch, "runs", f"{a.graph}-{a.link}-{variant}-s{seed}-e{a.epochs}")
            kept = os.path.join(run_dir, "summary.json")
            if not os.path.exists(kept):
                t0 = time.monotonic()
                train_run(peer, a, src, graph_bin, scratch, variant, seed, run_dir, meta)
                with open(kept + ".tmp", "w") as fh:
                    json.dump(summarise(peer, run_dir, variant, seed, a), fh)
                os.replace(kept + ".tmp", kept)
                print(f"{variant} seed {seed}: trained and evaluated in {time.monotonic() - t0:.0f} s", flush=True)
            with open(kept) as fh:
                done[variant] = json.load(fh)
        for variant, run in done.items():
            runs.append(run)  # judged when read (seed_sweeps.summarize_peer_code), against the sweep it names
            line = (f"{run['name']} seed {seed}: epoch {run['epoch_s'] * 1e3:.0f} ms, best val "
                    f"{run['best_val_acc']:.4f}, final test {run['final_test_acc']:.4f}")
            for whose, j in judge(run, against, seed, done.get(known[0])).items():
                x = j["time_to_target_speedup"]
                line += f"; vs {whose} exact: " + (f"{x:.2f}x sooner" if x else "never") + \
                    f", final test {j['final_test_delta']:+.4f}"
            print(line, flush=True)
    with open(out, "w") as fh:
        json.dump(dict(peer=peer.name, url=peer.url, commit=peer.commit, graph=a.graph, link=a.link, workers=WORKERS,
                       epochs=a.epochs, runs=runs), fh)
    print(f"wrote {out}")
    return 0


# ------------------------------------------------------------------ inside the peer's processes
def _cpu_runtime() -> None:
    """The parts of CUDA the peers' code calls, made to work on the CPU."""
    import torch

    class Stream:
        def __init__(self, *args, **kwargs):
            pass

        def wait_stream(self, other):
            pass

        def wait_event(self, event):
            pass

        def synchronize(self):
            pass

    class Event(Stream):
        def record(self, stream=None):
            pass

        def wait(self, stream=None):
            pass

    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.Tensor.pin_memory = lambda self, *args, **kwargs: self
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
    torch.cuda.Stream, torch.cuda.Event = Stream, Event
    torch.cuda.current_stream = lambda *args, **kwargs: Stream()
    torch.cuda.stream = lambda stream: contextlib.nullcontext()
    for name in ("set_device", "reset_peak_memory_stats", "synchronize"):
        setattr(torch.cuda, name, lambda *args, **kwargs: None)
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved"):
        setattr(torch.cuda, name, lambda *args, **kwargs: 0)


def _stub_imports() -> None:
    """Modules the peers import for datasets and metrics these graphs do not use (OGB's loader,
    Yelp's scaler, multi-label F1); this project does not depend on them, so where they are not
    installed they stand in, and a call of one says so. Installed ones are left as they are."""
    import importlib.machinery
    import importlib.util
    import types

    def stand_in(name):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        return module

    def missing(what):
        def call(*args, **kwargs):
            raise NotImplementedError(f"{what} is not installed here; the peer needs it only for other datasets")
        return call

    wanted = (("ogb.nodeproppred", ("DglNodePropPredDataset",)),
              ("sklearn.preprocessing", ("StandardScaler",)), ("sklearn.metrics", ("f1_score",)))
    absent = {p for p in ("ogb", "sklearn") if p not in sys.modules and importlib.util.find_spec(p) is None}
    for name, attrs in wanted:
        parent = name.split(".")[0]
        if parent not in absent:
            continue  # installed: the peer imports the real one
        sys.modules.setdefault(parent, stand_in(parent))
        module = stand_in(name)
        for attr in attrs:
            setattr(module, attr, missing(f"{name}.{attr}"))
        sys.modules[name] = module


def _sent_bytes() -> int:
    """Bytes this network namespace's eth0 has sent (``/proc/net/dev`` is per namespace)."""
    with open("/proc/net/dev") as fh:
        for line in fh:
            name, _, rest = line.partition(":")
            if name.strip() == "eth0":
                return int(rest.split()[8])
    return 0


def _inside(argv: list) -> int:
    mode = argv[0]
    p = argparse.ArgumentParser()
    for flag in ("--peer", "--src", "--graph-bin", "--workdir"):
        p.add_argument(flag, required=True)
    p.add_argument("--record", default=None)
    cut = argv.index("--")
    o = p.parse_args(argv[1:cut])
    peer = next(x for x in PEERS.values() if x.key == o.peer)
    sys.argv = ["main.py", *argv[cut + 1:]]
    sys.path.insert(0, o.src)
    os.chdir(o.workdir)  # its partitions/, checkpoint/ and results/ folders land here
    import dgl_sni  # noqa: F401  (makes DGL importable with this torch)
    import dgl
    import torch
    _cpu_runtime()
    _stub_imports()
    from helper import utils
    from helper.parser import create_parser

    def load_data(*_):  # its loader's tail, on this project's graph
        g = dgl.load_graphs(o.graph_bin)[0][0]
        n_feat, n_class = g.ndata["feat"].shape[1], int(g.ndata["label"].max()) + 1
        for split in ("train", "val", "test"):
            g.ndata[f"{split}_mask"] = g.ndata[f"{split}_mask"].bool()  # saved as uint8
        g.edata.clear()
        g = dgl.add_self_loop(dgl.remove_self_loop(g))
        return g, n_feat, n_class

    utils.load_data = load_data
    args = create_parser()
    if mode == "partition":
        if peer.partition_takes_graph:
            utils.graph_partition(load_data()[0], args)
        else:
            utils.graph_partition(args)
        return 0
    import train
    train.load_data = load_data
    if mode == "evaluate":
        return _evaluate(o, args, train, load_data, torch)
    return _train(o, peer, args, train, torch)


def _train(o, peer: Peer, args, train, torch) -> int:
    rank = int(os.environ["RANK"])
    record = dict(starts=[], ends=[], losses=[], snapshots=[], part_train=0, tx_bytes=0)
    state = dict(model=None, loss=None, sent0=None)

    def epoch_start():
        if state["sent0"] is None:
            state["sent0"] = _sent_bytes()
        record["starts"].append(time.time())

    create_model = train.create_model

    def capture_model(layer_size, args_):
        model = state["model"] = create_model(layer_size, args_)
        if peer.epoch_start == "train":  # its loop's body starts with model.train()
            to_train = model.train

            def train_mode(mode=True):
                if mode:
                    epoch_start()
                return to_train(mode)
            model.train = train_mode
        return model

    train.create_model = capture_model
    if peer.epoch_start == "select_node":  # its loop's body starts by sampling the boundary rows
        select_node = train.select_node

        def sample(boundary, send_size):
            epoch_start()
            return select_node(boundary, send_size)
        train.select_node = sample

    class RecordingLoss(torch.nn.CrossEntropyLoss):
        def forward(self, input, target):
            out = super().forward(input, target)
            state["loss"] = out.item()
            record["part_train"] = int(target.shape[0])
            return out

    timer = train
    for part in peer.epoch_end.split("."):
        timer = getattr(timer, part)
    clear = timer.clear

    def epoch_end():  # its loop's last timer call, after the optimizer step and the log line
        record["ends"].append(time.time())
        record["losses"].append(state["loss"])
        if rank == 0:
            record["snapshots"].append({k: v.detach().clone() for k, v in state["model"].state_dict().items()})
        clear()

    torch.nn.CrossEntropyLoss = RecordingLoss
    timer.clear = epoch_end
    train.init_processes(rank, int(os.environ["WORLD_SIZE"]), args)
    record["tx_bytes"] = _sent_bytes() - (state["sent0"] or 0)
    torch.save(record, os.path.join(o.record, f"rank{rank}.pt"))
    # PipeGCN's pipelined exchange leaves its thread pool's workers running, and tearing the
    # interpreter down under them aborts the process: the record is written, so end here
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _evaluate(o, args, train, load_data, torch) -> int:
    """Every epoch's weights of rank 0, evaluated as its ``evaluate_trans`` does (full graph, eval mode)."""
    g, n_feat, n_class = load_data()
    args.n_feat, args.n_class = n_feat, n_class
    args.n_train = int(g.ndata["train_mask"].sum())
    from helper.utils import get_layer_size
    model = train.create_model(get_layer_size(args.n_feat, args.n_hidden, args.n_class, args.n_layers), args)
    record = torch.load(os.path.join(o.record, "rank0.pt"), weights_only=True)
    feat, labels = g.ndata["feat"], g.ndata["label"]
    val_mask, test_mask = g.ndata["val_mask"], g.ndata["test_mask"]
    out = dict(val=[], test=[])
    with torch.no_grad():
        for snapshot in record["snapshots"]:
            model.load_state_dict(snapshot)
            model.eval()
            logits = model(g, feat)
            out["val"].append(train.calc_acc(logits[val_mask], labels[val_mask]))
            out["test"].append(train.calc_acc(logits[test_mask], labels[test_mask]))
    with open(os.path.join(o.record, "evaluation.json"), "w") as fh:
        json.dump(out, fh)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--inside":
        sys.exit(_inside(sys.argv[2:]))
    sys.exit(main())
