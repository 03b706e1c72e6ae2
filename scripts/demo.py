"""``make demo``: the example project, a realistic batch of jobs, workers, then the admin.

1. finds a database (scripts/pgdb.py: DATABASE_URL, else the local server's new database
   ``pgqueue_demo``, else a private cluster in .pgdata/) and migrates it;
2. creates the demo admin login ``admin`` with a fresh password, printed below;
3. deletes the jobs and orders an earlier demo left, enqueues a mix of jobs
   (``manage.py seed_demo --fresh``), runs two worker processes and shows their progress until
   the batch is done, then prints a summary per queue;
4. serves the site and the admin (with a worker still running) until Ctrl-C. Without a
   terminal (CI=true, or stdin not a TTY) it stops after the summary, with status 0.

Run it with the virtualenv's Python (``make demo`` does): ``.venv/bin/python scripts/demo.py``.
Options: ``--port 8000``, ``--no-serve``, ``--newsletter 400``.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
EXAMPLE = ROOT / "example_project"
VAR = EXAMPLE / "var"
sys.path.insert(0, str(HERE))

import pgdb  # noqa: E402

BATCH_TIMEOUT = 180.0  # seconds the batch may take before the demo stops waiting
#: Jobs due later than this are "scheduled", not part of the batch the demo waits for.
SCHEDULED_HORIZON = timedelta(minutes=5)

TTY = sys.stdout.isatty()
BOLD, DIM, RED, GREEN, YELLOW, RESET = (
    ("\033[1m", "\033[2m", "\033[31m", "\033[32m", "\033[33m", "\033[0m") if TTY else ("",) * 6
)


def step(message: str) -> None:
    print(f"\n{BOLD}==> {message}{RESET}", flush=True)


def interactive() -> bool:
    ci = os.environ.get("CI", "").lower() not in ("", "0", "false", "no")
    return not ci and sys.stdin is not None and sys.stdin.isatty()


def manage(*args: str) -> list[str]:
    return [sys.executable, str(EXAMPLE / "manage.py"), *args]


def start_worker(log_name: str) -> subprocess.Popen[bytes]:
    VAR.mkdir(exist_ok=True)
    log = open(VAR / log_name, "ab")  # noqa: SIM115 (the child keeps it open)
    return subprocess.Popen(
        manage("run_jobs", "--processes", "2", "--threads", "4"),
        cwd=EXAMPLE,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def stop(process: subprocess.Popen[Any], name: str, timeout: float = 40) -> None:
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        print(f"{name} did not stop in {timeout:g}s; killing it", flush=True)
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def free_port(preferred: int) -> int:
    for port in range(preferred, preferred + 50):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"No free TCP port between {preferred} and {preferred + 49}.")


def batch_counts(first_id: int) -> tuple[Counter[str], int]:
    """Status counts of the demo's batch, and how many of its jobs are scheduled for later."""
    from django.db.models import Count
    from django.utils import timezone

    from django_pgqueue.models import Job

    horizon = timezone.now() + SCHEDULED_HORIZON
    batch = Job.objects.filter(id__gt=first_id)
    now_or_soon = batch.exclude(status="pending", run_after__gt=horizon).order_by()
    counts: Counter[str] = Counter(dict(now_or_soon.values_list("status").annotate(n=Count("id"))))
    scheduled = batch.filter(status="pending", run_after__gt=horizon).count()
    return counts, scheduled


def progress_line(counts: Counter[str], scheduled: int) -> str:
    total = sum(counts.values())
    done = counts["completed"] + counts["dead"] + counts["cancelled"]
    width = 30
    filled = int(width * done / total) if total else width
    bar = "#" * filled + "." * (width - filled)
    waiting = counts["pending"]
    parts = [
        f"[{bar}] {done}/{total} done",
        f"{counts['running']} running",
        f"{waiting} waiting (incl. retries)",
        f"{RED}{counts['dead']} dead{RESET}",
    ]
    if scheduled:
        parts.append(f"{scheduled} scheduled for later")
    return "  " + " · ".join(parts)


def wait_for_batch(first_id: int, worker: subprocess.Popen[bytes]) -> bool:
    started = time.monotonic()
    last_printed = ""
    last_print_time = 0.0
    while True:
        counts, scheduled = batch_counts(first_id)
        line = progress_line(counts, scheduled)
        now = time.monotonic()
        if TTY:
            print("\r" + line + "\033[K", end="", flush=True)
        elif line != last_printed and now - last_print_time >= 1.0:
            print(line, flush=True)
            last_printed, last_print_time = line, now
        if counts["pending"] == 0 and counts["running"] == 0:
            if TTY:
                print()
            elif line != last_printed:
                print(line, flush=True)
            return True
        if worker.poll() is not None:
            print(f"\n{RED}The worker exited with status {worker.returncode}; its log:{RESET}")
            print((VAR / "worker.log").read_text()[-4000:])
            return False
        if now - started > BATCH_TIMEOUT:
            print(f"\n{YELLOW}The batch is not done after {BATCH_TIMEOUT:g}s; moving on.{RESET}")
            return False
        time.sleep(0.25)


