"""The process's peak resident memory, as the tier reports it in its epoch metrics.

:func:`peak_rss_mb` is called by :meth:`storage_tier.engine.TierEngine.metrics` (and by
anything that wants the same measure).
"""
from __future__ import annotations

import resource


def peak_rss_mb() -> float:
    """Largest resident set of this process so far, in MiB.

    Read from ``VmHWM`` (peak of this process image). ``ru_maxrss`` is not used on
    Linux: it survives ``exec`` and would report a large launcher's peak.
    """
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


__all__ = ["peak_rss_mb"]
