"""Admin for the leaderboard: curate metadata, hide or verify evaluations. Results are read-only here
(they come from imports and scoring jobs, with their aggregates computed by services)."""
from __future__ import annotations

from django.contrib import admin, messages

from catalog.aggregates import evaluation_aggregates_refresh, release_tiers_refresh
from catalog.models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult
from catalog.releases import release_set_default


class ReleasePaperInline(admin.TabularInline):
    model = ReleasePaper
    extra = 0
    fields = ("paper", "snippet_count", "total_weight", "content_hash", "folder", "deterministic")
    readonly_fields = ("paper", "snippet_count", "total_weight", "content_hash", "folder")
    can_delete = False
    show_change_link = False


@admin.register(Release)
class ReleaseAdmin(admin.ModelAdmin):
    list_display = ("name", "slug", "status", "is_default", "release_date", "content_hash", "data_version")
    list_filter = ("status",)
    search_fields = ("name", "slug")
    readonly_fields = ("content_hash", "data_version", "tiers", "created_at")
    inlines = [ReleasePaperInline]
    actions = ["make_default", "refresh_tiers"]

    @admin.action(description="Make the default release")
    def make_default(self, request, queryset):
        if queryset.count() != 1:
            self.message_user(request, "Choose exactly one release.", messages.ERROR)
            return
        from contributions.succession import release_default_switch_warning  # the app that knows succession

        release = queryset.get()
        warning = release_default_switch_warning(release=release)  # measured before the switch
        release_set_default(release=release)
        if warning:
            self.message_user(request, f"{release.name} is the default now, but {warning}.", messages.WARNING)

    @admin.action(description="Recompute significance tiers")
    def refresh_tiers(self, request, queryset):
        for release in queryset:
            release_tiers_refresh(release=release)


@admin.register(Paper)
class PaperAdmin(admin.ModelAdmin):
    list_display = ("paper_id", "title", "venue", "first_commit_date")
    search_fields = ("paper_id", "title")
    readonly_fields = ("created_at",)


@admin.register(Snippet)
class SnippetAdmin(admin.ModelAdmin):
    list_display = ("name", "paper", "release", "file", "weight", "depth")
    list_filter = ("release",)
    search_fields = ("name", "paper__paper_id")
    list_select_related = ("paper", "release")
    raw_id_fields = ("parent",)
    readonly_fields = ("release", "paper", "file", "start_line", "end_line", "weight", "code", "depth", "position")


@admin.register(LLMModel)
class LLMModelAdmin(admin.ModelAdmin):
    list_display = ("display_name", "key", "organisation", "open_weights", "knowledge_cutoff", "baseline")
    list_filter = ("open_weights", "baseline")
    search_fields = ("key", "display_name", "organisation")


@admin.register(Evaluation)
class EvaluationAdmin(admin.ModelAdmin):
    list_display = ("model", "release", "with_paper", "source", "scaled_pass_rate", "pass_rate", "samples",
                    "is_public", "hidden", "verified", "computed_at")
    list_filter = ("release", "source", "is_public", "hidden", "verified", "with_paper")
    search_fields = ("model__key", "model__display_name")
    list_select_related = ("model", "release")
    readonly_fields = ("scaled_pass_rate", "pass_rate", "scaled_ci_low", "scaled_ci_high", "scaled_std", "pass_std",
                       "snippets_total", "snippets_covered", "categories", "per_paper", "paper_totals", "pass_at_k",
                       "computed_at", "created_at", "input_hash")
    actions = ["hide", "unhide", "mark_verified", "recompute"]

    def _changed(self, queryset):
        for release in Release.objects.filter(evaluations__in=queryset).distinct():
            release_tiers_refresh(release=release)

    @admin.action(description="Hide from the leaderboard")
    def hide(self, request, queryset):
        for ev in queryset:
            ev.hidden = True
            ev.save(update_fields=["hidden"])
        self._changed(queryset)

    @admin.action(description="Show on the leaderboard again")
    def unhide(self, request, queryset):
        for ev in queryset:
            ev.hidden = False
            ev.save(update_fields=["hidden"])
        self._changed(queryset)

    @admin.action(description="Mark as verified (reproduced)")
    def mark_verified(self, request, queryset):
        for ev in queryset:
            ev.verified = True
            ev.save(update_fields=["verified"])

    @admin.action(description="Recompute aggregates from the stored results")
    def recompute(self, request, queryset):
        for ev in queryset:
            evaluation_aggregates_refresh(evaluation=ev, refresh_release=False)
        self._changed(queryset)

    def save_model(self, request, obj, form, change):
        super().save_model(request, obj, form, change)
        if change and {"hidden", "is_public", "with_paper"} & set(form.changed_data):
            release_tiers_refresh(release=obj.release)


@admin.register(SnippetResult)
class SnippetResultAdmin(admin.ModelAdmin):
    list_display = ("evaluation", "snippet", "sample", "passed", "category", "seconds")
    list_filter = ("passed", "category")
    raw_id_fields = ("evaluation", "snippet")
    list_select_related = ("evaluation__model", "evaluation__release", "snippet__paper")
    readonly_fields = ("evaluation", "snippet", "sample", "passed", "category", "exit_code", "seconds", "output_tail",
                       "completion")

    def has_add_permission(self, request):
        return False
