"""``pgqueue_bench --scenario``: the queue over time under MVCC pressure (see ``runner``).

Like :mod:`django_pgqueue.contrib.bench`, nothing else imports it; its job exists only while
it runs.
"""

from __future__ import annotations
