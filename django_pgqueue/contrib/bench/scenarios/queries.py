"""The statements the scenarios sample the database with (read-only, cheap by design).

None of them counts pending rows: under MVCC pressure that count walks the very dead index
entries being measured. Completions and latencies come from the ``pgqueue_job_finished``
index (finished jobs only), the queue depth from the producer's count minus completions.
"""

from __future__ import annotations

from django_pgqueue.sql import TABLE
from django_pgqueue.states import FINISHED, sql_list

#: Jobs of a queue finished in [start, end): count, and start latency percentiles in seconds
#: (``started_at - run_after``: from becoming runnable to the attempt's start).
FINISHED_IN_WINDOW = f"""
SELECT count(*),
       percentile_cont(ARRAY[0.5, 0.95, 0.99]) WITHIN GROUP (
           ORDER BY extract(epoch FROM started_at - run_after)),
       max(extract(epoch FROM started_at - run_after))
FROM {TABLE}
WHERE status IN ({sql_list(FINISHED)}) AND finished_at >= %s AND finished_at < %s
  AND queue = %s
"""

#: Live and dead tuples of the queue's tables (the statistics collector's view).
TABLE_STATS = """
SELECT relname, n_live_tup, n_dead_tup, autovacuum_count, vacuum_count
FROM pg_stat_user_tables WHERE relname LIKE 'pgqueue%%' ORDER BY relname
"""

#: Size of every index of the queue's tables, in KiB.
INDEX_SIZES = """
SELECT c.relname, pg_relation_size(c.oid) / 1024
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_class t ON t.oid = i.indrelid
WHERE t.relname LIKE 'pgqueue%%' ORDER BY c.relname
"""

#: What the figures depend on.
SERVER_SETTINGS = """
SELECT name, setting FROM pg_settings WHERE name IN (
    'server_version', 'autovacuum', 'synchronous_commit', 'shared_buffers', 'fsync',
    'autovacuum_naptime', 'autovacuum_vacuum_scale_factor', 'autovacuum_vacuum_threshold',
    'max_connections')
ORDER BY name
"""

#: Jobs of the scratch queue not finished yet (once, at the end: a full count).
UNFINISHED = f"""
SELECT count(*) FROM {TABLE} WHERE queue = %s AND status NOT IN ({sql_list(FINISHED)})
"""
