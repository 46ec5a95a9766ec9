"""The agent process (``sni-agent``): serves one trainer's stale halo rows.

Run by the trainer's :class:`~dpu_agent.client.AgentClient` as a child process on
the host (``--fd``: one end of a socket pair; regions in shared memory), or on a
BlueField DPU next to the trainer's host (``--doca``: Comch for control, DMA for
rows). Either way it loops over control messages and executes them on an
:class:`~dpu_agent.tables.Agent`; it exits when the trainer closes the channel.
"""
from __future__ import annotations

import argparse
import sys
import traceback

from .tables import Agent
from .transport import AgentTransport


def handle(agent: Agent, transport: AgentTransport, msg: dict):
    """Execute one message; returns the reply (every message gets exactly one)."""
    op = msg["op"]
    if op == "add_table":
        transport.attach(msg["table"], msg["num_rows"], msg["dim"], msg["regions"])
        agent.add_table(msg["table"], msg["num_rows"], msg["dim"], msg["sampled"], msg["kind"],
                        **msg.get("params", {}))
        return dict(op=op, table=msg["table"])
    if op == "observe":
        count = msg["count"]
        rows = transport.read(msg["table"], "fresh", count)
        ids = transport.read(msg["table"], "ids", count) if msg["partial"] else None
        agent.table(msg["table"]).observe(msg["step"], rows, ids)
        return dict(op=op, table=msg["table"], step=msg["step"])
    if op == "serve":
        rows, weight = agent.table(msg["table"]).serve(msg["step"], preview=msg.get("preview", False))
        transport.write(msg["table"], "served", rows)
        transport.write(msg["table"], "weight", weight)
        return dict(op=op, table=msg["table"], step=msg["step"], preview=msg.get("preview", False))
    if op == "drift":
        transport.write(msg["table"], "drift", agent.table(msg["table"]).drift(msg["step"]))
        return dict(op=op, table=msg["table"], step=msg["step"])
    if op == "stats":
        return dict(op=op, stats=agent.stats())
    raise ValueError(f"unknown agent operation '{op}'")


def serve_forever(transport: AgentTransport) -> None:
    """Execute messages until ``close`` or until the trainer goes away."""
    agent = Agent()
    try:
        while True:
            msg = transport.recv()
            if msg is None or msg.get("op") == "close":
                return
            try:
                reply = handle(agent, transport, msg)
            except Exception as err:  # report, keep serving: the trainer decides
                reply = dict(op=msg.get("op"), table=msg.get("table"), step=msg.get("step"),
                             error=f"{type(err).__name__}: {err}")
            transport.send(reply)
    finally:
        transport.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="sni-agent", description=__doc__.split("\n")[0])
    parser.add_argument("--fd", type=int, help="host emulation: inherited socket descriptor")
    parser.add_argument("--doca", action="store_true", help="DPU mode: DOCA Comch + DMA")
    parser.add_argument("--pci", default=None, help="DPU mode: PCI address of the device to use")
    parser.add_argument("--name", default="sni-agent", help="DPU mode: Comch service name")
    ns = parser.parse_args(argv)
    try:
        if ns.doca:
            from .doca import DocaAgentTransport
            transport = DocaAgentTransport(ns.pci, ns.name)
        elif ns.fd is not None:
            from .shm import ShmAgentTransport
            transport = ShmAgentTransport(ns.fd)
        else:
            parser.error("give --fd (host emulation) or --doca (DPU)")
        serve_forever(transport)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
