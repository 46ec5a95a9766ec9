"""BNS-GCN's own code, from its repository at a pinned commit, on this project's graphs and emulated cluster.

Nothing of BNS-GCN is shipped with the project: the script takes a clone (or a bare mirror) of
https://github.com/GATECH-EIC/BNS-GCN, extracts the pinned commit into a scratch folder and
ports it to the CPU there, then trains it on 4 emulated machines (one network namespace each,
every link shaped by ``tc tbf``, as ``dgl-sni train`` runs) and evaluates every epoch's weights
exactly on the whole graph after training. Its summary has the layout of
``bench_e2e.py``'s runs (per epoch: cumulative training time, loss, validation and test
accuracy; per run: configuration, commit, machine), and each run is judged against the same
seed's interval-1 run of this project (``--against``, a ``bench_e2e.py`` output).

What the port changes, and only that (each textual change is counted against the pinned
commit, so another commit fails loudly rather than running half-ported):

* device strings ``'cuda'`` become ``'cpu'`` and pinned host buffers plain ones; ``.cuda()``
  returns the tensor or module itself; CUDA streams, ``set_device`` and memory statistics do
  nothing (its gloo path already moves every message through host memory);
* its dataset loader reads this project's graph (its own tail, self loops removed then added
  once per node, is kept); its METIS partitioning (``--partition-obj vol``) is its own;
* its evaluation, a full-graph inference in a thread on rank 0 every ``--log-every`` epochs,
  runs after training on every epoch's weights instead (the same forward in eval mode), so
  that it neither competes for the 2 shared cores nor is skipped between logs. Each epoch's
  time is measured from its own ``t0`` point (the sampling at the top of the loop) to the
  end of its optimizer step, as its ``Time(s)`` column measures it.

    python benchmarks/peer_bns_gcn.py --repo /path/to/BNS-GCN --graph syn200k --rates 0.1,1.0 \\
        --seeds 0,1,2 --against benchmarks/measured/2026-12-07/peers-syn200k-bns-fast.json \\
        --out benchmarks/results/bns-gcn-code.json
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import io
import sys
import tarfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from dgl_sni.report import TARGET_MARGIN  # noqa: E402  (a target: an exact run's best validation minus this)

PINNED = "b4a48bdaf25212bfddce46ec84af0ca2e351be7a"  # GATECH-EIC/BNS-GCN, "minor" (its last commit)
URL = "https://github.com/GATECH-EIC/BNS-GCN"
WORKERS = 4
MASTER_PORT = 18118  # its own default --port

# (file, text, replacement, occurrences at the pinned commit)
PORT = (
    ("helper/feature_buffer.py", "device='cuda'", "device='cpu'", 2),
    ("helper/feature_buffer.py", "pin_memory=True", "pin_memory=False", 4),
    ("helper/reducer.py", "pin_memory=True", "pin_memory=False", 1),
    ("helper/utils.py", "device = 'cuda'", "device = 'cpu'", 1),
    ("helper/utils.py", "pin_memory=True", "pin_memory=False", 2),
    ("train.py", "torch.device('cuda'.format())", "torch.device('cpu')", 3),
    ("train.py", "minus_one_tensor(part_size, 'cuda')", "minus_one_tensor(part_size, 'cpu')", 1),
    ("train.py", "device='cuda')", "device='cpu')", 1),
)


class PortError(RuntimeError):
    """The repository given is not the pinned commit's layout, or the port did not apply."""


# ---------------------------------------------------------------------------------- host side
def extract(repo: str, scratch: str, commit: str = PINNED) -> str:
    """Write ``commit`` of the clone or mirror ``repo`` to ``scratch/src`` and port it; return that folder."""
    src = os.path.join(scratch, "src")
    stamp = os.path.join(src, ".ported")
    if os.path.exists(stamp) and open(stamp).read().strip() == commit:
        return src
    try:
        blob = subprocess.run(["git", "-C", repo, "archive", "--format=tar", commit], check=True,
                              capture_output=True).stdout
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        why = err.stderr.decode().strip() if isinstance(err, subprocess.CalledProcessError) else str(err)
        raise PortError(f"cannot read commit {commit} from {repo} (clone {URL}): {why}") from err
    shutil.rmtree(src, ignore_errors=True)
    os.makedirs(src)
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(src, filter="data")
    for rel, old, new, count in PORT:
        path = os.path.join(src, rel)
        text = open(path).read()
        if text.count(old) != count:
            raise PortError(f"{rel} holds {text.count(old)} of {old!r} where commit {PINNED[:7]} holds {count}")
        with open(path, "w") as fh:
            fh.write(text.replace(old, new))
    with open(stamp, "w") as fh:
        fh.write(commit)
    return src


