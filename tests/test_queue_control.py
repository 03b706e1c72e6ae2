"""Pausing and resuming queues: the rows, the claim, the command, and real workers."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from django_pgqueue import pause_queue, resume_queue
from django_pgqueue.models import Job, Queue
from django_pgqueue.models import Worker as WorkerRow
from tests.testapp import jobs
from tests.utils import output, start_worker, stop, wait_until, worker_env

pytestmark = pytest.mark.django_db(transaction=True)


def statuses(queue: str) -> Counter[str]:
    return Counter(Job.objects.filter(queue=queue).values_list("status", flat=True))


def test_pause_and_resume_keep_a_row_only_while_it_says_something():
    with connection.cursor() as cursor:
        cursor.execute("LISTEN pgqueue_control")
    pause_queue("emails")
    (row,) = Queue.objects.all()
    assert (row.name, row.paused) == ("emails", True)
    pause_queue("emails")  # twice is fine
    resume_queue("emails")
    assert not Queue.objects.exists()  # running, no limits: no row
    payloads = [n.payload for n in connection.connection.notifies(timeout=2, stop_after=3)]
    assert payloads == ["queues", "queues", "queues"]


@pytest.mark.parametrize("name", ["", " ", "x" * 101, "a\x00b"])
def test_a_bad_queue_name_is_refused_before_anything_is_written(name):
    with pytest.raises((TypeError, ValueError), match="queue"):
        pause_queue(name)
    assert not Queue.objects.exists()


@pytest.mark.parametrize("queues", [None, ["emails", "default"]], ids=["all", "named"])
def test_a_paused_queue_is_not_claimed_and_still_takes_jobs(queues):
    pause_queue("emails")
    waiting = jobs.send_welcome.enqueue(1)  # queue "emails": enqueue keeps working
    other = jobs.add.enqueue(1, 2)
    claimed = Job.objects.claim("w1", queues, limit=10)
    assert [j.pk for j in claimed] == [other.pk]
    assert Job.objects.get(pk=waiting.pk).status == "pending"
    resume_queue("emails")
    assert [j.pk for j in Job.objects.claim("w1", queues, limit=10)] == [waiting.pk]


def test_the_command_pauses_resumes_and_lists(capsys):
    call_command("pgqueue_queue", "list")
    assert "No queue has settings" in capsys.readouterr().out
    call_command("pgqueue_queue", "pause", "emails")
    assert "Queue emails paused." in capsys.readouterr().out
    call_command("pgqueue_queue", "list")
    assert "emails: PAUSED" in capsys.readouterr().out
    call_command("pgqueue_queue", "resume", "emails")
    assert not Queue.objects.exists()
    with pytest.raises(CommandError):
        call_command("pgqueue_queue", "pause", "")


@pytest.mark.slow  # long, processes only: once, on the newest Django
@pytest.mark.parametrize("listen", ["1", "0"], ids=["notify", "polling"])
def test_workers_stop_claiming_a_paused_queue_until_it_is_resumed(tmp_path: Path, listen: str):
    out = tmp_path / "out"
    env = worker_env(PGQUEUE_LISTEN=listen, PGQUEUE_POLL_INTERVAL="0.5")
    proc = start_worker("--processes", "2", "--threads", "2", env=env)
    try:
        wait_until(lambda: WorkerRow.objects.filter(stopped_at__isnull=True).count() == 2)
        pause_queue("emails")
        # Both processes have read it (each says so once).
        wait_until(lambda: output(proc).count("paused: emails") == 2)
        paused = jobs.record.using(queue="emails").enqueue_many(
            [(str(out), f"emails-{i}") for i in range(10)]
        )
        free = jobs.record.enqueue_many([(str(out), f"default-{i}") for i in range(5)])
        wait_until(lambda: statuses("default") == Counter(completed=len(free)))
        time.sleep(3)  # the workers are busy and awake: 3 s without a claim of "emails"
        assert statuses("emails") == Counter(pending=len(paused))
        assert not Job.objects.filter(queue="emails", attempts__gt=0).exists()
        resume_queue("emails")
        wait_until(lambda: statuses("emails") == Counter(completed=len(paused)))
    finally:
        text = stop(proc)
    lines = out.read_text().split("\n")
    assert sum(line.startswith("emails-") for line in lines) == 10, text


def test_with_a_queue_paused_named_queues_are_still_served_in_their_order():
    pause_queue("elsewhere")  # the workers now claim with the limited statement
    later = jobs.add.using(queue="b", priority=10).enqueue(1, 1)
    first = jobs.add.using(queue="a", priority=0).enqueue(2, 2)
    assert [j.pk for j in Job.objects.claim("w1", ["a", "b"], limit=1)] == [first.pk]
    assert [j.pk for j in Job.objects.claim("w1", ["a", "b"], limit=1)] == [later.pk]
