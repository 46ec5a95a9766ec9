"""``sni-agent``: the console script that runs the agent binary.

The agent is the standalone C++ executable ``dpu_agent/bin/sni-agent`` (see
:mod:`dpu_agent.binary`), with both transports (``--socket``: Unix socket + shared memory;
``--doca``: Comch + DMA, DOCA loaded with dlopen); :func:`main` (the ``sni-agent`` console
script) replaces this process with it, passing the arguments on.
"""
from __future__ import annotations

import os
import sys


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from .binary import agent_command
    try:
        command = agent_command()
    except FileNotFoundError as err:
        print(f"sni-agent: {err}", file=sys.stderr)
        return 2
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(command[0], command + argv)


if __name__ == "__main__":
    sys.exit(main())
