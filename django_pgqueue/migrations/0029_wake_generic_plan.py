"""The wake-up function keeps one plan per session (issue 31's pickup and single enqueue).

``pgqueue_wake`` (``0020_wake_rota``, ``0026_wake_kinds``) sends each notification to the
listening worker a ticket picks: a query over its array parameters (``unnest``) and the worker
table. PL/pgSQL plans such a query for its parameters on the first five calls, then keeps a
generic plan only if it looks no costlier; with arrays it never does (the planner knows a
custom plan's array length, and guesses ten rows for a generic one), so the query was planned
again on every call: 0.25 ms of a 0.27 ms wake-up on the server, after every enqueue's commit
(the notification, and the pickup, wait for it), at every release of a dependent job and every
wake-up passed on. With ``plan_cache_mode = force_generic_plan`` for the function's own
statements it is planned once per session: 0.02 ms. The rows it reads (the worker table's
listening workers) are a handful whatever the plan.

``ALTER FUNCTION ... SET``: a catalog row, no table locked; sessions pick it up at their next
call.
"""

from __future__ import annotations

from django.db import migrations

SIGNATURES = ("text[], integer[], bigint[]", "text[], integer[], bigint[], text[]")

FORWARD = "".join(
    f"ALTER FUNCTION pgqueue_wake({s}) SET plan_cache_mode = force_generic_plan;\n"
    for s in SIGNATURES
)
BACKWARD = "".join(f"ALTER FUNCTION pgqueue_wake({s}) RESET plan_cache_mode;\n" for s in SIGNATURES)


class Migration(migrations.Migration):
    dependencies = [("django_pgqueue", "0028_worker_listener")]

    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
