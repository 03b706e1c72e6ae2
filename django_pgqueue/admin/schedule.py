"""The Schedule admin: periodic schedules listed with their next and last run, paused and
resumed in bulk, run now, edited with a preview of their next runs, made here for any
registered job (arguments checked like an enqueue), and linked to the jobs they made.

A schedule declared in code can be edited too: the sync never overwrites the edit, the page
says "edited: differs from code" and offers "Reset to code". Without ``change_schedule`` the
pages are read-only and the buttons and actions are gone.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.views.decorators.http import require_POST

from django_pgqueue import registry
from django_pgqueue.admin.columns import breakable
from django_pgqueue.admin.filters import KnownValueFilter
from django_pgqueue.admin.formatting import local_time
from django_pgqueue.admin.inputs import checked_urls, filter_parameters, parse_id, unstorable
from django_pgqueue.conf import settings
from django_pgqueue.models import Schedule
from django_pgqueue.schedules.models import Source
from django_pgqueue.schedules.timing import CATCH_UP_LIMIT, zone

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Schedule]
    _ModelForm = forms.ModelForm[Schedule]
else:
    _ModelAdmin = admin.ModelAdmin
    _ModelForm = forms.ModelForm


def jobs_url(schedule_name: str) -> str:
    return (
        reverse("admin:django_pgqueue_job_changelist")
        + "?"
        + urlencode({"schedule": schedule_name})
    )


class ScheduleFilter(KnownValueFilter):
    """The job list's filter by the schedule that enqueued a job (names from the small
    schedule table, never from the job table)."""

    title = "schedule"
    parameter_name = "schedule"

    def known_values(self) -> list[str]:
        return list(Schedule.objects.using(settings.DATABASE).values_list("name", flat=True))


class ArgumentsField(forms.JSONField):
    """A schedule's ``args`` or ``kwargs``: JSON that PostgreSQL can store. A NUL character or
    a lone surrogate, typed escaped (``["\\ud800"]``), is a form error, and the form shows
    the value back escaped as it was typed (raw, a lone surrogate can't be encoded)."""

    def to_python(self, value: Any) -> Any:
        converted = super().to_python(value)
        if unstorable(converted):
            raise forms.ValidationError(
                "The value holds a NUL character or a lone surrogate (such as \\u0000 or "
                "\\ud800), which PostgreSQL can't store."
            )
        return converted

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, forms.fields.InvalidJSONInput) or not unstorable(value):
            return super().prepare_value(value)
        return json.dumps(value, cls=self.encoder)  # ASCII: \ud800 as typed


