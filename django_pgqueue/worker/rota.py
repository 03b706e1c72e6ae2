"""Which worker a job notification wakes, and how often an idle worker polls: the wake rota.

Every listening worker hears every ``NOTIFY pgqueue``. Were each to claim, one job would cost a
claim per idle worker, and with tens of them PostgreSQL's CPU goes to empty claims while the
job waits behind them (docs/scaling.md). Instead each notification names a ticket
(``'<queue> <ticket>'``: the notifying transaction's id, ``sql.enqueue.WAKE``), and every
worker reads the same rota, the live listening workers of that queue sorted by id
(:func:`~django_pgqueue.operations.peers`, read again every :data:`REFRESH` seconds): the
worker at ``ticket mod len(rota)`` claims, the others go back to sleep.

A worker woken that cannot take the jobs (no free thread), or whose claim came back full (more
may wait), passes the wake on to the next worker of the rota (:meth:`Rota.pass_on`, a
notification of its own), once round at most. Until a worker that stopped leaves the others'
rota (a refresh: a dead process's listening connection is gone at once), its share of the
notifications waits for a poll.

Polls are the safety net under LISTEN and the only way jobs are found without it (PgBouncer
in transaction mode): an idle worker polls every ``PGQUEUE_POLL_INTERVAL`` times the number of
live workers that share a queue with it (jittered), so that the fleet together polls about once
an interval, however many workers it has (:meth:`Rota.spread`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.operations import Database, Peer
from django_pgqueue.printable import get_logger

logger = get_logger("django_pgqueue.worker")

#: Seconds between readings of the rota.
REFRESH = 2.0


class Rota:
    """This worker's reading of the live workers (refreshed by :meth:`refresh`)."""

    def __init__(self, worker_id: str, queues: Sequence[str] | None) -> None:
        self.worker_id = worker_id
        self.queues = frozenset(queues) if queues else None
        self.peers: list[Peer] = []
        #: The listening workers of each queue named in a notification, sorted (a cache of
        #: :attr:`peers`, cleared at each refresh).
        self._listening: dict[str, list[str]] = {}

    def refresh(self, db: Database) -> float:
        """Read the live workers again; returns the seconds until the next reading."""
        self.peers = operations.peers(db, alive=3 * settings.HEARTBEAT_INTERVAL)
        self._listening = {}
        return REFRESH

    def listening(self, queue: str) -> list[str]:
        """The ids of the live listening workers that serve ``queue``, sorted."""
        found = self._listening.get(queue)
        if found is None:
            found = [p.worker_id for p in self.peers if p.listening and p.serves(queue)]
            self._listening[queue] = found
        return found

    def designated(self, queue: str, ticket: int) -> str | None:
        """The worker a notification of ``queue`` with ``ticket`` wakes (None: this worker is
        not in its own reading yet, or no reading: it acts on every notification)."""
        rota = self.listening(queue)
        if self.worker_id not in rota:
            return None
        return rota[ticket % len(rota)]

    def mine(self, queue: str, ticket: int) -> bool:
        """Whether this worker claims for a notification of ``queue`` with ``ticket``."""
        designated = self.designated(queue, ticket)
        return designated is None or designated == self.worker_id

    def mine_any(self, ticket: int) -> bool:
        """Whether this worker is the pick, for ``ticket``, of the listening workers that share
        a queue with it (who wakes when the next scheduled job is due)."""
        rota = [p.worker_id for p in self.peers if p.listening and self._shares(p)]
        if self.worker_id not in rota:
            return True
        return rota[ticket % len(rota)] == self.worker_id

    def _shares(self, peer: Peer) -> bool:
        mine = self.queues
        return mine is None or not peer.queues or not mine.isdisjoint(peer.queues)

    def pass_on(self, db: Database, wake: Wake, jobs: int) -> bool:
        """Pass on ``wake``, for the ``jobs`` this worker did not take, to the next worker of
        the rota, once round at most; returns whether it was passed."""
        if wake.ticket is None or wake.hops + 1 >= len(self.listening(wake.queue)):
            return False
        operations.pass_wake(db, wake.queue, wake.ticket + 1, jobs, wake.hops + 1)
        return True

    def sharing(self) -> int:
        """How many live workers (this one included) share a queue with this worker."""
        return max(sum(1 for p in self.peers if self._shares(p)), 1)

    def spread(self, seconds: float) -> float:
        """A fleet-wide interval for this worker: ``seconds`` times the workers sharing its
        queues, jittered by a half either way, so that together they look about once every
        ``seconds`` (a poll, a recheck), whatever their number."""
        sharing = self.sharing()
        if sharing == 1:
            return seconds
        return seconds * sharing * random.uniform(0.5, 1.5)


@dataclass(frozen=True)
class Wake:
    """A job notification: ``'<queue> <ticket> <jobs> [<hops>]'``."""

    queue: str
    #: Picks the worker of the rota (None: every worker of the queue claims, as for a
    #: notification of an older version, ``'<queue>'``, or one sent by hand).
    ticket: int | None = None
    #: How many jobs it is about.
    jobs: int = 1
    #: How many workers passed it on so far.
    hops: int = 0

    @classmethod
    def parse(cls, payload: str) -> Wake:
        queue, *numbers = payload.split(" ")
        try:
            values = [int(n) for n in numbers[:3]]
        except ValueError:
            return cls(payload)
        return cls(queue, *values)
