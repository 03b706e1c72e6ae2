"""``manage.py pgqueue_bench`` and ``manage.py pgqueue_chaos``: reproducible throughput and
latency figures for this queue, and a load through faults.

An optional app: add ``"django_pgqueue.contrib.bench"`` to ``INSTALLED_APPS`` (next to
``"django_pgqueue"``) to get the two commands. A tool, not part of the runtime: nothing in the
worker, the admin or ``import django_pgqueue`` imports this package, and importing it (which
Django does when the app is installed) imports nothing else and registers nothing. Its jobs are
registered by :func:`.workload.register` when a benchmark starts; the workers it measures are
real ``run_jobs`` commands in forked children, which inherit them.

Everything happens in a scratch queue named ``pgqueue-bench-<random>`` that no real worker
serves, and every row the benchmark made (jobs and worker rows) is deleted at the end, on
Ctrl-C too.

=====================  ==============================================================
module                 holds
=====================  ==============================================================
``apps``               :class:`BenchConfig`, the app (label ``pgqueue_bench``)
``management/``        the commands ``pgqueue_bench`` and ``pgqueue_chaos``
``options``            the ranges of the commands' numeric options
``run``                :class:`Bench`: one run of the selected phases, and its clean-up
``context``            :class:`BenchContext`: what a phase works with (options, scratch
                       queue, workers, result)
``phases/``            one module per phase, and the :data:`PHASES` registry
``memory``             :func:`run_memory`, the ``--memory`` mode
``compare``            :func:`run_compare`, the ``--compare`` mode: our drain phase beside
                       the floor and pgqueuer, in interleaved rounds
``floor``              the raw-SQL floor: ``floor.sql``'s statements, drained by plain psycopg
``pgqueuer_drain``     pgqueuer's drain (where it is installed), in a scratch prefix
``workers``            :class:`WorkerProcess`: ``run_jobs`` in a forked child, and
                       :class:`FunctionProcess`: a function in one (the anchors' drains)
``measurement``        percentiles, CPU time of backends, the bare claim loop, the machine
``database``           the benchmark's own statements (scratch rows, counts, ``VACUUM``),
                       and :func:`conninfo` for the anchors' own connections
``results``            the options and the result objects, :class:`BenchError`
``report``             the human-readable table, the machine's line
``progress``           how a phase reports itself (a bar on a terminal)
``workload``           the no-op jobs, registered on demand (not named ``jobs``: the
                       worker's autodiscovery imports every app's ``jobs`` module)
``scenarios/``         ``--scenario``: the queue over time under MVCC pressure (its own
                       sampling statements, producer, pressure connections, SVG chart)
``chaos/``             ``pgqueue_chaos``: a steady load through faults
=====================  ==============================================================

Imports run one way: the commands -> ``compare`` -> ``run`` -> ``phases/`` -> ``context`` -> the
rest (``floor`` and ``pgqueuer_drain`` among it).

Adding a phase (a scenario measured in the scratch queue): a module in ``phases/`` with a
function taking the :class:`BenchContext`, and one :class:`~.phases.Phase` line in
``phases/__init__.py``; ``--phases`` and the figures' JSON pick it up. Adding a mode that is not
a phase of the standard run (like ``--memory``): a module with its ``run_<mode>`` function and
an option in the command.
"""
