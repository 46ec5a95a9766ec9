"""``sni-agent``: the console script that runs the agent binary, and the Python serving loop.

The agent is the standalone C++ executable ``dpu_agent/bin/sni-agent`` (see
:mod:`dpu_agent.binary`), with both transports (``--socket``: Unix socket + shared memory;
``--doca``: Comch + DMA, DOCA loaded with dlopen); :func:`main` (the ``sni-agent`` console
script) replaces this process with it, passing the arguments on. :func:`serve_forever` is
the same serving loop in Python over any :class:`~dpu_agent.transport.AgentTransport`
(e.g. the ctypes :class:`~dpu_agent.doca.DocaAgentTransport`), the reference the binary's
``csrc/agent/serve.hpp`` follows; nothing in a run uses it.
"""
from __future__ import annotations

import os
import sys

from . import protocol
from .tables import Agent


def handle(agent: Agent, transport, msg: dict) -> bytes:
    """Execute one decoded request; returns the encoded reply (every request gets one)."""
    op = msg["op"]
    if op == "add_table":
        agent.add_table(msg["table"], msg["num_rows"], msg["dim"], msg["sampled"], msg["kind"], **msg["params"])
        try:
            transport.attach(msg["table"], msg["num_rows"], msg["dim"], msg["regions"])
        except BaseException:
            agent.tables.pop(msg["table"], None)
            raise
    elif op == "observe":
        count = msg["count"]
        rows = transport.read(msg["table"], "fresh", count)
        ids = transport.read(msg["table"], "ids", count) if msg["partial"] else None
        agent.table(msg["table"]).observe(msg["step"], rows, ids)
    elif op == "serve":
        rows, weight = agent.table(msg["table"]).serve(msg["step"], preview=msg["preview"])
        transport.write(msg["table"], "served", rows)
        transport.write(msg["table"], "weight", weight)
    elif op == "drift":
        transport.write(msg["table"], "drift", agent.table(msg["table"]).drift(msg["step"]))
    elif op == "stats":
        return protocol.encode_reply(msg, stats=agent.stats())
    else:
        raise ValueError(f"unexpected agent operation '{op}'")
    return protocol.encode_reply(msg)


def serve_forever(transport) -> None:
    """Execute requests until ``close``, a malformed message, or the trainer going away."""
    agent = Agent()
    try:
        while True:
            raw = transport.recv()
            if raw is None:
                return
            try:
                msg = protocol.decode_request(raw)
            except protocol.ProtocolError as err:
                print(f"sni-agent: malformed message, closing the connection: {err}", file=sys.stderr)
                return
            if msg["op"] == "close":
                return
            try:
                reply = handle(agent, transport, msg)
            except Exception as err:  # report, keep serving: the trainer decides
                reply = protocol.encode_reply(msg, error=f"{type(err).__name__}: {err}")
            transport.send(reply)
    finally:
        transport.close()


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
