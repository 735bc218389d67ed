from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db import transaction

from .models import ContributionRevision, PaperContribution, PublishableRelease, Review
from .release_services import release_publish
from .services import contribution_enqueue_validation


class RevisionInline(admin.TabularInline):
    model = ContributionRevision
    extra = 0
    can_delete = False
    fields = ["number", "archive_name", "archive_sha256", "archive_bytes", "created_at"]
    readonly_fields = fields


class ReviewInline(admin.TabularInline):
    model = Review
    extra = 0
    can_delete = False
    fields = ["revision", "reviewer", "decision", "comment", "created_at"]
    readonly_fields = fields


@admin.register(PaperContribution)
class PaperContributionAdmin(admin.ModelAdmin):
    list_display = ["paper_id", "title", "contributor", "status", "revision", "status_changed_at"]
    list_filter = ["status"]
    search_fields = ["paper_id", "title", "contributor__username"]
    readonly_fields = ["contributor", "status", "revision", "report", "release_paper", "created_at", "updated_at",
                       "status_changed_at"]
    inlines = [RevisionInline, ReviewInline]
    actions = ["run_checks_again"]

    @admin.action(description="Run the automatic checks again")
    def run_checks_again(self, request, queryset):
        count = 0
        for contribution in queryset.exclude(status__in=PaperContribution.FINAL):
            with transaction.atomic():
                contribution_enqueue_validation(contribution=contribution)
            count += 1
        self.message_user(request, f"{count} contribution(s) queued for checking")


@admin.register(PublishableRelease)
class PublishableReleaseAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "status", "published_at", "content_hash", "is_default"]
    list_filter = ["status"]
    fields = ["name", "slug", "description", "status", "content_hash", "published_at", "is_default"]
    readonly_fields = ["status", "content_hash", "published_at", "is_default"]
    actions = ["publish"]

    def get_readonly_fields(self, request, obj=None):
        # a published release is frozen: nothing of it changes here
        if obj is not None and obj.frozen:
            return self.fields
        return self.readonly_fields

    def has_delete_permission(self, request, obj=None):
        return obj is None or not obj.frozen

    @admin.action(description="Publish (freeze, hash, score the baselines)")
    def publish(self, request, queryset):
        for release in queryset:
            try:
                release_publish(release=release, by=request.user)
            except ValidationError as exc:
                self.message_user(request, f"{release.name}: {'; '.join(exc.messages)}", messages.ERROR)
            else:
                self.message_user(request, f"{release.name} published; the baselines are queued")
