"""``manage.py pgqueue_chaos``: a steady load through faults, and what the queue lost.

A producer enqueues numbered jobs at a fixed rate into a scratch queue served by a real
``run_jobs`` (``processes`` x ``threads``); every run of a job appends its number to a file.
Meanwhile, one after the other, ``fault_interval`` seconds apart:

* ``sigkill``: SIGKILL of one worker process (its supervisor recovers its jobs);
* ``terminate``: ``pg_terminate_backend`` of every worker connection (loops, listeners,
  supervisor);
* ``restart``: ``pg_ctl restart -m fast`` of the server, only when told it may
  (``--allow-restart --pgdata DIR``) and only if the server is local and runs from ``DIR``.

After each fault, the **recovery time** is how long until a job enqueued after the fault
began has completed. At the end the load stops, the backlog drains, and the run counts the
jobs **lost** (enqueued, confirmed, and not completed or never run: must be 0) and the
**duplicates** (jobs run more than once: at-least-once allows them for jobs a SIGKILL caught
mid-run). Its rows and file are deleted afterwards.

=============  ===============================================================
module         holds
=============  ===============================================================
``run``        :class:`ChaosRun`, its options and result, the producer
``faults``     the fault injectors (SIGKILL, terminate, restart) and their guards
``queries``    the statements the run makes of its own (counts, terminate)
``report``     the human-readable lines
=============  ===============================================================
"""

from __future__ import annotations

from django_pgqueue.contrib.bench.chaos.faults import FAULTS, ServerControl
from django_pgqueue.contrib.bench.chaos.report import lines
from django_pgqueue.contrib.bench.chaos.run import ChaosOptions, ChaosResult, ChaosRun, FaultResult

__all__ = [
    "FAULTS",
    "ChaosOptions",
    "ChaosResult",
    "ChaosRun",
    "FaultResult",
    "ServerControl",
    "lines",
]
