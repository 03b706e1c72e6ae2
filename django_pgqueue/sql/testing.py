"""The statement of :func:`django_pgqueue.testing.run_jobs` that no worker runs."""

from __future__ import annotations

from django_pgqueue.sql import PENDING, TABLE

# Pending jobs the test wants run now get run_after = now(), so the real claim takes them:
# retries waiting for their backoff, jobs due by the wall clock (inside a test's transaction
# now() stands still at its start) and, when asked, jobs scheduled later.
_MAKE_DUE = f"""
UPDATE {TABLE} SET run_after = now()
WHERE status = {PENDING} AND run_after > now() {{queue_filter}}
  AND (%(scheduled)s OR attempts > 0 OR run_after <= %(wall_clock)s)
"""

MAKE_DUE_ALL_QUEUES = _MAKE_DUE.format(queue_filter="")
MAKE_DUE_NAMED_QUEUES = _MAKE_DUE.format(queue_filter="AND queue = ANY(%(queues)s::text[])")

#: Inside a test's transaction, which never commits: the edges of workflows (``sql.flow``) are
#: settled now rather than at a commit that never comes, and from now on as they are inserted.
#: Their lock on each parent lasts until the test's transaction ends: nothing else needs it.
SETTLE_EDGES = "SET CONSTRAINTS pgqueue_dependency_commit IMMEDIATE"
