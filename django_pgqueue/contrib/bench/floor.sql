-- The raw-SQL floor of `pgqueue_bench --compare` (docs/performance.md, "Comparing with the floor
-- and pgqueuer"): the least a queue on SELECT ... FOR UPDATE SKIP LOCKED does per job, as plain
-- psycopg 3 would do it. Checked in, so the denominator of "ours / floor" cannot drift: change a
-- statement here and every ratio measured before is no longer comparable.
--
-- Each statement follows its `-- name:` line, up to the next one (contrib/bench/floor.py reads
-- them). {table} and {index} are the scratch table's and its index's names
-- (pgqueue_bench_floor_<random>), quoted as identifiers; %(...)s are parameters. Every worker
-- runs on its own autocommit connection: each statement is its own transaction.

-- name: create
CREATE TABLE {table} (
    id bigserial PRIMARY KEY,
    queue text NOT NULL,
    name text NOT NULL,
    args jsonb NOT NULL,
    status text NOT NULL DEFAULT 'pending',
    attempts integer NOT NULL DEFAULT 0,
    locked_by text,
    started_at timestamptz,
    finished_at timestamptz
)

-- name: index
CREATE INDEX {index} ON {table} (id) WHERE status = 'pending'

-- name: enqueue
INSERT INTO {table} (queue, name, args)
SELECT 'default', %(name)s::text, '[]'::jsonb FROM generate_series(1, %(jobs)s::integer)

-- name: analyze
ANALYZE {table}

-- name: claim
UPDATE {table}
SET status = 'running', attempts = attempts + 1, locked_by = %(worker)s::text, started_at = now()
WHERE id IN (
    SELECT id FROM {table}
    WHERE status = 'pending'
    ORDER BY id
    LIMIT 100
    FOR UPDATE SKIP LOCKED
)
RETURNING id, name, args

-- name: complete
UPDATE {table} SET status = 'completed', finished_at = now() WHERE id = ANY(%(ids)s::bigint[])

-- name: outcome
SELECT count(*) FILTER (WHERE status = 'completed'), count(*), min(started_at), max(finished_at)
FROM {table}

-- name: drop
DROP TABLE IF EXISTS {table}
