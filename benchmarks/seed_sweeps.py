"""The over-seed figures the README and ``docs/RESULTS.md`` lead with, from committed sweeps.

Each entry of :data:`SWEEPS` names ``bench_e2e.py --seeds`` result files committed under
``benchmarks/measured/`` (every seed's judged runs, with their accuracy curves), the
configuration that is ``fast`` in them and the acceptance target it is held to. The figures are
recomputed from the files' per-seed runs (``bench_e2e.pool``): the median time-to-target speed-up
with its range, the null's (interval 1 again with other dropout masks) beside it, the epochs to
the target against interval 1's, the final test accuracy against interval 1's, and whether the
target holds.
"""
from __future__ import annotations

import json
import os
import statistics
from dataclasses import dataclass

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MEASURED = os.path.join(ROOT, "benchmarks", "measured")


@dataclass(frozen=True)
class Sweep:
    """One model on one graph, 4 machines at 1 Gbit/s: result files and the target it is held to."""
    model: str
    graph: str
    files: tuple
    fast: str = "stale-default"  # the name ``fast`` (or the setting under test) has in the files
    sooner: float = 2.5  # the median time-to-target speed-up the acceptance asks for
    epochs_ratio: float = 1.2  # the most epochs to the target, against interval 1's
    test_margin: float = 0.01  # every final test within this of interval 1's
    what: str = "3-layer, hidden 16, dropout 0.5, 150 epochs"
    reference: float | None = None  # a published accuracy interval 1's final test is held to (within 0.02)


SWEEPS = (
    Sweep("built-in GCN", "syn200k", ("2026-12-06/fast-gcn-syn200k.json",)),
    Sweep("built-in SAGE", "syn200k", ("2026-12-06/sage-avg5-syn200k.json",), fast="averaged-interval5"),
    Sweep("built-in SAGE", "confirm150k", ("2026-12-06/sage-avg5-confirm150k.json",), fast="averaged-interval5"),
    Sweep("examples/gcn_layernorm.py", "syn200k", ("2026-12-06/fast-layernorm-syn200k.json",), sooner=2.0),
    Sweep("examples/gcn_layernorm.py", "confirm150k", ("2026-12-06/fast-layernorm-confirm150k.json",
                                                       "2026-12-06/fast-layernorm-confirm150k-s12.json"), sooner=2.0),
    Sweep("examples/gin.py", "syn200k", ("2026-12-06/fast-gin-syn200k.json",), sooner=2.0),
    Sweep("examples/gin.py", "confirm150k", ("2026-12-06/fast-gin-confirm150k.json",
                                             "2026-12-06/fast-gin-confirm150k-s12.json"), sooner=2.0),
    # the peers' GraphSAGE (LayerNorm between layers), `fast` for model files as it stands (not tuned on it)
    Sweep("examples/sage_layernorm.py", "syn200k", ("2026-12-07/sage-layernorm-syn200k.json",), fast="fast",
          sooner=2.0),
    # the SNI paper's setting: no dropout, 300 epochs (no null: other dropout masks do not exist)
    Sweep("built-in GCN, dropout 0, 300 epochs", "syn200k", ("2026-12-07/paper-stale-trend.json",), fast="fast",
          what="3-layer, hidden 16, dropout 0, 300 epochs"),
    # the GCN paper's setting on PubMed (2 layers, 200 epochs): accuracy is the target, speed a small graph's
    Sweep("built-in GCN, 2 layers, 200 epochs", "pubmed", ("2026-12-06/pubmed-2layer.json",), fast="fast",
          sooner=1.0, epochs_ratio=1.2, what="2-layer, hidden 16, dropout 0.5, 200 epochs", reference=0.790),
)


def _load(sweep: Sweep) -> dict:
    from benchmarks import bench_e2e
    reports = []
    for name in sweep.files:
        with open(os.path.join(MEASURED, name)) as fh:
            reports.append(json.load(fh))
    return bench_e2e.pool(reports)["graphs"][sweep.graph]["1gbit"]


