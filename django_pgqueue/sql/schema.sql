-- The queue's schema after migration 0029_wake_generic_plan: every pgqueue_* object.
-- Generated: pg_dump --schema-only of a newly migrated database, normalised by
-- scripts/schema.py. Do not edit; after adding a migration, run `make schema`.

-- FUNCTION pgqueue_batch_bucket(bigint, integer, integer, integer, integer)
CREATE FUNCTION public.pgqueue_batch_bucket(b bigint, new_u integer, new_f integer, d_unfinished integer, d_failed integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    d_open integer := (new_u > 0)::integer - (new_u - d_unfinished > 0)::integer;
    d_failing integer := (new_u = 0 AND new_f > 0)::integer
        - (new_u - d_unfinished = 0 AND new_f - d_failed > 0)::integer;
BEGIN
    IF d_open = 0 AND d_failing = 0 THEN
        RETURN;
    END IF;
    UPDATE pgqueue_batch SET buckets_left = buckets_left + d_open,
        failed_buckets = failed_buckets + d_failing,
        finished_at = CASE WHEN buckets_left + d_open > 0 THEN NULL ELSE finished_at END
    WHERE id = b;
    PERFORM pgqueue_batch_finish(b);
END;
$$;

-- FUNCTION pgqueue_batch_count(bigint, bigint, text, text)
CREATE FUNCTION public.pgqueue_batch_count(b bigint, member bigint, old_status text, new_status text) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    d_unfinished integer := (new_status NOT IN ('completed', 'dead', 'cancelled'))::integer
        - (old_status NOT IN ('completed', 'dead', 'cancelled'))::integer;
    d_failed integer := (new_status IN ('dead', 'cancelled'))::integer
        - (old_status IN ('dead', 'cancelled'))::integer;
    sealed boolean;
    new_u integer;
    new_f integer;
BEGIN
    IF d_unfinished = 0 AND d_failed = 0 THEN
        RETURN;
    END IF;
    UPDATE pgqueue_batch_tally SET unfinished = unfinished + d_unfinished,
        failed = failed + d_failed
    WHERE batch_id = b AND bucket = member / 128
    RETURNING unfinished, failed INTO new_u, new_f;
    IF NOT FOUND THEN
        -- Not sealed as this statement saw it (its tally rows come with the seal), or gone:
        -- wait for a seal under way and look again. A seal that starts later counts this
        -- member as this transaction leaves it.
        SELECT sealed_at IS NOT NULL INTO sealed FROM pgqueue_batch WHERE id = b FOR SHARE;
        IF sealed IS NULL OR NOT sealed THEN
            RETURN;
        END IF;
        UPDATE pgqueue_batch_tally SET unfinished = unfinished + d_unfinished,
            failed = failed + d_failed
        WHERE batch_id = b AND bucket = member / 128
        RETURNING unfinished, failed INTO new_u, new_f;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    PERFORM pgqueue_batch_bucket(b, new_u, new_f, d_unfinished, d_failed);
END;
$$;

-- FUNCTION pgqueue_batch_counted(bigint, integer, integer)
CREATE FUNCTION public.pgqueue_batch_counted(b bigint, d_open integer, d_failing integer) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE pgqueue_batch SET buckets_left = buckets_left + d_open,
        failed_buckets = failed_buckets + d_failing,
        finished_at = CASE WHEN buckets_left + d_open > 0 THEN NULL ELSE finished_at END
    WHERE id = b;
    PERFORM pgqueue_batch_finish(b);
END;
$$;

-- FUNCTION pgqueue_batch_delete()
CREATE FUNCTION public.pgqueue_batch_delete() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM pgqueue_batch_tally t USING deleted d WHERE t.batch_id = d.id;
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_batch_finish(bigint)
CREATE FUNCTION public.pgqueue_batch_finish(b bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    bt record;
    cb record;
    new_id bigint;
    v_fired jsonb := '[]';
BEGIN
    UPDATE pgqueue_batch SET finished_at = now()
    WHERE id = b AND sealed_at IS NOT NULL AND finished_at IS NULL AND buckets_left = 0
    RETURNING * INTO bt;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    FOR cb IN
        SELECT c.callback, c.sig FROM (VALUES
            (1, 'on_success', CASE WHEN bt.failed_buckets = 0 THEN bt.on_success END),
            (2, 'on_failure', CASE WHEN bt.failed_buckets > 0 THEN bt.on_failure END),
            (3, 'on_complete', bt.on_complete)) AS c(n, callback, sig)
        WHERE c.sig IS NOT NULL AND c.sig <> 'null'::jsonb
        ORDER BY c.n
    LOOP
        INSERT INTO pgqueue_job (queue, name, args, kwargs, priority, max_attempts, callback_of, is_async)
        VALUES (cb.sig ->> 'queue', cb.sig ->> 'name', cb.sig -> 'args', cb.sig -> 'kwargs',
                (cb.sig ->> 'priority')::smallint, (cb.sig ->> 'max_attempts')::integer, b,
                coalesce((cb.sig ->> 'is_async')::boolean, false))
        RETURNING id INTO new_id;
        v_fired := v_fired || jsonb_build_object('callback', cb.callback, 'job', new_id,
                                                 'at', now());
    END LOOP;
    UPDATE pgqueue_batch SET fired = fired || v_fired WHERE id = b;
END;
$$;

-- FUNCTION pgqueue_batch_members()
CREATE FUNCTION public.pgqueue_batch_members() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    g record;
    t record;
    cur bigint := NULL;
    opened integer := 0;
    failing integer := 0;
BEGIN
    -- Most statements end no member (a plain job's claim or outcome, a member's claim or
    -- heartbeat): two scans of the rows it changed, and nothing else.
    IF NOT EXISTS (SELECT 1 FROM pgqueue_new_rows
                   WHERE batch_id IS NOT NULL AND status IN ('completed', 'dead', 'cancelled'))
       AND NOT EXISTS (SELECT 1 FROM pgqueue_old_rows
                       WHERE batch_id IS NOT NULL AND status IN ('completed', 'dead', 'cancelled'))
    THEN
        RETURN NULL;
    END IF;
    FOR g IN
        SELECT n.batch_id AS b, n.id / 128 AS bucket,
            sum((n.status NOT IN ('completed', 'dead', 'cancelled'))::integer
                - (o.status NOT IN ('completed', 'dead', 'cancelled'))::integer)::integer AS d_u,
            sum((n.status IN ('dead', 'cancelled'))::integer
                - (o.status IN ('dead', 'cancelled'))::integer)::integer AS d_f
        FROM pgqueue_new_rows n JOIN pgqueue_old_rows o ON o.id = n.id
        WHERE n.batch_id IS NOT NULL AND o.status IS DISTINCT FROM n.status
          AND (n.status IN ('completed', 'dead', 'cancelled')
               OR o.status IN ('completed', 'dead', 'cancelled'))
        GROUP BY 1, 2
        ORDER BY 1, 2
    LOOP
        IF g.d_u = 0 AND g.d_f = 0 THEN
            CONTINUE;
        END IF;
        IF cur IS DISTINCT FROM g.b THEN
            IF cur IS NOT NULL AND (opened <> 0 OR failing <> 0) THEN
                PERFORM pgqueue_batch_counted(cur, opened, failing);
            END IF;
            cur := g.b;
            opened := 0;
            failing := 0;
        END IF;
        SELECT * INTO t FROM pgqueue_batch_tally_add(g.b, g.bucket, g.d_u, g.d_f);
        opened := opened + t.d_open;
        failing := failing + t.d_failing;
    END LOOP;
    IF cur IS NOT NULL AND (opened <> 0 OR failing <> 0) THEN
        PERFORM pgqueue_batch_counted(cur, opened, failing);
    END IF;
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_batch_seal(bigint)
CREATE FUNCTION public.pgqueue_batch_seal(b bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    UPDATE pgqueue_batch SET sealed_at = now() WHERE id = b AND sealed_at IS NULL;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    INSERT INTO pgqueue_batch_tally (batch_id, bucket, unfinished, failed)
    SELECT b, j.id / 128,
           count(*) FILTER (WHERE j.status NOT IN ('completed', 'dead', 'cancelled')),
           count(*) FILTER (WHERE j.status IN ('dead', 'cancelled'))
    FROM pgqueue_job j WHERE j.batch_id = b
    GROUP BY j.id / 128;
    UPDATE pgqueue_batch SET
        buckets_left = (SELECT count(*) FROM pgqueue_batch_tally t
                        WHERE t.batch_id = b AND t.unfinished > 0),
        failed_buckets = (SELECT count(*) FROM pgqueue_batch_tally t
                          WHERE t.batch_id = b AND t.unfinished = 0 AND t.failed > 0)
    WHERE id = b;
    PERFORM pgqueue_batch_finish(b);
END;
$$;

-- FUNCTION pgqueue_batch_tally_add(bigint, bigint, integer, integer)
CREATE FUNCTION public.pgqueue_batch_tally_add(b bigint, bucket_no bigint, d_unfinished integer, d_failed integer, OUT d_open integer, OUT d_failing integer) RETURNS record
    LANGUAGE plpgsql
    AS $$
DECLARE
    sealed boolean;
    new_u integer;
    new_f integer;
BEGIN
    d_open := 0;
    d_failing := 0;
    UPDATE pgqueue_batch_tally SET unfinished = unfinished + d_unfinished,
        failed = failed + d_failed
    WHERE batch_id = b AND bucket = bucket_no
    RETURNING unfinished, failed INTO new_u, new_f;
    IF NOT FOUND THEN
        SELECT sealed_at IS NOT NULL INTO sealed FROM pgqueue_batch WHERE id = b FOR SHARE;
        IF sealed IS NULL OR NOT sealed THEN
            RETURN;
        END IF;
        UPDATE pgqueue_batch_tally SET unfinished = unfinished + d_unfinished,
            failed = failed + d_failed
        WHERE batch_id = b AND bucket = bucket_no
        RETURNING unfinished, failed INTO new_u, new_f;
        IF NOT FOUND THEN
            RETURN;
        END IF;
    END IF;
    d_open := (new_u > 0)::integer - (new_u - d_unfinished > 0)::integer;
    d_failing := (new_u = 0 AND new_f > 0)::integer
        - (new_u - d_unfinished = 0 AND new_f - d_failed > 0)::integer;
END;
$$;

-- FUNCTION pgqueue_flow_cancel(bigint, text, bigint)
CREATE FUNCTION public.pgqueue_flow_cancel(parent bigint, why text, only_child bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
BEGIN
    WITH RECURSIVE r(parent_id, child_id) AS (
        SELECT d.parent_id, d.child_id FROM pgqueue_job_dependency d
        JOIN pgqueue_job c ON c.id = d.child_id AND c.status = 'waiting'
        WHERE d.parent_id = parent AND (only_child IS NULL OR d.child_id = only_child)
        UNION
        SELECT d.parent_id, d.child_id FROM r
        JOIN pgqueue_job_dependency d ON d.parent_id = r.child_id
        JOIN pgqueue_job c ON c.id = d.child_id AND c.status = 'waiting'
    ), first AS (
        SELECT DISTINCT ON (child_id) parent_id, child_id FROM r ORDER BY child_id, parent_id
    ), marked AS (
        UPDATE pgqueue_job_dependency d SET cascaded = true
        FROM first f WHERE d.child_id = f.child_id AND d.parent_id = f.parent_id
    )
    UPDATE pgqueue_job c SET status = 'cancelled', finished_at = now(),
        last_error = 'Cancelled without running: job #' || f.parent_id || ', which it waited '
            || 'for, ' || CASE WHEN f.parent_id = parent THEN why
                          ELSE 'was cancelled (job #' || parent || ' ' || why || ')' END
    FROM first f WHERE c.id = f.child_id AND c.status = 'waiting';
END;
$$;

-- FUNCTION pgqueue_flow_delete()
CREATE FUNCTION public.pgqueue_flow_delete() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF OLD.dependents AND OLD.status IN ('waiting', 'pending', 'running') THEN
        PERFORM pgqueue_flow_cancel(OLD.id, 'was deleted', NULL);
    END IF;
    IF OLD.parents_left IS NOT NULL THEN
        DELETE FROM pgqueue_job_dependency WHERE child_id = OLD.id;
    END IF;
    IF OLD.batch_id IS NOT NULL AND OLD.status IN ('waiting', 'pending', 'running') THEN
        PERFORM pgqueue_batch_count(OLD.batch_id, OLD.id, OLD.status, 'cancelled');
    END IF;
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_flow_edge()
CREATE FUNCTION public.pgqueue_flow_edge() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    parent_status text;
BEGIN
    SELECT status INTO parent_status FROM pgqueue_job WHERE id = NEW.parent_id
    FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'job #% (which job #% was enqueued after) no longer exists',
            NEW.parent_id, NEW.child_id
            USING ERRCODE = 'foreign_key_violation',
                  HINT = 'A parent must exist until its dependents are committed: pruned, '
                         'deleted, or completed under PGQUEUE_RETENTION = 0.';
    END IF;
    UPDATE pgqueue_job SET dependents = true WHERE id = NEW.parent_id AND NOT dependents;
    PERFORM pgqueue_flow_settle(NEW.parent_id, NULL, parent_status, NEW.child_id);
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_flow_hold()
CREATE FUNCTION public.pgqueue_flow_hold() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
DECLARE
    failed record;
BEGIN
    SELECT d.parent_id, p.status INTO failed FROM pgqueue_job_dependency d
    LEFT JOIN pgqueue_job p ON p.id = d.parent_id
    WHERE d.child_id = NEW.id AND NOT d.satisfied
      AND (p.id IS NULL OR p.status IN ('dead', 'cancelled'))
    ORDER BY d.parent_id LIMIT 1;
    IF FOUND THEN
        NEW.status := 'cancelled';
        NEW.finished_at := now();
        NEW.last_error := 'Cancelled without running: job #' || failed.parent_id || ', which it '
            || 'waited for, ' || coalesce('ended ' || failed.status, 'was deleted');
    ELSE
        NEW.status := 'waiting';
    END IF;
    RETURN NEW;
END;
$$;

-- FUNCTION pgqueue_flow_parent()
CREATE FUNCTION public.pgqueue_flow_parent() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pgqueue_flow_settle(NEW.id, OLD.status, NEW.status, NULL);
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_flow_settle(bigint, text, text, bigint)
CREATE FUNCTION public.pgqueue_flow_settle(parent bigint, old_status text, new_status text, only_child bigint) RETURNS void
    LANGUAGE plpgsql
    AS $$
DECLARE
    queues text[];
    counts integer[];
    tickets bigint[];
    restored bigint[];
    failed record;
BEGIN
    IF old_status = 'completed' AND new_status <> 'completed' THEN
        WITH e AS (
            UPDATE pgqueue_job_dependency d SET satisfied = false
            WHERE d.parent_id = parent AND d.satisfied
            RETURNING d.child_id
        )
        UPDATE pgqueue_job c SET parents_left = c.parents_left + 1,
            status = CASE WHEN c.status = 'pending' AND c.attempts = 0 THEN 'waiting'
                     ELSE c.status END
        FROM e WHERE c.id = e.child_id;
    END IF;
    IF old_status IN ('dead', 'cancelled') AND new_status NOT IN ('dead', 'cancelled') THEN
        WITH RECURSIVE r(parent_id, child_id) AS (
            SELECT d.parent_id, d.child_id FROM pgqueue_job_dependency d
            WHERE d.parent_id = parent AND d.cascaded
            UNION
            SELECT d.parent_id, d.child_id FROM r
            JOIN pgqueue_job_dependency d ON d.parent_id = r.child_id AND d.cascaded
        ), cleared AS (
            UPDATE pgqueue_job_dependency d SET cascaded = false
            FROM r WHERE d.child_id = r.child_id AND d.parent_id = r.parent_id
        ), back AS (
            UPDATE pgqueue_job c SET status = 'waiting', finished_at = NULL, last_error = ''
            FROM (SELECT DISTINCT child_id FROM r) x
            WHERE c.id = x.child_id AND c.status = 'cancelled'
            RETURNING c.id
        )
        SELECT array_agg(id) INTO restored FROM back;
        -- A child put back that waits for another parent that failed is cancelled by that one.
        FOR failed IN
            SELECT d.parent_id, d.child_id, p.status FROM pgqueue_job_dependency d
            JOIN pgqueue_job p ON p.id = d.parent_id
            WHERE d.child_id = ANY(coalesce(restored, '{}')) AND p.status IN ('dead', 'cancelled')
        LOOP
            PERFORM pgqueue_flow_cancel(failed.parent_id, 'ended ' || failed.status,
                                        failed.child_id);
        END LOOP;
    END IF;
    IF new_status = 'completed' THEN
        WITH e AS (
            UPDATE pgqueue_job_dependency d SET satisfied = true
            WHERE d.parent_id = parent AND NOT d.satisfied
              AND (only_child IS NULL OR d.child_id = only_child)
            RETURNING d.child_id
        ), released AS (
            UPDATE pgqueue_job c SET parents_left = c.parents_left - 1,
                status = CASE WHEN c.status = 'waiting' AND c.parents_left <= 1 THEN 'pending'
                         ELSE c.status END
            FROM e WHERE c.id = e.child_id
            RETURNING c.id, c.queue, c.status
        )
        SELECT array_agg(q.queue), array_agg(q.n), array_agg(q.first)
        INTO queues, counts, tickets
        FROM (SELECT queue, count(*)::integer AS n, min(id) AS first FROM released
              WHERE status = 'pending' GROUP BY queue) q;
        IF queues IS NOT NULL THEN
            PERFORM pgqueue_wake(queues, counts, tickets);
        END IF;
    ELSIF new_status IN ('dead', 'cancelled') AND old_status IS DISTINCT FROM new_status THEN
        PERFORM pgqueue_flow_cancel(parent, 'ended ' || new_status, only_child);
    END IF;
END;
$$;

-- FUNCTION pgqueue_listened(text)
CREATE FUNCTION public.pgqueue_listened(queue text) RETURNS boolean
    LANGUAGE plpgsql STABLE
    AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM pgqueue_worker w
        WHERE w.listening AND w.stopped_at IS NULL
          AND w.last_seen_at > now() - interval '5 minutes'
          AND (w.queues = '[]'::jsonb OR w.queues ? queue));
END;
$$;

-- FUNCTION pgqueue_notify_insert()
CREATE FUNCTION public.pgqueue_notify_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF current_setting('pgqueue.notify', true) = 'after_commit' THEN
        RETURN NULL;
    END IF;
    PERFORM pgqueue_wake(array_agg(q.queue), array_agg(q.n), array_agg(q.first))
    FROM (SELECT queue, count(*)::integer AS n, min(id) AS first
          FROM inserted GROUP BY queue) q;
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_notify_schedules()
CREATE FUNCTION public.pgqueue_notify_schedules() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    PERFORM pg_notify('pgqueue_schedules', '');
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_ready_delete()
CREATE FUNCTION public.pgqueue_ready_delete() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM pgqueue_ready r USING deleted d WHERE r.job_id = d.id;
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_ready_insert()
CREATE FUNCTION public.pgqueue_ready_insert() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit, is_async)
    SELECT pgqueue_ready_slot(id, run_after), id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit, is_async
    FROM inserted WHERE status = 'pending';
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_ready_recycle(integer)
CREATE FUNCTION public.pgqueue_ready_recycle(ring_slot integer) RETURNS boolean
    LANGUAGE plpgsql
    AS $$
DECLARE
    part text := format('pgqueue_ready_%s', ring_slot);
    rows_left bigint;
    target integer;
BEGIN
    EXECUTE format('LOCK TABLE %I IN ACCESS EXCLUSIVE MODE NOWAIT', part);
    EXECUTE format('SELECT count(*) FROM (SELECT 1 FROM %I LIMIT 257) s', part)
        INTO rows_left;
    IF rows_left > 256 THEN
        RETURN false;
    END IF;
    IF rows_left > 0 THEN
        EXECUTE format(
            'DELETE FROM %I r WHERE NOT EXISTS (SELECT 1 FROM pgqueue_job j '
            'WHERE j.id = r.job_id AND j.status = ''pending'')', part);
        -- Stragglers (pending jobs of a queue no worker serves, say) move to the slot inserts
        -- go to now, so they never keep this one from being truncated.
        target := (coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgqueue_job', 'id')), 0)
                   / 4096) % 8;
        IF target = ring_slot THEN
            RETURN false;
        END IF;
        EXECUTE format(
            'WITH moved AS (DELETE FROM %I RETURNING *) '
            'INSERT INTO pgqueue_ready (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit, is_async) '
            'SELECT %s, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit, is_async FROM moved', part, target);
    END IF;
    EXECUTE format('TRUNCATE %I', part);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END;
$$;

-- FUNCTION pgqueue_ready_refill()
CREATE FUNCTION public.pgqueue_ready_refill() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    WITH m AS (
        DELETE FROM pgqueue_ready_held h WHERE h.ctid = (
            SELECT ctid FROM pgqueue_ready_held
            WHERE (concurrency_key IS NOT NULL OR rate_key IS NOT NULL)
              AND coalesce('c:' || concurrency_key, 'r:' || rate_key)
                  = coalesce('c:' || OLD.concurrency_key, 'r:' || OLD.rate_key)
              AND NOT EXISTS (SELECT 1 FROM pgqueue_queue qc WHERE qc.name = queue AND qc.paused)
            ORDER BY priority DESC, run_after, job_id LIMIT 1 FOR UPDATE SKIP LOCKED)
        RETURNING h.*)
    INSERT INTO pgqueue_ready
        (slot, job_id, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit,
         is_async)
    SELECT mod(coalesce(pg_sequence_last_value(pg_get_serial_sequence('pgqueue_job', 'id')), 0)
        / 4096, 8), m.job_id, m.queue, m.priority, m.run_after, m.concurrency_key, m.rate_key,
        m.concurrency_limit, m.is_async
    FROM m;
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_ready_slot(bigint, timestamp with time zone)
CREATE FUNCTION public.pgqueue_ready_slot(job_id bigint, run_after timestamp with time zone) RETURNS smallint
    LANGUAGE sql
    AS $$
    SELECT (CASE WHEN run_after > clock_timestamp() THEN -1
            ELSE (job_id / 4096) % 8 END)::smallint
$$;

-- FUNCTION pgqueue_ready_truncate()
CREATE FUNCTION public.pgqueue_ready_truncate() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    TRUNCATE pgqueue_ready;
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_ready_update()
CREATE FUNCTION public.pgqueue_ready_update() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    DELETE FROM pgqueue_ready WHERE job_id = OLD.id;
    IF NEW.status = 'pending' THEN
        INSERT INTO pgqueue_ready
            (slot, job_id, queue, priority, run_after, concurrency_key, rate_key,
             concurrency_limit, is_async)
        VALUES (pgqueue_ready_slot(NEW.id, NEW.run_after), NEW.id, NEW.queue, NEW.priority,
                NEW.run_after, NEW.concurrency_key, NEW.rate_key, NEW.concurrency_limit,
                NEW.is_async);
    END IF;
    RETURN NULL;
END;
$$;

-- FUNCTION pgqueue_wake(text[], integer[], bigint[])
CREATE FUNCTION public.pgqueue_wake(queues text[], jobs integer[], tickets bigint[]) RETURNS void
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    PERFORM pg_notify(r.channel, w.q || ' ' || w.t || ' ' || w.n)
    FROM unnest(queues, jobs, tickets) AS w(q, n, t)
    JOIN LATERAL (
        SELECT 'pgqueue.' || left(md5(x.worker_id), 20) AS channel
        FROM (
            SELECT p.worker_id,
                   row_number() OVER (ORDER BY p.worker_id COLLATE "C") - 1 AS k,
                   count(*) OVER () AS size
            FROM pgqueue_worker p
            WHERE p.listening AND p.stopped_at IS NULL
              AND p.last_seen_at > now() - interval '5 minutes'
              AND (p.queues = '[]'::jsonb OR p.queues ? w.q)
        ) x
        WHERE x.k = w.t % x.size
    ) r ON true;
END;
$$;

-- FUNCTION pgqueue_wake(text[], integer[], bigint[], text[])
CREATE FUNCTION public.pgqueue_wake(queues text[], jobs integer[], tickets bigint[], kinds text[]) RETURNS void
    LANGUAGE plpgsql
    SET plan_cache_mode TO 'force_generic_plan'
    AS $$
BEGIN
    PERFORM pg_notify(r.channel, w.q || ' ' || w.t || ' ' || w.n
                                 || coalesce(' 0 ' || w.kind, ''))
    FROM unnest(queues, jobs, tickets, kinds) AS w(q, n, t, kind)
    JOIN LATERAL (
        SELECT 'pgqueue.' || left(md5(x.worker_id), 20) AS channel
        FROM (
            SELECT p.worker_id,
                   row_number() OVER (ORDER BY p.worker_id COLLATE "C") - 1 AS k,
                   count(*) OVER () AS size
            FROM pgqueue_worker p
            WHERE p.listening AND p.stopped_at IS NULL
              AND p.last_seen_at > now() - interval '5 minutes'
              AND (p.queues = '[]'::jsonb OR p.queues ? w.q)
        ) x
        WHERE x.k = w.t % x.size
    ) r ON true;
END;
$$;

-- TABLE pgqueue_batch
CREATE TABLE public.pgqueue_batch (
    id bigint NOT NULL,
    description character varying(255) DEFAULT ''::character varying NOT NULL,
    on_success jsonb,
    on_failure jsonb,
    on_complete jsonb,
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    sealed_at timestamp with time zone,
    finished_at timestamp with time zone,
    buckets_left integer DEFAULT 0 NOT NULL,
    failed_buckets integer DEFAULT 0 NOT NULL,
    fired jsonb DEFAULT '[]'::jsonb NOT NULL
);

-- TABLE pgqueue_batch_tally
CREATE TABLE public.pgqueue_batch_tally (
    id bigint NOT NULL,
    bucket bigint NOT NULL,
    unfinished integer NOT NULL,
    failed integer NOT NULL,
    batch_id bigint NOT NULL
);

-- TABLE pgqueue_job
CREATE TABLE public.pgqueue_job (
    id bigint NOT NULL,
    queue character varying(100) DEFAULT 'default'::character varying NOT NULL,
    name character varying(255) NOT NULL,
    args jsonb DEFAULT '[]'::jsonb NOT NULL,
    kwargs jsonb DEFAULT '{}'::jsonb NOT NULL,
    status character varying(16) DEFAULT 'pending'::character varying NOT NULL,
    priority smallint DEFAULT 0 NOT NULL,
    run_after timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    attempts integer DEFAULT 0 NOT NULL,
    max_attempts integer DEFAULT 5 NOT NULL,
    locked_at timestamp with time zone,
    locked_by character varying(255),
    last_error text DEFAULT ''::text NOT NULL,
    errors jsonb DEFAULT '[]'::jsonb NOT NULL,
    result jsonb,
    unique_key character varying(255),
    concurrency_key character varying(255),
    created_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    started_at timestamp with time zone,
    finished_at timestamp with time zone,
    cancel_requested_at timestamp with time zone,
    progress jsonb,
    schedule character varying(255),
    concurrency_limit integer,
    concurrency_place smallint DEFAULT 0 NOT NULL,
    rate_key character varying(255),
    interruptions integer DEFAULT 0 NOT NULL,
    claim_token bigint,
    trace_context jsonb,
    is_async boolean DEFAULT false NOT NULL,
    dependents boolean DEFAULT false NOT NULL,
    parents_left integer,
    batch_id bigint,
    callback_of bigint,
    CONSTRAINT pgqueue_job_attempts_check CHECK ((attempts >= 0)),
    CONSTRAINT pgqueue_job_concurrency_limit_check CHECK ((concurrency_limit >= 0)),
    CONSTRAINT pgqueue_job_concurrency_place_check CHECK ((concurrency_place >= 0)),
    CONSTRAINT pgqueue_job_interruptions_check CHECK ((interruptions >= 0)),
    CONSTRAINT pgqueue_job_max_attempts CHECK ((max_attempts >= 1)),
    CONSTRAINT pgqueue_job_max_attempts_check CHECK ((max_attempts >= 0)),
    CONSTRAINT pgqueue_job_priority_range CHECK (((priority >= '-100'::integer) AND (priority <= 100))),
    CONSTRAINT pgqueue_job_status_valid CHECK (((status)::text = ANY ((ARRAY['pending'::character varying, 'waiting'::character varying, 'running'::character varying, 'completed'::character varying, 'dead'::character varying, 'cancelled'::character varying])::text[]))),
    CONSTRAINT pgqueue_job_trace_context_check CHECK (((trace_context IS NULL) OR ((jsonb_typeof(trace_context) = 'object'::text) AND ((trace_context ->> 'traceparent'::text) ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'::text))))
)
WITH (parallel_workers='0');

-- TABLE pgqueue_job_dependency
CREATE TABLE public.pgqueue_job_dependency (
    id bigint NOT NULL,
    satisfied boolean DEFAULT false NOT NULL,
    cascaded boolean DEFAULT false NOT NULL,
    child_id bigint NOT NULL,
    parent_id bigint NOT NULL
);

-- TABLE pgqueue_queue
CREATE TABLE public.pgqueue_queue (
    name character varying(100) NOT NULL,
    paused boolean DEFAULT false NOT NULL,
    concurrency_limit integer,
    rate_limit character varying(32),
    updated_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    CONSTRAINT pgqueue_queue_concurrency_limit_check CHECK ((concurrency_limit >= 0))
);

-- TABLE pgqueue_rate_window
CREATE TABLE public.pgqueue_rate_window (
    id character varying(300) NOT NULL,
    starts integer NOT NULL,
    period double precision NOT NULL,
    recent timestamp with time zone[] NOT NULL,
    updated_at timestamp with time zone DEFAULT statement_timestamp() NOT NULL,
    counts integer[] NOT NULL,
    CONSTRAINT pgqueue_rate_window_starts_check CHECK ((starts >= 0))
);

-- TABLE pgqueue_ready
CREATE TABLE public.pgqueue_ready (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
)
PARTITION BY LIST (slot);

-- TABLE pgqueue_ready_0
CREATE TABLE public.pgqueue_ready_0 (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_ready_1
CREATE TABLE public.pgqueue_ready_1 (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_ready_2
CREATE TABLE public.pgqueue_ready_2 (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_ready_3
CREATE TABLE public.pgqueue_ready_3 (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_ready_4
CREATE TABLE public.pgqueue_ready_4 (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_ready_5
CREATE TABLE public.pgqueue_ready_5 (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_ready_6
CREATE TABLE public.pgqueue_ready_6 (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_ready_7
CREATE TABLE public.pgqueue_ready_7 (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_ready_held
CREATE TABLE public.pgqueue_ready_held (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_ready_later
CREATE TABLE public.pgqueue_ready_later (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_ready_parked
CREATE TABLE public.pgqueue_ready_parked (
    slot smallint NOT NULL,
    job_id bigint NOT NULL,
    queue character varying(100) NOT NULL,
    priority smallint NOT NULL,
    run_after timestamp with time zone NOT NULL,
    concurrency_key character varying(255),
    rate_key character varying(255),
    concurrency_limit integer,
    is_async boolean DEFAULT false NOT NULL
);

-- TABLE pgqueue_schedule
CREATE TABLE public.pgqueue_schedule (
    id bigint NOT NULL,
    name character varying(255) NOT NULL,
    job character varying(255) NOT NULL,
    cron character varying(255) NOT NULL,
    every double precision,
    timezone character varying(64) NOT NULL,
    args jsonb NOT NULL,
    kwargs jsonb NOT NULL,
    queue character varying(100),
    priority smallint,
    catch_up boolean NOT NULL,
    enabled boolean NOT NULL,
    next_run_at timestamp with time zone,
    last_run_at timestamp with time zone,
    source character varying(8) NOT NULL,
    code jsonb,
    created_at timestamp with time zone NOT NULL,
    updated_at timestamp with time zone NOT NULL,
    CONSTRAINT pgqueue_schedule_cron_or_every CHECK (((((cron)::text = ''::text) AND (every >= (1.0)::double precision)) OR ((NOT ((cron)::text = ''::text)) AND (every IS NULL)))),
    CONSTRAINT pgqueue_schedule_priority_range CHECK (((priority IS NULL) OR ((priority >= '-100'::integer) AND (priority <= 100))))
);

-- TABLE pgqueue_worker
CREATE TABLE public.pgqueue_worker (
    worker_id character varying(255) NOT NULL,
    hostname character varying(255) NOT NULL,
    pid integer NOT NULL,
    queues jsonb NOT NULL,
    threads integer NOT NULL,
    started_at timestamp with time zone NOT NULL,
    last_seen_at timestamp with time zone NOT NULL,
    jobs_done bigint NOT NULL,
    stopped_at timestamp with time zone,
    abandoned jsonb DEFAULT '[]'::jsonb NOT NULL,
    listening boolean DEFAULT false NOT NULL,
    listener character varying(20),
    CONSTRAINT pgqueue_worker_pid_check CHECK ((pid >= 0)),
    CONSTRAINT pgqueue_worker_threads_check CHECK ((threads >= 0))
);

-- TABLE ATTACH pgqueue_ready_0
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_0 FOR VALUES IN ('0');

-- TABLE ATTACH pgqueue_ready_1
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_1 FOR VALUES IN ('1');

-- TABLE ATTACH pgqueue_ready_2
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_2 FOR VALUES IN ('2');

-- TABLE ATTACH pgqueue_ready_3
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_3 FOR VALUES IN ('3');

-- TABLE ATTACH pgqueue_ready_4
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_4 FOR VALUES IN ('4');

-- TABLE ATTACH pgqueue_ready_5
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_5 FOR VALUES IN ('5');

-- TABLE ATTACH pgqueue_ready_6
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_6 FOR VALUES IN ('6');

-- TABLE ATTACH pgqueue_ready_7
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_7 FOR VALUES IN ('7');

-- TABLE ATTACH pgqueue_ready_held
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_held FOR VALUES IN ('-3');

-- TABLE ATTACH pgqueue_ready_later
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_later FOR VALUES IN ('-1');

-- TABLE ATTACH pgqueue_ready_parked
ALTER TABLE ONLY public.pgqueue_ready ATTACH PARTITION public.pgqueue_ready_parked FOR VALUES IN ('-2');

-- SEQUENCE pgqueue_batch_id_seq
ALTER TABLE public.pgqueue_batch ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME public.pgqueue_batch_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- SEQUENCE pgqueue_batch_tally_id_seq
ALTER TABLE public.pgqueue_batch_tally ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME public.pgqueue_batch_tally_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- SEQUENCE pgqueue_claim_token
CREATE SEQUENCE public.pgqueue_claim_token
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE pgqueue_job_dependency_id_seq
ALTER TABLE public.pgqueue_job_dependency ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME public.pgqueue_job_dependency_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- SEQUENCE pgqueue_job_id_seq
ALTER TABLE public.pgqueue_job ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME public.pgqueue_job_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- SEQUENCE pgqueue_repair_position
CREATE SEQUENCE public.pgqueue_repair_position
    START WITH 0
    INCREMENT BY 1
    MINVALUE 0
    NO MAXVALUE
    CACHE 1;

-- SEQUENCE pgqueue_schedule_id_seq
ALTER TABLE public.pgqueue_schedule ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (
    SEQUENCE NAME public.pgqueue_schedule_id_seq
    START WITH 1
    INCREMENT BY 1
    NO MINVALUE
    NO MAXVALUE
    CACHE 1
);

-- CONSTRAINT pgqueue_batch pgqueue_batch_pkey
ALTER TABLE ONLY public.pgqueue_batch
    ADD CONSTRAINT pgqueue_batch_pkey PRIMARY KEY (id);

-- CONSTRAINT pgqueue_batch_tally pgqueue_batch_tally_pkey
ALTER TABLE ONLY public.pgqueue_batch_tally
    ADD CONSTRAINT pgqueue_batch_tally_pkey PRIMARY KEY (id);

-- CONSTRAINT pgqueue_job pgqueue_job_pkey
ALTER TABLE ONLY public.pgqueue_job
    ADD CONSTRAINT pgqueue_job_pkey PRIMARY KEY (id);

-- CONSTRAINT pgqueue_job_dependency pgqueue_job_dependency_pkey
ALTER TABLE ONLY public.pgqueue_job_dependency
    ADD CONSTRAINT pgqueue_job_dependency_pkey PRIMARY KEY (id);

-- CONSTRAINT pgqueue_queue pgqueue_queue_pkey
ALTER TABLE ONLY public.pgqueue_queue
    ADD CONSTRAINT pgqueue_queue_pkey PRIMARY KEY (name);

-- CONSTRAINT pgqueue_rate_window pgqueue_rate_window_pkey
ALTER TABLE ONLY public.pgqueue_rate_window
    ADD CONSTRAINT pgqueue_rate_window_pkey PRIMARY KEY (id);

-- CONSTRAINT pgqueue_schedule pgqueue_schedule_name_key
ALTER TABLE ONLY public.pgqueue_schedule
    ADD CONSTRAINT pgqueue_schedule_name_key UNIQUE (name);

-- CONSTRAINT pgqueue_schedule pgqueue_schedule_pkey
ALTER TABLE ONLY public.pgqueue_schedule
    ADD CONSTRAINT pgqueue_schedule_pkey PRIMARY KEY (id);

-- CONSTRAINT pgqueue_worker pgqueue_worker_pkey
ALTER TABLE ONLY public.pgqueue_worker
    ADD CONSTRAINT pgqueue_worker_pkey PRIMARY KEY (worker_id);

-- INDEX pgqueue_batch_finished
CREATE INDEX pgqueue_batch_finished ON public.pgqueue_batch USING btree (finished_at) WHERE (finished_at IS NOT NULL);

-- INDEX pgqueue_batch_tally_bucket
CREATE UNIQUE INDEX pgqueue_batch_tally_bucket ON public.pgqueue_batch_tally USING btree (batch_id, bucket);

-- INDEX pgqueue_dependency_edge
CREATE UNIQUE INDEX pgqueue_dependency_edge ON public.pgqueue_job_dependency USING btree (child_id, parent_id);

-- INDEX pgqueue_job_batch
CREATE INDEX pgqueue_job_batch ON public.pgqueue_job USING btree (batch_id, id) WHERE (batch_id IS NOT NULL);

-- INDEX pgqueue_job_claim_queue
CREATE INDEX pgqueue_job_claim_queue ON public.pgqueue_job USING btree (queue, priority DESC, run_after, id) WHERE ((status)::text = 'pending'::text);

-- INDEX pgqueue_job_dead
CREATE INDEX pgqueue_job_dead ON public.pgqueue_job USING btree (queue, id) WHERE ((status)::text = 'dead'::text);

-- INDEX pgqueue_job_dependency_parent_id_08c2e066
CREATE INDEX pgqueue_job_dependency_parent_id_08c2e066 ON public.pgqueue_job_dependency USING btree (parent_id);

-- INDEX pgqueue_job_finished
CREATE INDEX pgqueue_job_finished ON public.pgqueue_job USING btree (finished_at) WHERE ((status)::text = ANY ((ARRAY['completed'::character varying, 'dead'::character varying, 'cancelled'::character varying])::text[]));

-- INDEX pgqueue_job_running_per_key_place
CREATE UNIQUE INDEX pgqueue_job_running_per_key_place ON public.pgqueue_job USING btree (concurrency_key, concurrency_place) WHERE ((concurrency_key IS NOT NULL) AND ((status)::text = 'running'::text));

-- INDEX pgqueue_job_schedule
CREATE INDEX pgqueue_job_schedule ON public.pgqueue_job USING btree (schedule, id) WHERE (schedule IS NOT NULL);

-- INDEX pgqueue_job_stale
CREATE INDEX pgqueue_job_stale ON public.pgqueue_job USING btree (locked_at) WHERE ((status)::text = 'running'::text);

-- INDEX pgqueue_job_unique_active
CREATE UNIQUE INDEX pgqueue_job_unique_active ON public.pgqueue_job USING btree (queue, unique_key) WHERE (((status)::text = ANY ((ARRAY['pending'::character varying, 'running'::character varying, 'waiting'::character varying])::text[])) AND (unique_key IS NOT NULL));

-- INDEX pgqueue_job_waiting
CREATE INDEX pgqueue_job_waiting ON public.pgqueue_job USING btree (queue, id) WHERE ((status)::text = 'waiting'::text);

-- INDEX pgqueue_queue_name_95f032e9_like
CREATE INDEX pgqueue_queue_name_95f032e9_like ON public.pgqueue_queue USING btree (name varchar_pattern_ops);

-- INDEX pgqueue_rate_window_id_4475d873_like
CREATE INDEX pgqueue_rate_window_id_4475d873_like ON public.pgqueue_rate_window USING btree (id varchar_pattern_ops);

-- INDEX pgqueue_ready_0_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_0_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_0 USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_0_job_id_idx
CREATE INDEX pgqueue_ready_0_job_id_idx ON public.pgqueue_ready_0 USING btree (job_id);

-- INDEX pgqueue_ready_0_job_id_idx1
CREATE INDEX pgqueue_ready_0_job_id_idx1 ON public.pgqueue_ready_0 USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_0_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_0_priority_run_after_job_id_idx ON public.pgqueue_ready_0 USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_0_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_0_priority_run_after_job_id_idx1 ON public.pgqueue_ready_0 USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_0_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_0_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_0 USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_0_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_0_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_0 USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_1_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_1_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_1 USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_1_job_id_idx
CREATE INDEX pgqueue_ready_1_job_id_idx ON public.pgqueue_ready_1 USING btree (job_id);

-- INDEX pgqueue_ready_1_job_id_idx1
CREATE INDEX pgqueue_ready_1_job_id_idx1 ON public.pgqueue_ready_1 USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_1_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_1_priority_run_after_job_id_idx ON public.pgqueue_ready_1 USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_1_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_1_priority_run_after_job_id_idx1 ON public.pgqueue_ready_1 USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_1_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_1_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_1 USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_1_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_1_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_1 USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_2_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_2_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_2 USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_2_job_id_idx
CREATE INDEX pgqueue_ready_2_job_id_idx ON public.pgqueue_ready_2 USING btree (job_id);

-- INDEX pgqueue_ready_2_job_id_idx1
CREATE INDEX pgqueue_ready_2_job_id_idx1 ON public.pgqueue_ready_2 USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_2_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_2_priority_run_after_job_id_idx ON public.pgqueue_ready_2 USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_2_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_2_priority_run_after_job_id_idx1 ON public.pgqueue_ready_2 USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_2_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_2_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_2 USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_2_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_2_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_2 USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_3_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_3_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_3 USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_3_job_id_idx
CREATE INDEX pgqueue_ready_3_job_id_idx ON public.pgqueue_ready_3 USING btree (job_id);

-- INDEX pgqueue_ready_3_job_id_idx1
CREATE INDEX pgqueue_ready_3_job_id_idx1 ON public.pgqueue_ready_3 USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_3_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_3_priority_run_after_job_id_idx ON public.pgqueue_ready_3 USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_3_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_3_priority_run_after_job_id_idx1 ON public.pgqueue_ready_3 USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_3_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_3_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_3 USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_3_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_3_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_3 USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_4_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_4_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_4 USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_4_job_id_idx
CREATE INDEX pgqueue_ready_4_job_id_idx ON public.pgqueue_ready_4 USING btree (job_id);

-- INDEX pgqueue_ready_4_job_id_idx1
CREATE INDEX pgqueue_ready_4_job_id_idx1 ON public.pgqueue_ready_4 USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_4_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_4_priority_run_after_job_id_idx ON public.pgqueue_ready_4 USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_4_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_4_priority_run_after_job_id_idx1 ON public.pgqueue_ready_4 USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_4_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_4_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_4 USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_4_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_4_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_4 USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_5_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_5_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_5 USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_5_job_id_idx
CREATE INDEX pgqueue_ready_5_job_id_idx ON public.pgqueue_ready_5 USING btree (job_id);

-- INDEX pgqueue_ready_5_job_id_idx1
CREATE INDEX pgqueue_ready_5_job_id_idx1 ON public.pgqueue_ready_5 USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_5_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_5_priority_run_after_job_id_idx ON public.pgqueue_ready_5 USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_5_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_5_priority_run_after_job_id_idx1 ON public.pgqueue_ready_5 USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_5_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_5_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_5 USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_5_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_5_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_5 USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_6_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_6_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_6 USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_6_job_id_idx
CREATE INDEX pgqueue_ready_6_job_id_idx ON public.pgqueue_ready_6 USING btree (job_id);

-- INDEX pgqueue_ready_6_job_id_idx1
CREATE INDEX pgqueue_ready_6_job_id_idx1 ON public.pgqueue_ready_6 USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_6_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_6_priority_run_after_job_id_idx ON public.pgqueue_ready_6 USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_6_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_6_priority_run_after_job_id_idx1 ON public.pgqueue_ready_6 USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_6_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_6_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_6 USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_6_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_6_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_6 USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_7_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_7_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_7 USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_7_job_id_idx
CREATE INDEX pgqueue_ready_7_job_id_idx ON public.pgqueue_ready_7 USING btree (job_id);

-- INDEX pgqueue_ready_7_job_id_idx1
CREATE INDEX pgqueue_ready_7_job_id_idx1 ON public.pgqueue_ready_7 USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_7_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_7_priority_run_after_job_id_idx ON public.pgqueue_ready_7 USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_7_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_7_priority_run_after_job_id_idx1 ON public.pgqueue_ready_7 USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_7_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_7_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_7 USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_7_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_7_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_7 USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_async
CREATE INDEX pgqueue_ready_async ON ONLY public.pgqueue_ready USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_async_queue
CREATE INDEX pgqueue_ready_async_queue ON ONLY public.pgqueue_ready USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_claim
CREATE INDEX pgqueue_ready_claim ON ONLY public.pgqueue_ready USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_claim_queue
CREATE INDEX pgqueue_ready_claim_queue ON ONLY public.pgqueue_ready USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_group
CREATE INDEX pgqueue_ready_group ON ONLY public.pgqueue_ready USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_held_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_held_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_held USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_held_job
CREATE INDEX pgqueue_ready_held_job ON public.pgqueue_ready_held USING btree (job_id);

-- INDEX pgqueue_ready_held_job_id_idx
CREATE INDEX pgqueue_ready_held_job_id_idx ON public.pgqueue_ready_held USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_held_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_held_priority_run_after_job_id_idx ON public.pgqueue_ready_held USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_held_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_held_priority_run_after_job_id_idx1 ON public.pgqueue_ready_held USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_held_queue
CREATE INDEX pgqueue_ready_held_queue ON public.pgqueue_ready_held USING btree (queue, priority DESC, run_after, job_id) WHERE ((concurrency_key IS NULL) AND (rate_key IS NULL));

-- INDEX pgqueue_ready_held_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_held_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_held USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_held_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_held_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_held USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_job
CREATE INDEX pgqueue_ready_job ON ONLY public.pgqueue_ready USING btree (job_id);

-- INDEX pgqueue_ready_later_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_later_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_later USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_later_due
CREATE INDEX pgqueue_ready_later_due ON public.pgqueue_ready_later USING btree (run_after);

-- INDEX pgqueue_ready_later_job
CREATE INDEX pgqueue_ready_later_job ON public.pgqueue_ready_later USING btree (job_id);

-- INDEX pgqueue_ready_later_job_id_idx1
CREATE INDEX pgqueue_ready_later_job_id_idx1 ON public.pgqueue_ready_later USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_later_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_later_priority_run_after_job_id_idx ON public.pgqueue_ready_later USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_later_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_later_priority_run_after_job_id_idx1 ON public.pgqueue_ready_later USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_later_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_later_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_later USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_later_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_later_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_later USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_limited
CREATE INDEX pgqueue_ready_limited ON ONLY public.pgqueue_ready USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_parked_coalesce_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_parked_coalesce_priority_run_after_job_id_idx ON public.pgqueue_ready_parked USING btree (COALESCE(('c:'::text || (concurrency_key)::text), ('r:'::text || (rate_key)::text)), priority DESC, run_after, job_id) WHERE ((concurrency_key IS NOT NULL) OR (rate_key IS NOT NULL));

-- INDEX pgqueue_ready_parked_job
CREATE INDEX pgqueue_ready_parked_job ON public.pgqueue_ready_parked USING btree (job_id);

-- INDEX pgqueue_ready_parked_job_id_idx
CREATE INDEX pgqueue_ready_parked_job_id_idx ON public.pgqueue_ready_parked USING btree (job_id) WHERE ((rate_key IS NOT NULL) OR (concurrency_limit IS NOT NULL));

-- INDEX pgqueue_ready_parked_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_parked_priority_run_after_job_id_idx ON public.pgqueue_ready_parked USING btree (priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_parked_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_parked_priority_run_after_job_id_idx1 ON public.pgqueue_ready_parked USING btree (priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_ready_parked_queue_priority_run_after_job_id_idx
CREATE INDEX pgqueue_ready_parked_queue_priority_run_after_job_id_idx ON public.pgqueue_ready_parked USING btree (queue, priority DESC, run_after, job_id);

-- INDEX pgqueue_ready_parked_queue_priority_run_after_job_id_idx1
CREATE INDEX pgqueue_ready_parked_queue_priority_run_after_job_id_idx1 ON public.pgqueue_ready_parked USING btree (queue, priority DESC, run_after, job_id) WHERE is_async;

-- INDEX pgqueue_sched_due
CREATE INDEX pgqueue_sched_due ON public.pgqueue_schedule USING btree (next_run_at) WHERE enabled;

-- INDEX pgqueue_schedule_name_2cb0390b_like
CREATE INDEX pgqueue_schedule_name_2cb0390b_like ON public.pgqueue_schedule USING btree (name varchar_pattern_ops);

-- INDEX pgqueue_worker_worker_id_efa5f9eb_like
CREATE INDEX pgqueue_worker_worker_id_efa5f9eb_like ON public.pgqueue_worker USING btree (worker_id varchar_pattern_ops);

-- INDEX ATTACH pgqueue_ready_0_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_0_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_0_job_id_idx
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_0_job_id_idx;

-- INDEX ATTACH pgqueue_ready_0_job_id_idx1
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_0_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_0_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_0_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_0_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_0_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_0_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_0_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_0_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_0_queue_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_1_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_1_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_1_job_id_idx
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_1_job_id_idx;

-- INDEX ATTACH pgqueue_ready_1_job_id_idx1
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_1_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_1_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_1_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_1_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_1_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_1_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_1_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_1_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_1_queue_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_2_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_2_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_2_job_id_idx
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_2_job_id_idx;

-- INDEX ATTACH pgqueue_ready_2_job_id_idx1
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_2_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_2_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_2_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_2_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_2_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_2_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_2_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_2_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_2_queue_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_3_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_3_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_3_job_id_idx
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_3_job_id_idx;

-- INDEX ATTACH pgqueue_ready_3_job_id_idx1
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_3_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_3_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_3_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_3_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_3_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_3_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_3_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_3_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_3_queue_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_4_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_4_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_4_job_id_idx
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_4_job_id_idx;

-- INDEX ATTACH pgqueue_ready_4_job_id_idx1
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_4_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_4_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_4_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_4_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_4_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_4_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_4_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_4_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_4_queue_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_5_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_5_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_5_job_id_idx
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_5_job_id_idx;

-- INDEX ATTACH pgqueue_ready_5_job_id_idx1
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_5_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_5_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_5_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_5_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_5_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_5_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_5_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_5_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_5_queue_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_6_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_6_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_6_job_id_idx
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_6_job_id_idx;

-- INDEX ATTACH pgqueue_ready_6_job_id_idx1
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_6_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_6_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_6_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_6_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_6_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_6_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_6_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_6_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_6_queue_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_7_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_7_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_7_job_id_idx
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_7_job_id_idx;

-- INDEX ATTACH pgqueue_ready_7_job_id_idx1
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_7_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_7_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_7_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_7_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_7_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_7_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_7_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_7_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_7_queue_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_held_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_held_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_held_job
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_held_job;

-- INDEX ATTACH pgqueue_ready_held_job_id_idx
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_held_job_id_idx;

-- INDEX ATTACH pgqueue_ready_held_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_held_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_held_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_held_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_held_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_held_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_held_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_held_queue_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_later_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_later_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_later_job
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_later_job;

-- INDEX ATTACH pgqueue_ready_later_job_id_idx1
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_later_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_later_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_later_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_later_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_later_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_later_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_later_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_later_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_later_queue_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_parked_coalesce_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_group ATTACH PARTITION public.pgqueue_ready_parked_coalesce_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_parked_job
ALTER INDEX public.pgqueue_ready_job ATTACH PARTITION public.pgqueue_ready_parked_job;

-- INDEX ATTACH pgqueue_ready_parked_job_id_idx
ALTER INDEX public.pgqueue_ready_limited ATTACH PARTITION public.pgqueue_ready_parked_job_id_idx;

-- INDEX ATTACH pgqueue_ready_parked_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim ATTACH PARTITION public.pgqueue_ready_parked_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_parked_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async ATTACH PARTITION public.pgqueue_ready_parked_priority_run_after_job_id_idx1;

-- INDEX ATTACH pgqueue_ready_parked_queue_priority_run_after_job_id_idx
ALTER INDEX public.pgqueue_ready_claim_queue ATTACH PARTITION public.pgqueue_ready_parked_queue_priority_run_after_job_id_idx;

-- INDEX ATTACH pgqueue_ready_parked_queue_priority_run_after_job_id_idx1
ALTER INDEX public.pgqueue_ready_async_queue ATTACH PARTITION public.pgqueue_ready_parked_queue_priority_run_after_job_id_idx1;

-- TRIGGER pgqueue_batch pgqueue_batch_delete
CREATE TRIGGER pgqueue_batch_delete AFTER DELETE ON public.pgqueue_batch REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION public.pgqueue_batch_delete();

-- TRIGGER pgqueue_job pgqueue_job_batch_members
CREATE TRIGGER pgqueue_job_batch_members AFTER UPDATE ON public.pgqueue_job REFERENCING OLD TABLE AS pgqueue_old_rows NEW TABLE AS pgqueue_new_rows FOR EACH STATEMENT EXECUTE FUNCTION public.pgqueue_batch_members();

-- TRIGGER pgqueue_job pgqueue_job_flow_delete
CREATE TRIGGER pgqueue_job_flow_delete AFTER DELETE ON public.pgqueue_job FOR EACH ROW WHEN ((old.dependents OR (old.parents_left IS NOT NULL) OR (old.batch_id IS NOT NULL))) EXECUTE FUNCTION public.pgqueue_flow_delete();

-- TRIGGER pgqueue_job pgqueue_job_flow_hold
CREATE TRIGGER pgqueue_job_flow_hold BEFORE UPDATE OF status ON public.pgqueue_job FOR EACH ROW WHEN ((((new.status)::text = 'pending'::text) AND ((old.status)::text <> 'pending'::text) AND (new.parents_left > 0))) EXECUTE FUNCTION public.pgqueue_flow_hold();

-- TRIGGER pgqueue_job pgqueue_job_flow_parent
CREATE TRIGGER pgqueue_job_flow_parent AFTER UPDATE OF status ON public.pgqueue_job FOR EACH ROW WHEN ((new.dependents AND ((old.status)::text IS DISTINCT FROM (new.status)::text) AND (((new.status)::text = ANY ((ARRAY['completed'::character varying, 'dead'::character varying, 'cancelled'::character varying])::text[])) OR ((old.status)::text = ANY ((ARRAY['completed'::character varying, 'dead'::character varying, 'cancelled'::character varying])::text[]))))) EXECUTE FUNCTION public.pgqueue_flow_parent();

-- TRIGGER pgqueue_job pgqueue_job_notify_insert
CREATE TRIGGER pgqueue_job_notify_insert AFTER INSERT ON public.pgqueue_job REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION public.pgqueue_notify_insert();

-- TRIGGER pgqueue_job pgqueue_job_ready_delete
CREATE TRIGGER pgqueue_job_ready_delete AFTER DELETE ON public.pgqueue_job REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION public.pgqueue_ready_delete();

-- TRIGGER pgqueue_job pgqueue_job_ready_insert
CREATE TRIGGER pgqueue_job_ready_insert AFTER INSERT ON public.pgqueue_job REFERENCING NEW TABLE AS inserted FOR EACH STATEMENT EXECUTE FUNCTION public.pgqueue_ready_insert();

-- TRIGGER pgqueue_job pgqueue_job_ready_refill
CREATE TRIGGER pgqueue_job_ready_refill AFTER UPDATE OF status ON public.pgqueue_job FOR EACH ROW WHEN ((((old.concurrency_key IS NOT NULL) OR (old.rate_key IS NOT NULL)) AND ((old.status)::text = 'running'::text) AND ((new.status)::text <> 'running'::text))) EXECUTE FUNCTION public.pgqueue_ready_refill();

-- TRIGGER pgqueue_job pgqueue_job_ready_refill_deleted
CREATE TRIGGER pgqueue_job_ready_refill_deleted AFTER DELETE ON public.pgqueue_job FOR EACH ROW WHEN ((((old.concurrency_key IS NOT NULL) OR (old.rate_key IS NOT NULL)) AND ((old.status)::text = 'running'::text))) EXECUTE FUNCTION public.pgqueue_ready_refill();

-- TRIGGER pgqueue_job pgqueue_job_ready_truncate
CREATE TRIGGER pgqueue_job_ready_truncate AFTER TRUNCATE ON public.pgqueue_job FOR EACH STATEMENT EXECUTE FUNCTION public.pgqueue_ready_truncate();

-- TRIGGER pgqueue_job pgqueue_job_ready_update
CREATE TRIGGER pgqueue_job_ready_update AFTER UPDATE OF status, queue, priority, run_after, concurrency_key, rate_key, concurrency_limit, is_async ON public.pgqueue_job FOR EACH ROW WHEN (((((old.status)::text = 'pending'::text) OR ((new.status)::text = 'pending'::text)) AND ((new.status)::text <> 'running'::text) AND (((old.status)::text IS DISTINCT FROM (new.status)::text) OR ((old.queue)::text IS DISTINCT FROM (new.queue)::text) OR (old.priority IS DISTINCT FROM new.priority) OR (old.run_after IS DISTINCT FROM new.run_after) OR ((old.concurrency_key)::text IS DISTINCT FROM (new.concurrency_key)::text) OR ((old.rate_key)::text IS DISTINCT FROM (new.rate_key)::text) OR (old.concurrency_limit IS DISTINCT FROM new.concurrency_limit) OR (old.is_async IS DISTINCT FROM new.is_async)))) EXECUTE FUNCTION public.pgqueue_ready_update();

-- TRIGGER pgqueue_job_dependency pgqueue_dependency_commit
CREATE CONSTRAINT TRIGGER pgqueue_dependency_commit AFTER INSERT ON public.pgqueue_job_dependency DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION public.pgqueue_flow_edge();

-- TRIGGER pgqueue_schedule pgqueue_schedule_notify
CREATE TRIGGER pgqueue_schedule_notify AFTER INSERT OR DELETE OR UPDATE ON public.pgqueue_schedule FOR EACH STATEMENT EXECUTE FUNCTION public.pgqueue_notify_schedules();
