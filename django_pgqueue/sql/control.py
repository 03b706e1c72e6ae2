"""Statements of runtime control: cancelling running jobs and their reported progress.

A cancellation of a running job is a request (``cancel_requested_at``) its worker hears on
:data:`CONTROL_CHANNEL` (or finds by polling :data:`CANCEL_REQUESTED`); the statements that end
an attempt (``sql.outcomes.FINISH``, ``RELEASE``, the reclaim) turn a requested job
``cancelled`` whatever the attempt's outcome.
"""

from __future__ import annotations

from django_pgqueue.sql import RUNNING, TABLE

#: Runtime-control notifications: ``cancel`` (a running job was asked to stop).
CONTROL_CHANNEL = "pgqueue_control"


#: Ask running jobs to stop (those not asked yet); returns their ids.
REQUEST_CANCEL = f"""
UPDATE {TABLE} SET cancel_requested_at = now()
WHERE id = ANY(%s) AND status = {RUNNING} AND cancel_requested_at IS NULL
RETURNING id
"""

#: Of the jobs a worker runs, those asked to stop.
CANCEL_REQUESTED = f"""
SELECT id FROM {TABLE}
WHERE id = ANY(%s) AND status = {RUNNING} AND locked_by = %s AND cancel_requested_at IS NOT NULL
"""

#: The latest progress of running jobs: one JSON object of ``{"<id>": progress}``.
SET_PROGRESS = f"""
UPDATE {TABLE} j SET progress = p.value
FROM jsonb_each(%s::jsonb) AS p(key, value)
WHERE j.id = p.key::bigint AND j.status = {RUNNING} AND j.locked_by = %s
"""

NOTIFY_CONTROL = f"SELECT pg_notify('{CONTROL_CHANNEL}', %s)"
#: The payload when limited jobs were enqueued or a limit changed: workers re-read the settings.
LIMITS_CHANGED = "limits"
