"""What the suites import beside their subsystem's benchmark script: the mark that skips a
benchmark of emulated machines where they cannot be made, the suites' quick/long split, and
the reading and formatting of their figures."""
import pytest

from dgl_sni.cluster import netns_available

_OK, _WHY = netns_available()
EMULATED = pytest.mark.skipif(not _OK, reason=f"emulated machines: {_WHY}")


def sizes(quick, long) -> list:
    """``[quick, long]`` as parameters named ``quick`` and ``long``, the second marked ``long``
    (``make bench`` deselects it, ``make bench-full`` runs it)."""
    return [pytest.param(quick, id="quick"), pytest.param(long, id="long", marks=pytest.mark.long)]


def median_s(benchmark):
    """The benchmark's median round in seconds; ``None`` where benchmarks are disabled (the
    default test run's ``--benchmark-disable``: one round, nothing timed)."""
    return benchmark.stats.stats.median if benchmark.stats else None


def fmt(x, spec: str, scale: float = 1.0) -> str:
    """``x * scale`` formatted by ``spec``, or ``-`` for a figure a run did not produce."""
    return "-" if x is None else format(x * scale, spec)
