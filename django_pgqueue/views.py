"""``GET <prefix>/metrics``: the queues' numbers for Prometheus (docs/monitoring.md).

Let in: a request with ``Authorization: Bearer <PGQUEUE_METRICS_TOKEN>``, or a staff user with
the view permission on jobs (as the admin dashboard asks). Anyone else: 401 (no credentials, or
a wrong token) or 403 (signed in without the permission).
"""

from __future__ import annotations

import hmac

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET

from django_pgqueue.conf import settings

#: The permission a staff user needs (the admin dashboard's).
VIEW_PERMISSION = "django_pgqueue.view_job"


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    refusal = _refusal(request)
    if refusal is not None:
        return refusal
    try:
        import prometheus_client  # noqa: F401

        from django_pgqueue.stats.exposition import metrics_text
    except ImportError:
        return HttpResponse(
            "The metrics view needs prometheus_client: "
            "pip install 'django-pgqueue-jobs[metrics]'\n",
            status=501,
            content_type="text/plain; charset=utf-8",
        )
    from django_pgqueue.stats import queue_snapshot

    body, content_type = metrics_text(queue_snapshot())
    return HttpResponse(body, content_type=content_type)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the request may read the metrics; else the 401 or 403 to answer."""
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        token = settings.METRICS_TOKEN
        given = header[7:].strip()
        if token and hmac.compare_digest(given.encode(), token.encode()):
            return None
        return _unauthorized("wrong token")
    user = request.user
    if not user.is_authenticated:
        return _unauthorized("sign in as staff, or send Authorization: Bearer <token>")
    if user.is_active and user.is_staff and user.has_perm(VIEW_PERMISSION):
        return None
    return HttpResponse(
        "forbidden: needs a staff user with the view permission on jobs\n",
        status=403,
        content_type="text/plain; charset=utf-8",
    )


def _unauthorized(reason: str) -> HttpResponse:
    response = HttpResponse(
        f"unauthorized: {reason}\n", status=401, content_type="text/plain; charset=utf-8"
    )
    response["WWW-Authenticate"] = 'Bearer realm="pgqueue metrics"'
    return response