def graph_flags(name: str) -> list:
    from benchmarks.bench_e2e import GRAPHS
    if name not in GRAPHS:
        raise SystemExit(f"unknown graph '{name}': use one of {', '.join(GRAPHS)}")
    return [str(x) for x in GRAPHS[name]]


def write_graph(name: str, scratch: str) -> str:
    """This project's graph ``name`` as a DGL graph file its loader reads (features normalised as a run does)."""
    path = os.path.join(scratch, f"{name}.bin")
    if os.path.exists(path):
        return path
    import dgl_sni  # noqa: F401  (makes DGL importable with this torch)
    import dgl
    import torch
    from dgl_sni.config.data import DataConfig
    from dgl_sni.data import load_dataset
    flags = graph_flags(name)  # bench_e2e's flags of the graph, read as dgl-sni train reads them
    fields, defaults = {k.lstrip("-").replace("-", "_"): v for k, v in zip(flags[::2], flags[1::2])}, DataConfig()
    cfg = DataConfig(**{k: type(getattr(defaults, k))(v) for k, v in fields.items()})
    data = load_dataset(cfg.dataset, cfg.data_dir, **cfg.synthetic_args()).with_feature_norm(cfg.feature_norm)
    g = dgl.graph((torch.from_numpy(data.src), torch.from_numpy(data.dst)), num_nodes=data.num_nodes)
    g.ndata["feat"] = torch.from_numpy(data.features).float()
    g.ndata["label"] = torch.from_numpy(data.labels).long()
    for split, idx in (("train", data.train_idx), ("val", data.val_idx), ("test", data.test_idx)):
        mask = torch.zeros(data.num_nodes, dtype=torch.bool)
        mask[torch.from_numpy(idx)] = True
        g.ndata[f"{split}_mask"] = mask
    dgl.save_graphs(path + ".tmp", [g])
    os.replace(path + ".tmp", path)
    return path


def their_flags(a, rate: float, seed: int, graph_name: str, part_path: str, master: str) -> list:
    """BNS-GCN's own command line for one run (its parser reads it)."""
    return ["--dataset", "sni", "--model", "gcn", "--n-partitions", str(WORKERS), "--parts-per-node", "1",
            "--n-epochs", str(a.epochs), "--n-layers", str(a.layers), "--n-hidden", str(a.hidden),
            "--lr", str(a.lr), "--dropout", str(a.dropout), "--sampling-rate", str(rate), "--use-pp",
            "--log-every", "1", "--fix-seed", "--seed", str(seed), "--backend", "gloo",
            "--master-addr", master, "--port", str(MASTER_PORT), "--no-eval", "--skip-partition",
            "--partition-method", "metis", "--partition-obj", "vol",
            "--part-path", part_path, "--graph-name", graph_name]


def self_cmd(*args) -> list:
    return [sys.executable, os.path.abspath(__file__), *map(str, args)]


def partition(a, src: str, graph_bin: str, scratch: str) -> str:
    """Run BNS-GCN's own partitioning once per graph (METIS, in this host's namespace)."""
    part_path = os.path.join(scratch, "partitions")
    name = f"{a.graph}-{WORKERS}"
    if not os.path.exists(os.path.join(part_path, name, "meta.json")):
        flags = their_flags(a, 1.0, 0, name, part_path, "127.0.0.1")
        flags.remove("--skip-partition")
        subprocess.run(self_cmd("--inside", "partition", "--src", src, "--graph-bin", graph_bin, "--", *flags),
                       check=True)
    return part_path


def train_run(a, src: str, graph_bin: str, part_path: str, rate: float, seed: int, run_dir: str) -> None:
    """One run of BNS-GCN's code on 4 emulated machines; each rank writes ``run_dir/rank{r}.pt``."""
    from dgl_sni.cluster import SUBNET, LocalCluster
    os.makedirs(run_dir, exist_ok=True)
    name = f"{a.graph}-{WORKERS}"
    flags = their_flags(a, rate, seed, name, part_path, f"{SUBNET}.1")
    part_config = os.path.join(part_path, name, f"{name}.json")
    with LocalCluster(WORKERS, run_dir, mode="netns", bandwidth=a.link, master_port=MASTER_PORT + 1) as cluster:
        cluster.start_trainers(self_cmd("--inside", "train", "--src", src, "--graph-bin", graph_bin,
                                        "--record", run_dir, "--", *flags), part_config)
        cluster.wait(timeout=a.timeout)


