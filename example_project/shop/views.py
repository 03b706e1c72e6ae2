from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from django_pgqueue.models import Job
from shop.forms import OrderForm
from shop.jobs import enqueue_report_rebuild, rebuild_search_index
from shop.models import Order, Store
from shop.services import place_order


def index(request: HttpRequest) -> HttpResponse:
    """The shop front: place an order, and see the jobs it started."""
    if request.method == "POST":
        form = OrderForm(request.POST)
        if form.is_valid():
            order = place_order(
                form.cleaned_data["store"],
                form.cleaned_data["customer_email"],
                form.cleaned_data["total"],
            )
            messages.success(
                request,
                f"Order #{order.pk} placed. Its confirmation email was enqueued in the same "
                "transaction; a worker sends it.",
            )
            return redirect("shop:index")
    else:
        form = OrderForm()
    return render(
        request,
        "shop/index.html",
        {
            "form": form,
            "stores": Store.objects.order_by("name"),
            "orders": Order.objects.select_related("store")[:10],
            "jobs": Job.objects.order_by("-id")[:15],
        },
    )


@require_POST
def rebuild_report(request: HttpRequest, store_id: int) -> HttpResponse:
    store = get_object_or_404(Store, pk=store_id)
    job = enqueue_report_rebuild(store)
    messages.success(request, f"Report rebuild #{job.pk} enqueued for {store}.")
    return redirect("shop:index")


@require_POST
def rebuild_index(request: HttpRequest) -> HttpResponse:
    job = rebuild_search_index.enqueue()
    if job.deduplicated:  # type: ignore[attr-defined]
        messages.info(request, f"A rebuild is already waiting (job #{job.pk}); not enqueued again.")
    else:
        messages.success(request, f"Search index rebuild #{job.pk} enqueued.")
    return redirect("shop:index")