def summarize(sweep: Sweep) -> dict:
    """The sweep's figures over its seeds, and whether its target holds."""
    part = _load(sweep)
    seeds = sorted(part["by_seed"], key=int)
    ran = {r["name"] for r in part["by_seed"][seeds[0]]["runs"]}
    runs = {name: [next(r for r in part["by_seed"][s]["runs"] if r["name"] == name) for s in seeds]
            for name in (sweep.fast, "int1-masks") if name in ran}  # no null at dropout 0

    def sooner(name):
        return [r.get("time_to_target_speedup") or 0.0 for r in runs[name]]  # never: 0

    fast = runs[sweep.fast]
    ratio = [r.get("epochs_to_target_ratio") for r in fast]
    delta = [r["final_test_delta"] for r in fast]
    per_sync = [r.get("epochs_per_sync") for r in fast]
    out = dict(model=sweep.model, graph=sweep.graph, seeds=[int(s) for s in seeds], what=sweep.what,
               sooner=sooner(sweep.fast), null=sooner("int1-masks") if "int1-masks" in runs else None,
               epochs_ratio=ratio, final_test_delta=delta, epochs_per_sync=statistics.median(per_sync),
               target=dict(sooner=sweep.sooner, epochs_ratio=sweep.epochs_ratio, test_margin=sweep.test_margin))
    out["holds"] = (statistics.median(out["sooner"]) >= sweep.sooner and None not in ratio
                    and max(ratio) <= sweep.epochs_ratio and min(delta) >= -sweep.test_margin)
    if sweep.reference is not None:  # interval 1 against the published accuracy
        exact = [next(r for r in part["by_seed"][s]["runs"] if r["name"] == "interval1")["final_test_acc"]
                 for s in seeds]
        out["reference"] = dict(value=sweep.reference, interval1_final_test=exact,
                                holds=all(abs(a - sweep.reference) <= 0.02 for a in exact))
        out["holds"] = out["holds"] and out["reference"]["holds"]
    return out


def _speed(value: float) -> str:
    return "never" if value == 0 else f"{value:.2f}"


def _range(values: list) -> str:
    """The median, and the range where there are several seeds (a run that never reached: 0)."""
    head = _speed(statistics.median(values))
    if len(values) == 1 or max(values) == 0:  # one seed, or none reached the target
        return head
    return f"{head} ({_speed(min(values))}-{_speed(max(values))})"


def references(rows: list) -> list:
    """Markdown lines: interval 1 against a published accuracy, where a sweep names one."""
    out = []
    for r in rows:
        ref = r.get("reference")
        if ref:
            acc = ref["interval1_final_test"]
            out.append(f"{r['model']} on {r['graph']} ({r['what']}): interval 1's final test {min(acc):.4f}-"
                       f"{max(acc):.4f} over seeds {', '.join(map(str, r['seeds']))}, against {ref['value']:.3f} "
                       f"published: {'within' if ref['holds'] else '**not** within'} 0.02 on every seed.")
    return out


