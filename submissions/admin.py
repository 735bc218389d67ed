from __future__ import annotations

from django.contrib import admin, messages

from . import lifecycle
from scoring.models import Job

from .models import EvaluationRun, PredictionSubmission


class PaperJobInline(admin.TabularInline):
    model = Job
    fk_name = "submission"
    extra = 0
    can_delete = False
    fields = ("paper", "status", "attempt", "worker", "heartbeat_at", "tasks_total", "error")
    readonly_fields = fields


def _moderate(modeladmin, request, queryset, *, label: str, **change):
    count = 0
    for submission in queryset.select_related("evaluation"):
        if submission.evaluation is not None:
            lifecycle.evaluation_moderate(evaluation=submission.evaluation, **change)
            count += 1
    modeladmin.message_user(request, f"{count} submission(s): {label}", messages.SUCCESS)


@admin.action(description="Hide from the leaderboard")
def hide(modeladmin, request, queryset):
    _moderate(modeladmin, request, queryset, label="hidden", hidden=True)


@admin.action(description="Show on the leaderboard again")
def unhide(modeladmin, request, queryset):
    _moderate(modeladmin, request, queryset, label="shown", hidden=False)


@admin.action(description="Mark verified (reproduced)")
def mark_verified(modeladmin, request, queryset):
    _moderate(modeladmin, request, queryset, label="marked verified", verified=True)


@admin.action(description="Remove the verified mark")
def unmark_verified(modeladmin, request, queryset):
    _moderate(modeladmin, request, queryset, label="verified mark removed", verified=False)


@admin.action(description="Clear the engine's flags (reviewed: may be ranked)")
def clear_flags(modeladmin, request, queryset):
    n = sum(lifecycle.submission_flags_clear(submission=s, user=request.user) for s in queryset.select_related("evaluation"))
    modeladmin.message_user(request, f"{n} submission(s): flags cleared", messages.SUCCESS)


@admin.action(description="Cancel")
def cancel(modeladmin, request, queryset):
    n = sum(lifecycle.submission_cancel(submission=s, user=request.user) for s in queryset)
    modeladmin.message_user(request, f"{n} submission(s) cancelled")


@admin.action(description="Re-run (failed or cancelled)")
def rerun(modeladmin, request, queryset):
    n = sum(lifecycle.submission_rerun(submission=s, user=request.user) for s in queryset)
    modeladmin.message_user(request, f"{n} submission(s) queued again")


@admin.register(PredictionSubmission)
class PredictionSubmissionAdmin(admin.ModelAdmin):
    list_display = ("id", "model_name", "user", "release", "status", "published_at", "hidden", "verified", "engine_flags",
                    "identical_share", "created_at")
    list_filter = ("status", "release", "evaluation__hidden", "evaluation__verified")
    search_fields = ("model_name", "user__username", "content_hash")
    readonly_fields = ("content_hash", "file_size", "predictions_count", "sample_ids", "flags", "evaluation", "model",
                       "status", "failure_reason", "started_at", "finished_at", "published_at", "notified_at")
    inlines = [PaperJobInline]
    actions = [hide, unhide, mark_verified, unmark_verified, clear_flags, cancel, rerun]

    @admin.display(boolean=True, description="hidden")
    def hidden(self, obj):
        return bool(obj.evaluation and obj.evaluation.hidden)

    @admin.display(boolean=True, description="verified")
    def verified(self, obj):
        return bool(obj.evaluation and obj.evaluation.verified)

    @admin.display(description="engine flags")
    def engine_flags(self, obj):
        ev = obj.evaluation
        if ev is None or not ev.flagged_results:
            return "-"
        return f"{ev.flagged_results} (cleared by {ev.flags_cleared_by})" if ev.flags_cleared_at else f"{ev.flagged_results}: awaiting review"

    @admin.display(description="identical to reference")
    def identical_share(self, obj):
        return f"{(obj.flags or {}).get('identical_share', 0):.1f} %"


@admin.register(EvaluationRun)
class EvaluationRunAdmin(admin.ModelAdmin):
    """Evaluations run here, read-only (the key is never shown: only whether one is still held)."""

    list_display = ("pk", "model_name", "user", "release", "status", "answers", "expected", "cost_usd", "created_at")
    list_filter = ("status", "release")
    search_fields = ("model_name", "user__username", "model_id")
    fields = ("user", "release", "submission", "model_name", "base_url", "model_id", "temperature", "top_p",
              "max_tokens", "seed", "samples", "with_paper", "price_in", "price_out", "max_cost_usd", "holds_key",
              "status", "expected", "answers", "tokens_in", "tokens_out", "cost_usd", "run_card", "error",
              "created_at", "finished_at")
    readonly_fields = fields

    @admin.display(boolean=True, description="key held")
    def holds_key(self, run: EvaluationRun) -> bool:
        return run.has_key

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
