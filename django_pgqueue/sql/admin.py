"""The admin's own conditions (run through :mod:`django_pgqueue.operations`)."""

from __future__ import annotations

#: A keyword argument's value equals ``%s`` (jsonb); cheap on jobs without keyword arguments.
KWARGS_HAS_VALUE = (
    "(\"kwargs\" <> '{}'::jsonb AND "
    "jsonb_path_exists(\"kwargs\", '$.* ? (@ == $v)', jsonb_build_object('v', %s::jsonb)))"
)
