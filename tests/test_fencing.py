"""Fencing by claim: a worker's writes about a job apply only under the claim that gave it the
job (``pgqueue_job.claim_token``, ``0018_claim_token``), never under an older one of the same
worker: not the worker id (the same worker may claim the job again), not the attempt count (a
retry by hand resets it, a hand-back gives one back)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_pgqueue import operations
from django_pgqueue.models import Job
from django_pgqueue.states import Attempt, JobStatus
from tests.testapp import jobs

pytestmark = pytest.mark.django_db(transaction=True)

DB = operations.DjangoDatabase("default")


def claim(worker: str, *, visibility: float = 60.0) -> Job:
    [job], _ = operations.claim(
        DB, operations.ClaimRequest(worker_id=worker, limit=1, visibility_timeout=visibility)
    )
    return job


def completed(job: Job) -> operations.Outcome:
    now = timezone.now()
    return operations.Outcome(
        job.pk, JobStatus.COMPLETED, now, now, result_json='"old"', claim_token=job.claim_token
    )


def test_a_partitioned_worker_cannot_write_its_old_claim_over_its_new_one():
    """W claims the job; cut off, its lock expires and X reclaims it; X's attempt fails and is
    retried; W, back, claims the job again. Everything W still holds from its first claim (the
    outcome, a heartbeat, a hand-back) changes nothing: only the new claim's writes count."""
    created = jobs.always_fails.enqueue()
    old = claim("W")
    # W is cut off past the visibility timeout: X takes the job back (a stale reclaim).
    Job.objects.filter(pk=created.pk).update(locked_at=timezone.now() - timedelta(minutes=5))
    stolen = claim("X")
    assert stolen.pk == created.pk and stolen.claim_token != old.claim_token
    # X's attempt fails and is retried at once.
    now = timezone.now()
    retry = operations.Outcome(
        created.pk,
        JobStatus.PENDING,
        now,
        None,
        run_after=now,
        error="boom",
        outcome=Attempt.RETRIED,
        claim_token=stolen.claim_token,
    )
    assert operations.finish(DB, "X", [retry], delete_completed=False) == {created.pk}
    # W is back and claims the job again: same worker, same job, a new claim.
    new = claim("W")
    assert new.pk == created.pk
    assert len({old.claim_token, stolen.claim_token, new.claim_token}) == 3

    # W's first claim writes late: all of them match nothing.
    assert operations.finish(DB, "W", [completed(old)], delete_completed=False) == set()
    assert operations.finish(DB, "W", [completed(old)], delete_completed=True) == set()
    assert operations.heartbeat(DB, "W", [old]) == (set(), set())
    assert operations.release(DB, "W", [old]) == set()
    assert operations.interrupt(DB, "W", [old], "deploy") == {}
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.locked_by, row.claim_token) == ("running", "W", new.claim_token)
    assert row.attempts == new.attempts and row.result is None and row.interruptions == 0

    # The new claim's writes apply.
    assert operations.heartbeat(DB, "W", [new]) == ({created.pk}, set())
    assert operations.finish(DB, "W", [completed(new)], delete_completed=False) == {created.pk}
    assert Job.objects.get(pk=created.pk).status == "completed"


def test_every_claim_statement_takes_a_token_that_never_repeats():
    jobs.noop.enqueue_many([()] * 5)
    first, _ = operations.claim(
        DB, operations.ClaimRequest(worker_id="w", limit=3, visibility_timeout=60)
    )
    second, _ = operations.claim(
        DB, operations.ClaimRequest(worker_id="w", limit=3, visibility_timeout=60)
    )
    assert len({j.claim_token for j in first}) == 1  # one per statement, on each of its jobs
    assert len({j.claim_token for j in second}) == 1
    assert first[0].claim_token < second[0].claim_token
    stored = dict(Job.objects.values_list("pk", "claim_token"))
    assert all(stored[j.pk] == j.claim_token for j in [*first, *second])
