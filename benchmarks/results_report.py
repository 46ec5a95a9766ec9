"""The results report: one command trains the suite and writes ``docs/RESULTS.md`` with its plots.

    python benchmarks/results_report.py            # the quick suite (minutes)
    python benchmarks/results_report.py --full     # the full suite (hours: the acceptance graphs, 3 seeds)
    python benchmarks/results_report.py --no-run   # the report again from the committed record alone
    python benchmarks/results_report.py --full --graphs syn200k --links 1gbit --seeds 0   # a part of it

A run trains what the suite's record (``benchmarks/record/<suite>/``, :mod:`benchmarks.record`:
compact copies of every run, committed) lacks and keeps it there; then the whole report is
computed from the record alone, so ``--no-run`` on a fresh clone writes the same pages.
``--graphs``/``--links``/``--seeds`` train a part of the suite; the report names the parts not
measured yet. Nothing is typed by hand. The suite (:mod:`benchmarks.report_suite`): the methods
side by side on each graph and link (interval 1 and its null, ``fast``, the peers in ``fast``'s
setting and in their own, quantized exact epochs, boundary node sampling, one process with DGL's
``GraphConv``), DGL's distributed example, scaling over 2, 4 and 8 machines, the storage tier
with prediction, the cost model fitted to the record, and a clean-up check; the pages
(:mod:`benchmarks.report_pages`) lead with ``fast`` for each model over seeds
(:mod:`benchmarks.seed_sweeps`).
"""
from __future__ import annotations

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.record import RECORD, MissingRun  # noqa: E402
from benchmarks.report_pages import DOC, README, plots, write_costs, write_report  # noqa: E402
from benchmarks.report_suite import measure, narrowed, replay  # noqa: E402


def _names(value: str) -> list:
    names = [v.strip() for v in value.split(",") if v.strip()]
    if not names:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return names


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--full", action="store_true", help="the full suite (hours)")
    parser.add_argument("--no-run", action="store_true",
                        help="train nothing: write the report from the suite's committed record alone")
    parser.add_argument("--dgl-example", default=None, metavar="PATH",
                        help="DGL 2.1.0's examples/distributed/graphsage/node_classification.py (default: the DGL "
                             "mirror, where there is one)")
    parser.add_argument("--graphs", type=_names, default=None, help="only these of the suite's graphs (comma-separated)")
    parser.add_argument("--links", type=_names, default=None, help="only these of the suite's links")
    parser.add_argument("--seeds", type=lambda v: [int(x) for x in _names(v)], default=None,
                        help="only these of the suite's seeds")
    parser.add_argument("--record", default=RECORD, help=argparse.SUPPRESS)  # the tests' own record
    parser.add_argument("--doc", default=DOC, help=argparse.SUPPRESS)  # where the report is written (tests)
    parser.add_argument("--readme", default=README, help=argparse.SUPPRESS)
    parser.add_argument("--costs-out", default=None, help=argparse.SUPPRESS)  # default: the package's costs.json
    ns = parser.parse_args(argv)
    name = "full" if ns.full else "quick"
    try:
        suite = narrowed(name, ns.graphs, ns.links, ns.seeds)
    except ValueError as err:
        parser.error(str(err))
    clean = True
    if not ns.no_run:
        clean = measure(name, suite, ns.dgl_example, ns.record)["cleanup"]["clean"]
    try:
        data = replay(name, ns.record)
    except MissingRun as err:
        parser.error(str(err))
    figures = os.path.join(os.path.dirname(os.path.abspath(ns.doc)), "figures", "results")
    plots(data, figures)
    write_report(data, "python benchmarks/results_report.py" + (" --full" if ns.full else ""), ns.doc, ns.readme)
    write_costs(data, ns.costs_out)
    print(f"wrote {ns.doc} and {figures}/ from {os.path.join(ns.record, name)}/")
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