def summary(first_id: int) -> None:
    from django.db.models import Count
    from django.utils import timezone

    from django_pgqueue.models import Job

    horizon = timezone.now() + SCHEDULED_HORIZON
    batch = Job.objects.filter(id__gt=first_id)
    rows = batch.order_by().values_list("queue", "status").annotate(n=Count("id"))
    table: dict[str, Counter[str]] = {}
    for queue, status, n in rows:
        table.setdefault(queue, Counter())[status] = n
    scheduled = Counter(
        batch.filter(status="pending", run_after__gt=horizon).values_list("queue", flat=True)
    )
    columns = ["completed", "dead", "pending", "running", "cancelled"]
    header = f"  {'queue':<10}" + "".join(f"{c:>11}" for c in columns) + f"{'total':>8}"
    print(header)
    print("  " + "-" * (len(header) - 2))
    for queue in sorted(table):
        counts = table[queue]
        cells = "".join(f"{counts[c]:>11}" for c in columns)
        print(f"  {queue:<10}{cells}{sum(counts.values()):>8}")
    for queue, n in sorted(scheduled.items()):
        print(f"  {DIM}{queue}: {n} pending jobs are scheduled for later (run_after){RESET}")
    retried = batch.filter(status="completed", attempts__gt=1).count()
    if retried:
        print(f"  {GREEN}{retried} jobs failed at first and succeeded on a retry.{RESET}")
    dead = list(batch.filter(status="dead").order_by("id")[:10])
    if dead:
        print(f"  {RED}{batch.filter(status='dead').count()} dead jobs (out of attempts):{RESET}")
        for job in dead:
            last = (job.last_error or "").strip().splitlines()
            print(f"    #{job.pk} {job.name}: {last[-1] if last else '?'}")


def main() -> int:
    parser = argparse.ArgumentParser(description="Run the django_pgqueue demo.")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    parser.add_argument("--no-serve", action="store_true", help="stop after the summary")
    parser.add_argument("--newsletter", default="400", help="newsletter emails to enqueue")
    args = parser.parse_args()
    t0 = time.monotonic()

    step("Database")
    try:
        db = pgdb.resolve("pgqueue_demo", create=True)
    except pgdb.Problem as exc:
        print(f"\n{exc}", file=sys.stderr)
        return 2
    print(f"  {db.display()}  ({db.source})")
    os.environ.update(DATABASE_URL=db.url(), **db.libpq_env())
    os.environ["DJANGO_SETTINGS_MODULE"] = "example.settings"
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.path.insert(0, str(EXAMPLE))
    os.chdir(EXAMPLE)

    import django
    from django.core.management import call_command

    django.setup()

    from django.contrib.auth import get_user_model

    from django_pgqueue.models import Job

    step("Migrating")
    call_command("migrate", verbosity=0)
    print("  done")

    step("Admin login (for this demo only)")
    password = secrets.token_urlsafe(9)
    User = get_user_model()
    user, _ = User.objects.get_or_create(username="admin", defaults={"email": "admin@example.com"})
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    print(f"  username: {BOLD}admin{RESET}   password: {BOLD}{password}{RESET}")

    step("Enqueueing a realistic mix of jobs")
    first_id = Job.objects.order_by("-id").values_list("id", flat=True).first() or 0
    # A fresh start: the jobs and orders of an earlier `make demo` are deleted first.
    call_command("seed_demo", newsletter=int(args.newsletter), fresh=True)

    step("Running 2 worker processes x 4 threads (log: example_project/var/worker.log)")
    worker = start_worker("worker.log")
    try:
        finished = wait_for_batch(first_id, worker)
    finally:
        stop(worker, "the worker")
    step("Summary per queue")
    summary(first_id)
    print(f"\n  Took {time.monotonic() - t0:.0f}s.")
    if not finished:
        return 1

    if args.no_serve or not interactive():
        print(
            f"\n{DIM}No terminal (CI or stdin not a TTY): not serving. Run `make demo` in a "
            f"terminal to browse the admin.{RESET}"
        )
        return 0

    port = free_port(args.port)
    base = f"http://127.0.0.1:{port}"
    worker = start_worker("worker-serve.log")
    server = subprocess.Popen(
        manage("runserver", "--noreload", f"127.0.0.1:{port}"),
        cwd=EXAMPLE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(1.0)
    step("Serving (Ctrl-C to stop)")
    print(
        f"""
  Jobs in the admin:   {BOLD}{base}/admin/django_pgqueue/job/{RESET}
  Dead jobs:           {base}/admin/django_pgqueue/job/?status=dead
  Queue dashboard:     {base}/admin/django_pgqueue/job/dashboard/
  The example shop:    {base}/
  Log in as {BOLD}admin{RESET} / {BOLD}{password}{RESET}

  A worker keeps running (log: example_project/var/worker-serve.log), so retrying a dead
  job in the admin runs it again. Coffee Corner's webhook URL is broken on purpose: fix it
  under Shop > Webhook endpoints, retry its dead deliveries, and watch them complete.
""",
        flush=True,
    )
    try:
        while server.poll() is None and worker.poll() is None:
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nStopping...")
    finally:
        stop(server, "the server", timeout=10)
        stop(worker, "the worker")
    return 0


if __name__ == "__main__":
    sys.exit(main())