class ScheduleForm(_ModelForm):
    job = forms.ChoiceField(help_text="A job registered with @job in this code.")

    class Meta:
        model = Schedule
        fields = (
            "name",
            "job",
            "cron",
            "every",
            "timezone",
            "args",
            "kwargs",
            "queue",
            "priority",
            "catch_up",
            "enabled",
        )
        field_classes = {"args": ArgumentsField, "kwargs": ArgumentsField}
        widgets = {
            "args": forms.Textarea(attrs={"rows": 2, "cols": 60}),
            "kwargs": forms.Textarea(attrs={"rows": 2, "cols": 60}),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if "job" in self.fields:
            names = registry.names()
            current = self.instance.job if self.instance.pk else None
            if current and current not in names:  # broken: keep it visible, the form says why
                names = [current, *names]
            field = self.fields["job"]
            assert isinstance(field, forms.ChoiceField)
            field.choices = [("", "---------")] + [(n, n) for n in names]

    def clean_timezone(self) -> str:
        value = str(self.cleaned_data["timezone"]).strip()
        try:
            zone(value)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return value

    def clean_queue(self) -> str | None:
        return (self.cleaned_data.get("queue") or "").strip() or None


class ScheduleListForm(_ModelForm):
    """A row of the Schedules list: its *enabled* checkbox. Saving the list checks only that:
    a broken schedule on the page (its job gone from the code) can still be disabled, and
    does not stop the others from being saved; it is not enabled until it is fixed."""

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or self.cleaned_data
        if cleaned.get("enabled") and "enabled" in self.changed_data:
            problem = self.instance.problem()
            if problem:
                self.add_error("enabled", f"Broken: {problem}. Fix it on its page first.")
        return cleaned


class ScheduleAdmin(_ModelAdmin):
    form = ScheduleForm
    # Fits a laptop's width with both sidebars open (tests/test_admin_layout_browser.py): where
    # a schedule comes from and why it is broken are under its name; the next and last runs
    # are each one short line, with how far they are under it.
    list_display = (
        "name_column",
        "job_column",
        "timing_column",
        "enabled",
        "next_run_column",
        "last_run_column",
    )
    list_display_links = ("name_column",)
    list_editable = ("enabled",)
    list_filter = ("enabled", "source")
    search_fields = ("name", "job")
    actions = ("enable_schedules", "disable_schedules", "run_schedules_now")
    ordering = ("name",)
    readonly_fields = (
        "source_column",
        "preview_column",
        "next_run_column",
        "last_run_column",
        "missed_column",
        "code_column",
        "broken_column",
        "jobs_column",
    )

    class Media:
        css = {"all": ("django_pgqueue/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Schedule]:
        return super().get_queryset(request).using(settings.DATABASE)

    def get_changelist_form(self, request: HttpRequest, **kwargs: Any) -> type[_ModelForm]:
        return super().get_changelist_form(request, **{"form": ScheduleListForm, **kwargs})

    def get_fieldsets(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        what = ["name", "job", "enabled"]
        when = ["cron", "every", "timezone", "preview_column", "catch_up", "missed_column"]
        fieldsets: list[Any] = [
            (None, {"fields": what}),
            ("When", {"fields": when}),
            ("The jobs it enqueues", {"fields": ["args", "kwargs", "queue", "priority"]}),
        ]
        if obj is not None:
            fieldsets.append(
                (
                    "Runs",
                    {
                        "fields": [
                            "next_run_column",
                            "last_run_column",
                            "jobs_column",
                            "broken_column",
                            "source_column",
                            "code_column",
                        ]
                    },
                )
            )
        return fieldsets

    def get_readonly_fields(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        fields = list(self.readonly_fields)
        if obj is not None and obj.source == Source.CODE:
            fields += ["name", "job"]  # the sync knows it by these
        return fields

    # ----- saving ---------------------------------------------------------------------------

    def save_model(self, request: HttpRequest, obj: Schedule, form: Any, change: bool) -> None:
        if not change:
            obj.source = Source.ADMIN
        if not change or {"cron", "every", "timezone", "enabled"} & set(form.changed_data):
            obj.reschedule()  # from now: a change of timing misses nothing
        super().save_model(request, obj, form, change)

    # ----- columns --------------------------------------------------------------------------

    @admin.display(description="schedule (source)", ordering="name")
    def name_column(self, obj: Schedule) -> str:
        """Its name; under it, where it comes from, and why it is broken if it is."""
        problem = obj.problem()
        return format_html(
            '<strong>{}</strong><div class="pgqueue-quiet">{}</div>{}',
            breakable(obj.name, "._"),
            self.source_column(obj),
            format_html('<div class="pgqueue-broken">Broken: {}</div>', problem) if problem else "",
        )

    @admin.display(description="job", ordering="job")
    def job_column(self, obj: Schedule) -> str:
        return format_html(
            '{}<div><a href="{}">jobs it made</a></div>',
            breakable(obj.job, "._"),
            jobs_url(obj.name),
        )

    @admin.display(description="when")
    def timing_column(self, obj: Schedule) -> str:
        return obj.describe()

    @admin.display(description="next run", ordering="next_run_at")
    def next_run_column(self, obj: Schedule) -> str:
        if not obj.enabled:
            return "- (disabled)"
        return _short_when(obj.next_run_at, obj.timezone)

    @admin.display(description="last run", ordering="last_run_at")
    def last_run_column(self, obj: Schedule) -> str:
        return _short_when(obj.last_run_at, obj.timezone)

    @admin.display(description="source")
    def source_column(self, obj: Schedule) -> str:
        if obj.source != Source.CODE:
            return "admin"
        if obj.removed_from_code:
            return "code (removed from code)"
        differences = obj.differences()
        if differences:
            return f"code (edited: differs from code in {', '.join(differences)})"
        return "code"

    @admin.display(description="broken")
    def broken_column(self, obj: Schedule) -> str:
        return obj.problem() or "no"

    @admin.display(description="jobs")
    def jobs_column(self, obj: Schedule) -> str:
        return format_html('<a href="{}">Jobs it made</a>', jobs_url(obj.name))

    @admin.display(description="next 5 runs")
    def preview_column(self, obj: Schedule) -> str:
        try:
            timing = obj.timing()
            upcoming = timing.upcoming(timezone.now(), 5)
        except ValueError as exc:
            return f"invalid: {exc}"
        return format_html(
            "{}<ul class='pgqueue-preview'>{}</ul>",
            timing.describe(),
            format_html_join("", "<li>{}</li>", ((_when(t, obj.timezone),) for t in upcoming)),
        )

    @admin.display(description="after an outage")
    def missed_column(self, obj: Schedule) -> str:
        if obj.catch_up:
            return f"Every missed run is enqueued (the latest {CATCH_UP_LIMIT} at most)."
        return "Only the latest missed run is enqueued (catch up is off)."

    @admin.display(description="code's values")
    def code_column(self, obj: Schedule) -> str:
        declared = obj.code_values
        if obj.source != Source.CODE or declared is None:
            return "-"
        return format_html_join(
            "", "<div><code>{}</code> = <code>{}</code></div>", sorted(declared.items())
        )

    # ----- actions and buttons --------------------------------------------------------------

    @admin.action(description="Enable selected schedules", permissions=["change"])
    def enable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = Schedule.objects.using(settings.DATABASE).filter(pk__in=queryset).enable()
        self.message_user(
            request, f"Enabled {count} schedule(s); each runs next at its first tick from now."
        )

    @admin.action(description="Disable selected schedules", permissions=["change"])
    def disable_schedules(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        count = Schedule.objects.using(settings.DATABASE).filter(pk__in=queryset).disable()
        self.message_user(request, f"Disabled {count} schedule(s).")

    @admin.action(description="Run selected schedules now", permissions=["change"])
    def run_schedules_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        for schedule in queryset:
            self._run_now(request, schedule)

    def _run_now(self, request: HttpRequest, schedule: Schedule) -> None:
        job = schedule.run_now()
        if job.deduplicated:
            self.message_user(
                request,
                f"{schedule.name}: job #{job.pk} with the same unique key is still active; "
                "nothing enqueued.",
                messages.WARNING,
            )
        else:
            self.message_user(
                request, f"{schedule.name}: enqueued job #{job.pk}.", messages.SUCCESS
            )

    def get_urls(self) -> list[URLPattern]:
        info = f"{self.opts.app_label}_{self.opts.model_name}"
        urls = [
            path(
                "<path:object_id>/operate/<str:operation>/",
                self.admin_site.admin_view(require_POST(self.operate_view)),
                name=f"{info}_operate",
            )
        ]
        return checked_urls([*urls, *super().get_urls()])

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest) -> bool:
        """Only the list filters' own parameters: no ``?name__regex=`` from a URL (400)."""
        return lookup in filter_parameters(self.get_list_filter(request))

    def operate_view(self, request: HttpRequest, object_id: str, operation: str) -> HttpResponse:
        """The schedule page's buttons: Run now, Reset to code."""
        pk = parse_id(object_id)
        if pk is None:
            raise Http404(f"No schedule {object_id[:30]!r}.")
        schedule = get_object_or_404(self.get_queryset(request), pk=pk)
        if not self.has_change_permission(request, schedule):
            raise PermissionDenied
        if operation == "run-now":
            self._run_now(request, schedule)
        elif operation == "reset-to-code" and schedule.code_values is not None:
            schedule.apply_code()
            schedule.save()
            self.message_user(
                request, f"{schedule.name}: reset to the code's values.", messages.SUCCESS
            )
        else:
            raise Http404(f"No operation {operation!r}.")
        return HttpResponseRedirect(
            reverse(
                f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[schedule.pk]
            )
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = {"can_operate": self.has_change_permission(request)}
        return super().change_view(
            request, object_id, form_url, {**context, **(extra_context or {})}
        )


def _when(value: Any, zone_name: str) -> str:
    if value is None:
        return "-"
    try:
        local = value.astimezone(zone(zone_name))
    except ValueError:
        local = value
    text = f"{local:%Y-%m-%d %H:%M:%S %Z}"
    delta = (value - timezone.now()).total_seconds()
    if abs(delta) < 86400 * 2:
        ago = _span(abs(delta))
        text += f" (in {ago})" if delta > 0 else f" ({ago} ago)"
    return text


def _short_when(value: Any, zone_name: str) -> str:
    """A list cell: the time in the schedule's zone on one short line (the zone and the exact
    time on hover); under it, how far it is if within two days."""
    if value is None:
        return "-"
    try:
        place = zone(zone_name)
    except ValueError:
        place = None
    today = timezone.localtime(timezone.now(), place).date()
    delta = (value - timezone.now()).total_seconds()
    if abs(delta) >= 86400 * 2:
        return local_time(value, today, place)
    ago = _span(abs(delta))
    return format_html(
        '{}<div class="pgqueue-quiet pgqueue-nowrap">{}</div>',
        local_time(value, today, place),
        f"in {ago}" if delta > 0 else f"{ago} ago",
    )


def _span(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
