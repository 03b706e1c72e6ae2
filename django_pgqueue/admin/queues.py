"""The dashboard's queue controls: pause and resume a queue for every worker (docs/control.md).

Paused queues are listed in a banner at the top of the dashboard and marked in its table; the
Pause / Resume buttons (``change_job`` permission) POST here and call the library's
``pause_queue`` / ``resume_queue``.
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from django_pgqueue import rules
from django_pgqueue.admin.base import JobAdminBase
from django_pgqueue.conf import settings
from django_pgqueue.models import Queue
from django_pgqueue.printable import get_logger
from django_pgqueue.queues import pause_queue, resume_queue

logger = get_logger("django_pgqueue.admin")


def queue_settings() -> dict[str, Queue]:
    """Every queue that has settings, by name (the others run, unlimited)."""
    return {q.name: q for q in Queue.objects.using(settings.DATABASE).all()}


class QueueControls(JobAdminBase):
    def queue_control_view(self, request: HttpRequest) -> HttpResponse:
        """POST ``name`` and ``operation`` (``pause`` or ``resume``)."""
        if not self.can_operate(request):
            raise PermissionDenied
        name = request.POST.get("name", "")
        operation = request.POST.get("operation")
        problem = rules.JOB_OPTIONS["queue"].problem(name)
        if problem is not None or operation not in ("pause", "resume"):
            self.message_user(request, "No such queue operation.", messages.ERROR)
            return HttpResponseRedirect(self.admin_url("dashboard"))
        if operation == "pause":
            pause_queue(name)
            text = f"Paused queue “{name}”: no worker starts its jobs until it is resumed."
        else:
            resume_queue(name)
            text = f"Resumed queue “{name}”: workers start its jobs again."
        self.message_user(request, text, messages.SUCCESS)
        logger.info("%s queue %s (admin user %s)", operation, name, request.user)
        return HttpResponseRedirect(self.admin_url("dashboard"))