def evaluate_run(src: str, graph_bin: str, run_dir: str, flags: list) -> None:
    subprocess.run(self_cmd("--inside", "evaluate", "--src", src, "--graph-bin", graph_bin,
                            "--record", run_dir, "--", *flags), check=True)


def machine() -> dict:
    import torch
    return dict(host=platform.node(), cpus=os.cpu_count(), python=platform.python_version(),
                torch=torch.__version__, platform=platform.platform())


def summarise(run_dir: str, rate: float, seed: int, a) -> dict:
    """The run in ``bench_e2e.py``'s layout, from what the ranks recorded and the evaluation wrote."""
    import torch
    ranks = [torch.load(os.path.join(run_dir, f"rank{r}.pt"), weights_only=True) for r in range(WORKERS)]
    ev = json.load(open(os.path.join(run_dir, "evaluation.json")))
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
        curve.append(dict(epoch=e, mode="sampled", train_time_s=round(elapsed, 4), loss=round(loss, 5),
                          val_acc=round(ev["val"][e], 6), test_acc=round(ev["test"][e], 6)))
    best = max(range(epochs), key=lambda e: (ev["val"][e], -e))
    sent = sum(r["tx_bytes"] for r in ranks)
    return dict(
        name=f"bns-code-{rate:g}", peer="BNS-GCN", url=URL, commit=PINNED,
        config=dict(sampling_rate=rate, seed=seed, model="gcn", use_pp=True, norm="layer", lr=a.lr,
                    dropout=a.dropout, hidden=a.hidden, layers=a.layers, partition="metis vol",
                    bandwidth=a.link, workers=WORKERS),
        machine=machine(), saved=time.strftime("%Y-%m-%d %H:%M"), epochs=epochs,
        train_time_s=elapsed, epoch_s=sorted(times[5:])[len(times[5:]) // 2] if epochs > 5 else None,
        bytes_per_epoch=sent / epochs, best_val_acc=ev["val"][best], best_epoch=best,
        test_acc_at_best_val=ev["test"][best], final_test_acc=ev["test"][-1], curve=curve)


def time_to(curve: list, target: float) -> tuple:
    """``(training time s, epochs)`` to the first epoch at or above ``target``, as ``bench_e2e.py`` counts them."""
    from benchmarks.bench_e2e import first_at
    point = first_at(curve, target)
    return (None, None) if point is None else (point["train_time_s"], point["epoch"] + 1)


def judge(run: dict, against: dict | None, seed: int, own_exact: dict | None) -> dict:
    """The run against the same seed's interval-1 run of this project (its target, its time to it, and
    ``fast``'s where the sweep holds it), and against its own code at rate 1 (every boundary row)."""
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
    p.add_argument("--repo", required=True, help=f"a clone or bare mirror of {URL} holding commit {PINNED[:7]}")
    p.add_argument("--graph", default="syn200k")
    p.add_argument("--link", default="1gbit")
    p.add_argument("--rates", default="0.1,1.0", help="its --sampling-rate values (1.0: every boundary row, exact)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--epochs", type=int, default=150)
    p.add_argument("--layers", type=int, default=3)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--dropout", type=float, default=0.5)
    p.add_argument("--timeout", type=float, default=1800)
    p.add_argument("--against", default=None, help="a bench_e2e.py result holding the same seeds' interval1 runs")
    p.add_argument("--scratch", default=os.path.join(ROOT, "benchmarks", "results", "bns-gcn-code"))
    p.add_argument("--out", default=os.path.join(ROOT, "benchmarks", "results", "bns-gcn-code.json"))
    a = p.parse_args(argv)
    try:
        rates = [float(x) for x in a.rates.split(",")]
        seeds = [int(x) for x in a.seeds.split(",")]
    except ValueError as err:
        raise SystemExit(f"--rates and --seeds take comma-separated numbers: {err}")
    if any(not 0 < r <= 1 for r in rates):
        raise SystemExit(f"--rates must lie in (0, 1], got {a.rates}")
    against = None
    if a.against:
        against = json.load(open(a.against))["graphs"][a.graph][a.link]["by_seed"]
    os.makedirs(a.scratch, exist_ok=True)
    src = extract(a.repo, a.scratch)
    graph_bin = write_graph(a.graph, a.scratch)
    part_path = partition(a, src, graph_bin, a.scratch)
    runs = []
    for seed in seeds:
        done = {}
        for rate in rates:
            run_dir = os.path.join(a.scratch, "runs", f"{a.graph}-{a.link}-p{rate:g}-s{seed}-e{a.epochs}")
            kept = os.path.join(run_dir, "summary.json")
            if not os.path.exists(kept):
                t0 = time.monotonic()
                train_run(a, src, graph_bin, part_path, rate, seed, run_dir)
                flags = their_flags(a, rate, seed, f"{a.graph}-{WORKERS}", part_path, "127.0.0.1")
                evaluate_run(src, graph_bin, run_dir, flags)
                with open(kept + ".tmp", "w") as fh:
                    json.dump(summarise(run_dir, rate, seed, a), fh)
                os.replace(kept + ".tmp", kept)
                print(f"p={rate:g} seed {seed}: trained and evaluated in {time.monotonic() - t0:.0f} s", flush=True)
            done[rate] = json.load(open(kept))
        for rate, run in done.items():
            run["judged"] = judge(run, against, seed, done.get(1.0))
            runs.append(run)
            line = (f"p={rate:g} seed {seed}: epoch {run['epoch_s'] * 1e3:.0f} ms, best val "
                    f"{run['best_val_acc']:.4f}, final test {run['final_test_acc']:.4f}")
            for whose, j in run["judged"].items():
                x = j["time_to_target_speedup"]
                line += f"; vs {whose} exact: " + (f"{x:.2f}x sooner" if x else "never") + \
                    f", final test {j['final_test_delta']:+.4f}"
            print(line, flush=True)
    with open(a.out, "w") as fh:
        json.dump(dict(peer="BNS-GCN", url=URL, commit=PINNED, graph=a.graph, link=a.link, workers=WORKERS,
                       epochs=a.epochs, runs=runs), fh)
    print(f"wrote {a.out}")
    return 0


# ------------------------------------------------------------------ inside the peer's processes
def _cpu_runtime() -> None:
    """The parts of CUDA its code calls, made to work on the CPU."""
    import torch

    class Stream:
        def __init__(self, *args, **kwargs):
            pass

        def wait_stream(self, other):
            pass

    torch.Tensor.cuda = lambda self, *args, **kwargs: self
    torch.nn.Module.cuda = lambda self, *args, **kwargs: self
    torch.cuda.Stream = Stream
    torch.cuda.current_stream = lambda *args, **kwargs: Stream()
    torch.cuda.stream = lambda stream: contextlib.nullcontext()
    for name in ("set_device", "reset_peak_memory_stats", "synchronize"):
        setattr(torch.cuda, name, lambda *args, **kwargs: None)
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved"):
        setattr(torch.cuda, name, lambda *args, **kwargs: 0)


def _stub_imports() -> None:
    """Modules its code imports for datasets and metrics these graphs do not use (OGB's loader,
    Yelp's scaler, multi-label F1); this project does not depend on them, so they stand in and say so."""
    import importlib.machinery
    import types

    def stand_in(name):
        module = types.ModuleType(name)
        module.__spec__ = importlib.machinery.ModuleSpec(name, None)
        return module

    def missing(what):
        def call(*args, **kwargs):
            raise NotImplementedError(f"{what} is not installed here; BNS-GCN needs it only for other datasets")
        return call

    for name, attrs in (("ogb.nodeproppred", ("DglNodePropPredDataset",)),
                        ("sklearn.preprocessing", ("StandardScaler",)), ("sklearn.metrics", ("f1_score",))):
        parent = name.split(".")[0]
        sys.modules.setdefault(parent, stand_in(parent))
        module = stand_in(name)
        for attr in attrs:
            setattr(module, attr, missing(f"{name}.{attr}"))
        sys.modules[name] = module


def _sent_bytes() -> int:
    """Bytes this network namespace's eth0 has sent (``/proc/net/dev`` is per namespace)."""
    for line in open("/proc/net/dev"):
        name, _, rest = line.partition(":")
        if name.strip() == "eth0":
            return int(rest.split()[8])
    return 0


def _inside(argv: list) -> int:
    mode = argv[0]
    p = argparse.ArgumentParser()
    p.add_argument("--src", required=True)
    p.add_argument("--graph-bin", required=True)
    p.add_argument("--record", default=None)
    cut = argv.index("--")
    o = p.parse_args(argv[1:cut])
    sys.argv = ["main.py", *argv[cut + 1:]]
    sys.path.insert(0, o.src)
    os.chdir(o.record or os.path.dirname(o.src))  # its checkpoint/ and results/ folders land here
    import dgl_sni  # noqa: F401  (makes DGL importable with this torch)
    import dgl
    import torch
    _cpu_runtime()
    _stub_imports()
    from helper import utils
    from helper.parser import create_parser

    def load_data(args):  # its loader's tail, on this project's graph
        g = dgl.load_graphs(o.graph_bin)[0][0]
        n_feat, n_class = g.ndata["feat"].shape[1], int(g.ndata["label"].max()) + 1
        g.edata.clear()
        g = dgl.add_self_loop(dgl.remove_self_loop(g))
        return g, n_feat, n_class

    utils.load_data = load_data
    args = create_parser()
    if mode == "partition":
        utils.graph_partition(args)
        return 0
    import train
    train.load_data = load_data
    if mode == "evaluate":
        return _evaluate(o, args, train, load_data, torch)

    rank = int(os.environ["RANK"])
    record = dict(starts=[], ends=[], losses=[], snapshots=[], part_train=0, tx_bytes=0)
    state = dict(model=None, loss=None, sent0=None)
    create_model, select_node = train.create_model, train.select_node

    def capture_model(layer_size, args_):
        state["model"] = create_model(layer_size, args_)
        return state["model"]

    def epoch_start(boundary, send_size):  # the first call of its loop's body, right after its t0
        if state["sent0"] is None:
            state["sent0"] = _sent_bytes()
        record["starts"].append(time.time())
        return select_node(boundary, send_size)

    class RecordingLoss(torch.nn.CrossEntropyLoss):
        def forward(self, input, target):
            out = super().forward(input, target)
            state["loss"] = out.item()
            record["part_train"] = int(target.shape[0])
            return out

    timer = train.comm_timer
    clear = timer.clear

    def epoch_end():  # its loop's last call, after the optimizer step and the log line
        record["ends"].append(time.time())
        record["losses"].append(state["loss"])
        if rank == 0:
            record["snapshots"].append({k: v.detach().clone() for k, v in state["model"].state_dict().items()})
        clear()

    train.create_model, train.select_node = capture_model, epoch_start
    torch.nn.CrossEntropyLoss = RecordingLoss
    timer.clear = epoch_end
    train.init_processes(rank, int(os.environ["WORLD_SIZE"]), args)
    record["tx_bytes"] = _sent_bytes() - (state["sent0"] or 0)
    torch.save(record, os.path.join(o.record, f"rank{rank}.pt"))
    return 0


def _evaluate(o, args, train, load_data, torch) -> int:
    """Every epoch's weights of rank 0, evaluated as its ``evaluate_trans`` does (full graph, eval mode)."""
    import json as _json
    g, n_feat, n_class = load_data(args)
    meta = _json.load(open(os.path.join(args.part_path, args.graph_name, "meta.json")))
    args.n_feat, args.n_class, args.n_train = meta["n_feat"], meta["n_class"], meta["n_train"]
    from helper.utils import get_layer_size
    model = train.create_model(get_layer_size(args.n_feat, args.n_hidden, args.n_class, args.n_layers), args)
    record = torch.load(os.path.join(o.record, "rank0.pt"), weights_only=True)
    feat, labels = g.ndata["feat"], g.ndata["label"]
    val_mask, test_mask = g.ndata["val_mask"].bool(), g.ndata["test_mask"].bool()  # saved as uint8
    out = dict(val=[], test=[])
    with torch.no_grad():
        for snapshot in record["snapshots"]:
            model.load_state_dict(snapshot)
            model.eval()
            logits = model(g, feat)
            out["val"].append(train.calc_acc(logits[val_mask], labels[val_mask]))
            out["test"].append(train.calc_acc(logits[test_mask], labels[test_mask]))
    with open(os.path.join(o.record, "evaluation.json"), "w") as fh:
        _json.dump(out, fh)
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--inside":
        sys.exit(_inside(sys.argv[2:]))
    sys.exit(main())
