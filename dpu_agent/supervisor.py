"""A trainer's agent that may die or stall: :class:`SupervisedAgent`.

The trainer must finish its run when its agent is SIGKILLed, crashes or stops answering.
:class:`SupervisedAgent` wraps the client that ``start()`` makes (an ``AgentClient``) and
owns the agent's health: the first failure of any call (the agent went away, or a reply
took longer than the client's timeout) is logged once, the dead client is closed (an agent
process it started is killed), and the call raises :class:`AgentLost`; while the agent is
lost every call raises :class:`AgentLost` at once, without waiting. :meth:`revive` (the
trainer's tables call it at a sync step) starts or reconnects a new agent; ``generation``
counts the agents, so each table knows it must re-create itself there and re-seed it with
the rows of that sync. ``stats`` of a lost agent are the last ones it reported, and the
predictor time of earlier generations is carried over (so per-epoch deltas stay >= 0).

Made by ``dgl_sni.config.SNIConfig.start_agent``; used by ``dgl_sni.sni.table.HaloTable``
and the halo exchange (``alive``).
"""
from __future__ import annotations

import logging
import time
from typing import Callable

from .client import AgentClient
from .transport import AgentError

log = logging.getLogger("dgl_sni.agent")


class AgentLost(AgentError):
    """The agent is gone (or stalled past its timeout); the trainer serves its own rows."""


class SupervisedAgent(AgentClient):
    """See the module docstring. ``start()``: a new connected client (raises on failure);
    ``retry_s``: the least time between two attempts to revive a lost agent."""

    def __init__(self, start: Callable[[], AgentClient], retry_s: float = 0.0):
        self._start, self.retry_s = start, retry_s
        self.client = start()
        self.generation = 0
        self.failures = 0
        self._last_try = 0.0
        self._stats = dict(predictor_s=0.0, tables=0, tracked_rows=0, predicted_slots=0)
        self._carried_s = 0.0  # predictor time of agents that are gone

    @property
    def alive(self) -> bool:
        return self.client is not None

    def _lost(self, err: BaseException) -> AgentLost:
        self.failures += 1
        log.warning("sni agent lost (%s): serving the rows of the last sync, syncing every step until "
                    "an agent is back", err)
        client, self.client = self.client, None
        self._carried_s = self._stats["predictor_s"]
        try:
            client.abort()
        except Exception as close_err:  # noqa: BLE001 -- it is gone either way
            log.debug("closing the lost agent: %s", close_err)
        return AgentLost(str(err))

    def _call(self, name: str, *args, **kwargs):
        if self.client is None:
            raise AgentLost("the agent is gone")
        try:
            return getattr(self.client, name)(*args, **kwargs)
        except AgentError as err:
            raise self._lost(err) from err

    def revive(self) -> bool:
        """Start or reconnect an agent if it is lost (at most every ``retry_s``); True when a
        new generation is up (its tables must be re-created and re-seeded)."""
        if self.client is not None or time.monotonic() - self._last_try < self.retry_s:
            return False
        self._last_try = time.monotonic()
        try:
            self.client = self._start()
        except (AgentError, OSError, FileNotFoundError) as err:
            log.debug("no agent yet: %s", err)
            return False
        self.generation += 1
        log.warning("sni agent back (generation %d): re-seeding its tables at this sync", self.generation)
        return True

    # ------------------------------------------------------------ AgentClient
    def add_table(self, table, num_rows, dim, sampled, kind, **params):
        self._call("add_table", table, num_rows, dim, sampled, kind, **params)

    def observe(self, table, step, rows, row_ids=None):
        self._call("observe", table, step, rows, row_ids)

    def request(self, table, step, preview=False):
        self._call("request", table, step, preview)

    def result(self, table, step, preview=False):
        return self._call("result", table, step, preview)

    def drift(self, table, step):
        return self._call("drift", table, step)

    def stats(self):
        if self.client is not None:
            try:
                now = dict(self._call("stats"))
                now["predictor_s"] = self._carried_s + now["predictor_s"]
                self._stats = now
            except AgentLost:
                pass
        return dict(self._stats)

    def abort(self):
        if self.client is not None:
            self.client.abort()

    def close(self):
        if self.client is not None:
            client, self.client = self.client, None
            client.close()