def table(rows: list) -> list:
    """Markdown lines: one row per sweep."""
    lines = ["| model | graph | seeds | fast: x sooner, median (range) | null: x sooner | epochs to target vs interval 1, "
             "median (max) | final test vs interval 1, mean (lowest) | epochs per sync | target | holds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ratio = [x for x in r["epochs_ratio"] if x is not None]
        ratio_text = (f"{statistics.median(ratio):.2f} ({max(ratio):.2f})" if ratio else "-") + \
            ("; never in some" if len(ratio) < len(r["epochs_ratio"]) else "")
        t = r["target"]
        lines.append(
            f"| {r['model']} | {r['graph']} | {', '.join(map(str, r['seeds']))} | {_range(r['sooner'])} | "
            f"{_range(r['null']) if r['null'] else 'none (no dropout)'} | {ratio_text} | {statistics.mean(r['final_test_delta']):+.4f} "
            f"({min(r['final_test_delta']):+.4f}) | {r['epochs_per_sync']:.1f} | >= {t['sooner']}x, <= "
            f"{t['epochs_ratio']}x epochs, test within {t['test_margin']} | {'yes' if r['holds'] else '**no**'} |")
    return lines


@dataclass(frozen=True)
class PeerComparison:
    """Every method of the results report's comparison (``benchmarks/configs/peers.json``) over
    seeds on one graph at 1 Gbit/s, from committed ``bench_e2e.py --seeds`` result files.
    ``families``: each peer's rows (in ``fast``'s setting and in its own), of which ``fast`` is
    compared against the best."""
    graph: str
    files: tuple
    families: tuple = (("SANCUS", ("cache-no-averaging", "sancus-own")),
                       ("the SNI paper", ("linear-trend", "sni-paper-3", "sni-paper-5")),
                       ("PipeGCN", ("pipelined", "pipegcn-own")),
                       ("AdaQP", ("adaqp-fast", "exact-8bit", "exact-4bit", "adaqp-own")),
                       ("BNS-GCN", ("bns-fast-0.1", "bns-fast-0.3", "bns-0.1", "bns-0.3")))


PEERS = PeerComparison("syn200k", ("2026-12-07/peers-syn200k-bns-fast.json",))


def _judged(runs: list) -> dict:
    """Runs' figures against their seeds' interval 1, one entry per seed (a run that never reached: 0)."""
    return dict(sooner=[r.get("time_to_target_speedup") or 0.0 for r in runs],
                epochs_ratio=[r.get("epochs_to_target_ratio") for r in runs],
                final_test_delta=[r["final_test_delta"] for r in runs])


def summarize_peers(comp: PeerComparison = PEERS) -> dict | None:
    """Per method its figures over the seeds (``None`` where the files are not committed), and per
    family the best row (highest median x sooner; a run that never reached counts 0) with
    ``fast``'s median against it."""
    if not all(os.path.exists(os.path.join(MEASURED, f)) for f in comp.files):
        return None
    part = _load(Sweep("peers", comp.graph, comp.files))
    seeds = sorted(part["by_seed"], key=int)
    names = [r["name"] for r in part["by_seed"][seeds[0]]["runs"]]
    rows = {}
    for name in names:
        runs = [next(r for r in part["by_seed"][s]["runs"] if r["name"] == name) for s in seeds]
        rows[name] = dict(_judged(runs),
                          epoch=[r["epoch_speedup"] for r in runs] if name != "interval1" else [1.0] * len(runs))
    fast = statistics.median(rows["fast"]["sooner"])
    families = []
    for family, members in comp.families:
        present = [m for m in members if m in rows]
        if not present:
            continue
        best = max(present, key=lambda m: statistics.median(rows[m]["sooner"]))
        peer = statistics.median(rows[best]["sooner"])
        if not peer:  # no row of the peer reached the target on most seeds: none is its best
            best = None
        families.append(dict(peer=family, best=best, rows=present, best_sooner=peer,
                             fast_over_best=fast / peer if peer else None))
    return dict(graph=comp.graph, seeds=[int(s) for s in seeds], rows=rows, families=families, fast=fast)


def peer_table(summary: dict, setting: dict) -> list:
    """Markdown lines: one row per method over seeds (``setting``: method -> "own" or "fast's"),
    then fast against the best row of each peer."""
    null = summary["rows"].get("int1-masks")
    spread = f"{min(null['sooner']):.2f}-{max(null['sooner']):.2f}" if null else None
    lines = ["| method | setting | x epoch, median | x sooner, median (range) | epochs to target vs interval 1, "
             "median (max) | final test vs interval 1, mean (lowest) |", "|---|---|---|---|---|---|"]
    for name, r in summary["rows"].items():
        ratio_text = _ratio_text(r["epochs_ratio"])
        within = null and name not in ("interval1", "int1-masks") and \
            min(null["sooner"]) <= statistics.median(r["sooner"]) <= max(null["sooner"])
        lines.append(f"| `{name}` | {setting.get(name, '-')} | {statistics.median(r['epoch']):.2f} | "
                     f"{_range(r['sooner'])}{' (within the null)' if within else ''} | {ratio_text} | "
                     f"{statistics.mean(r['final_test_delta']):+.4f} ({min(r['final_test_delta']):+.4f}) |")
    lines += ["", f"The null (interval 1 again with other dropout masks) spans {spread}x." if spread else "", ""]
    lines += ["| peer | its best row here | its x sooner, median | `fast`'s x sooner over it |", "|---|---|---|---|"]
    for f in summary["families"]:
        if f["best"] is None:
            rows = ", ".join(f"`{m}`" for m in f["rows"])
            lines.append(f"| {f['peer']} | none: {rows} did not reach the target (median) | never | - |")
        else:
            lines.append(f"| {f['peer']} | `{f['best']}` | {_speed(f['best_sooner'])} | {f['fast_over_best']:.2f} |")
    return lines


@dataclass(frozen=True)
class PeerCode:
    """A peer's own code (``benchmarks/peer_code.py``'s committed result; ``peer`` a key of its
    ``PEERS``) beside a ``bench_e2e.py --seeds`` sweep of this project's runs trained alongside
    (``interval1``, the null, ``fast`` and the in-project version), on one graph at 1 Gbit/s."""
    peer: str
    graph: str
    code: str
    ours: str
    ours_model: str  # what this project trained in ``ours``
    in_project: str | None = None  # the in-project version's row in ``ours``


PEER_CODE = (PeerCode("bns-gcn", "syn200k", "2026-12-07/bns-gcn-code-syn200k.json",
                      "2026-12-07/bns-code-ours-syn200k.json", "the built-in GCN, without LayerNorm", "bns-0.1"),
             PeerCode("pipegcn", "syn200k", "2026-12-07/pipegcn-code-syn200k.json",
                      "2026-12-07/sage-layernorm-syn200k.json",
                      "`examples/sage_layernorm.py`: DGL's `SAGEConv` with LayerNorm between layers, the peer's model"))


def summarize_peer_code(spec: PeerCode) -> dict | None:
    """Per variant of the peer's code: its epoch, and over seeds its time to the target against its
    own exact variant and against this project's interval 1; this project's rows of the same sweep
    beside them. ``None`` where the files are not committed."""
    from benchmarks.peer_code import PEERS, judge
    paths = [os.path.join(MEASURED, f) for f in (spec.code, spec.ours)]
    if not all(os.path.exists(p) for p in paths):
        return None
    peer = PEERS[spec.peer]
    with open(paths[0]) as fh:
        code = json.load(fh)
    ours = _load(Sweep("peer code", spec.graph, (spec.ours,)))["by_seed"]
    seeds = sorted({r["config"]["seed"] for r in code["runs"]})
    by = {(r["name"], r["config"]["seed"]): r for r in code["runs"]}
    exact_name = peer.run_name(peer.variants[0][0])
    rows = {}
    for variant, _, what in peer.variants:
        name = peer.run_name(variant)
        if not all((name, s) in by for s in seeds):
            continue
        judged = [judge(by[name, s], ours, s, by.get((exact_name, s))) for s in seeds]
        row = dict(what=what, epoch_ms=statistics.median(by[name, s]["epoch_s"] * 1e3 for s in seeds),
                   best_val=[by[name, s]["best_val_acc"] for s in seeds])
        for whose in ("own", "ours"):
            if all(whose in j for j in judged):
                row[whose] = dict(sooner=[j[whose]["time_to_target_speedup"] or 0.0 for j in judged],
                                  epochs_ratio=[j[whose]["epochs_to_target_ratio"] for j in judged],
                                  final_test_delta=[j[whose]["final_test_delta"] for j in judged])
        rows[name] = row
    mine = {}
    for name in ("interval1", "int1-masks", "fast") + ((spec.in_project,) if spec.in_project else ()):
        runs = [next(r for r in ours[str(s)]["runs"] if r["name"] == name) for s in seeds]
        mine[name] = dict(_judged(runs), epoch_ms=statistics.median(r["epoch_s"] * 1e3 for r in runs))
    best = max((n for n in rows if "ours" in rows[n] and n != exact_name),
               key=lambda n: statistics.median(rows[n]["ours"]["sooner"]), default=None)
    best_sooner = statistics.median(rows[best]["ours"]["sooner"]) if best else 0.0
    fast = statistics.median(mine["fast"]["sooner"])
    exact = rows.get(exact_name, {}).get("ours")
    return dict(peer=peer.name, key=spec.peer, model=peer.model, ours_model=spec.ours_model, graph=spec.graph, seeds=seeds,
                port_renames=sorted({f"`{old}` to `{new}`" for _, old, new, _ in peer.port if "cuda" not in old
                                     and "pin_memory" not in old}),
                commit=code["commit"], url=code["url"], exact=exact_name,
                targets=[ours[str(s)]["target_val_acc"] for s in seeds],
                exact_reached=bool(exact) and statistics.median(exact["sooner"]) > 0,
                rows=rows, ours=mine, best=best if best_sooner else None,
                fast_over_best=fast / best_sooner if best_sooner else None)


def summarize_peers_code() -> list:
    """Every committed peer's code (:data:`PEER_CODE`) summarised."""
    return [s for s in (summarize_peer_code(spec) for spec in PEER_CODE) if s]


def _ratio_text(ratio: list) -> str:
    got = [x for x in ratio if x is not None]
    return (f"{statistics.median(got):.2f} ({max(got):.2f})" if got else "never") + \
        ("; never in some" if got and len(got) < len(ratio) else "")


def peer_code_table(summary: dict) -> list:
    """Markdown lines: the peer's code at each rate, then this project's rows of the same sweep."""
    null = summary["ours"]["int1-masks"]["sooner"]
    lines = ["| run | code | epoch ms, median | against its own exact code: x sooner, median (range); "
             "final test, mean (lowest) | against this project's interval 1: x sooner, median (range) | epochs to "
             "target vs interval 1, median (max) | final test vs interval 1, mean (lowest) |",
             "|---|---|---|---|---|---|---|"]

    def cells(name, r):
        within = name not in ("interval1", "int1-masks") and min(null) <= statistics.median(r["sooner"]) <= max(null)
        return (f"{_range(r['sooner'])}{' (within the null)' if within else ''} | {_ratio_text(r['epochs_ratio'])} | "
                f"{statistics.mean(r['final_test_delta']):+.4f} ({min(r['final_test_delta']):+.4f})")

    for name, r in summary["rows"].items():
        own = r.get("own")
        own_text = "-" if own is None else (f"{_range(own['sooner'])}; {statistics.mean(own['final_test_delta']):+.4f} "
                                            f"({min(own['final_test_delta']):+.4f})")
        lines.append(f"| `{name}` | {summary['peer']}'s code, {r['what']} | {r['epoch_ms']:.0f} | {own_text} | "
                     + (cells(name, r["ours"]) if "ours" in r else "- | - | -") + " |")
    for name, r in summary["ours"].items():
        lines.append(f"| `{name}` | this project's | {r['epoch_ms']:.0f} | - | " + cells(name, r) + " |")
    return lines
