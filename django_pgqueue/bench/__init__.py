"""``manage.py pgqueue_bench``: reproducible throughput and latency figures for this queue.

A tool, not part of the runtime: nothing in the worker, the admin or ``import django_pgqueue``
imports this package, and importing it registers nothing. Its jobs are registered by
:func:`.jobs.register` when a benchmark starts; the workers it measures are real ``run_jobs``
commands in forked children, which inherit them.

Everything happens in a scratch queue named ``pgqueue-bench-<random>`` that no real worker
serves, and every row the benchmark made (jobs and worker rows) is deleted at the end, on
Ctrl-C too.

=====================  ==============================================================
module                 holds
=====================  ==============================================================
``run``                :class:`Bench`: one run of the selected phases, and its clean-up
``phases/``            one module per phase, and the :data:`PHASES` registry
``memory``             :func:`run_memory`, the ``--memory`` mode
``workers``            :class:`WorkerProcess`: ``run_jobs`` in a forked child
``measurement``        percentiles, CPU time of backends, the bare claim loop, the machine
``database``           the benchmark's own statements (scratch rows, counts, ``VACUUM``)
``results``            the options and the result objects, :class:`BenchError`
``report``             the human-readable table
``progress``           how a phase reports itself (a bar on a terminal)
``jobs``               the no-op jobs, registered on demand
``scenarios/``         ``--scenario``: the queue over time under MVCC pressure (its own
                       sampling statements, producer, pressure connections, SVG chart)
=====================  ==============================================================

Adding a phase (a scenario measured in the scratch queue): a module in ``phases/`` with a
function taking the :class:`Bench`, and one :class:`~.phases.Phase` line in
``phases/__init__.py``; ``--phases`` and the figures' JSON pick it up. Adding a mode that is not
a phase of the standard run (like ``--memory``): a module with its ``run_<mode>`` function and
an option in the command.
"""

from __future__ import annotations

from django_pgqueue.bench.measurement import percentile
from django_pgqueue.bench.memory import run_memory
from django_pgqueue.bench.phases import PHASES, Phase
from django_pgqueue.bench.report import describe, memory_lines, table_lines
from django_pgqueue.bench.results import (
    QUEUE_PREFIX,
    RESULT_KEYS,
    BenchError,
    BenchOptions,
    BenchResult,
    MemoryResult,
)
from django_pgqueue.bench.run import Bench

__all__ = [
    "PHASES",
    "QUEUE_PREFIX",
    "RESULT_KEYS",
    "Bench",
    "BenchError",
    "BenchOptions",
    "BenchResult",
    "MemoryResult",
    "Phase",
    "describe",
    "memory_lines",
    "percentile",
    "run_memory",
    "table_lines",
]
