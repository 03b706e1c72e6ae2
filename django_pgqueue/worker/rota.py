"""Which worker a job notification wakes, and how often an idle worker polls: the wake rota.

Were every listening worker to claim for every job notification, one job would cost a claim
(and a process woken) per idle worker, and with tens of them the job waits behind them
(docs/scaling.md). Instead a notification names a ticket (``'<queue> <ticket> <jobs>'``: the
first job's id, so consecutive enqueues take turns), and the rota, the live listening workers
of the queue sorted by id, picks ``rota[ticket mod len(rota)]``:

* ``enqueue()`` reads the rota from the workers' rows (``pgqueue_worker.listening``) when it
  notifies, and notifies the picked worker on its own channel (``sql.enqueue.WAKE``,
  ``sql.rota.channel``): no other worker, nor its process, wakes;
* a notification on the common channel (the insert trigger's, for writes by hand) is heard by
  every worker, and each reads its own copy of the rota (:func:`~django_pgqueue.operations.peers`
  from ``pg_stat_activity``, every :data:`REFRESH` seconds fleet-wide): only the pick claims.

Each reading also unmarks the rows of workers whose listening connection is gone (a process
that dies takes its connection with it), so that ``enqueue()`` stops picking them: until then
their share of the notifications waits for a poll.

A worker woken that cannot take the jobs (no free thread), or whose claim came back full (more
may wait), passes the wake on to the next worker of the rota, on that worker's channel
(:meth:`Rota.pass_on`), once round at most.

Polls are the safety net under LISTEN and the only way jobs are found without it (PgBouncer
in transaction mode): an idle worker polls every ``PGQUEUE_POLL_INTERVAL`` times the number of
live workers that share a queue with it (jittered), so that the fleet together polls about once
an interval, however many workers it has (:meth:`Rota.spread`). So do its stale-job recovery
and its readings of the rota.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from django_pgqueue import operations
from django_pgqueue.conf import settings
from django_pgqueue.operations import Database, Peer

#: Seconds between readings of the rota, fleet-wide.
REFRESH = 2.0
#: ... but each worker at least this often (its own reading picks the worker it passes a wake to).
REFRESH_MAX = 10.0


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
        """Read the live workers again (and unmark the rows of workers no longer listening);
        returns the seconds until the next reading: the fleet reads about every
        :data:`REFRESH` seconds, each worker that many times less often (up to
        :data:`REFRESH_MAX`)."""
        self.peers = operations.peers(db, alive=3 * settings.HEARTBEAT_INTERVAL)
        self._listening = {}
        return min(self.spread(REFRESH), REFRESH_MAX)

    def listening(self, queue: str) -> list[str]:
        """The ids of the live listening workers that serve ``queue``, in the order
        ``pgqueue_wake()`` picks from (the reading's: ``sql.rota.PEERS`` sorts them)."""
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
        the rota (on its own channel), once round at most; returns whether it was passed."""
        rota = self.listening(wake.queue)
        if wake.ticket is None or wake.hops + 1 >= len(rota):
            return False
        ticket = wake.ticket + 1
        operations.pass_wake(
            db, rota[ticket % len(rota)], wake.queue, ticket, jobs, wake.hops + 1, wake.kinds
        )
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
    """A job notification: ``'<queue> <ticket> <jobs> [<hops> [<kinds>]]'``."""

    queue: str
    #: Picks the worker of the rota (None: every worker of the queue claims, as for a
    #: notification of an older version, ``'<queue>'``, or one sent by hand).
    ticket: int | None = None
    #: How many jobs it is about.
    jobs: int = 1
    #: How many workers passed it on so far.
    hops: int = 0
    #: It came on this worker's own channel: the sender picked this worker.
    direct: bool = False
    #: The kinds of the jobs: ``'s'`` (sync), ``'a'`` (``async def``), ``'sa'``; None: not
    #: known (the insert trigger's, an older version's), either kind.
    kinds: str | None = None

    @property
    def may_be_async(self) -> bool:
        """Whether async jobs may be among the jobs it is about."""
        return self.kinds is None or "a" in self.kinds

    @classmethod
    def parse(cls, payload: str) -> Wake:
        queue, *fields = payload.split(" ")
        numbers, kinds = fields[:3], fields[3] if len(fields) > 3 else None
        try:
            ticket, jobs, hops = [int(n) for n in numbers] + [None, 1, 0][len(numbers) :]
        except ValueError:
            return cls(payload)
        if kinds is not None and (not kinds or set(kinds) - {"s", "a"}):
            kinds = None  # not ours: either kind
        return cls(queue, ticket, jobs or 1, hops or 0, kinds=kinds)
