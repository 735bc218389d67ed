"""A contributed paper, its uploaded revisions, and the reviewers' decisions."""
from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

from catalog.models import Release

PAPER_ID_VALIDATOR = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9_-]{0,99}$",
    "Letters, digits, '-' and '_', starting with a letter or digit (it becomes the folder name).",
)


class PaperContribution(models.Model):
    SUBMITTED = "submitted"
    VALIDATING = "validating"
    AWAITING_REVIEW = "awaiting_review"
    CHANGES_REQUESTED = "changes_requested"
    REJECTED = "rejected"
    APPROVED = "approved"
    ERROR = "validation_error"
    STATUSES = [
        (SUBMITTED, "submitted"),
        (VALIDATING, "validating"),
        (AWAITING_REVIEW, "awaiting review"),
        (CHANGES_REQUESTED, "changes requested"),
        (REJECTED, "rejected"),
        (APPROVED, "approved"),
        (ERROR, "checks could not run"),
    ]
    #: a revision may be uploaded in these states
    REVISABLE = (AWAITING_REVIEW, CHANGES_REQUESTED, ERROR)
    FINAL = (REJECTED, APPROVED)

    contributor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="paper_contributions")
    paper_id = models.CharField(max_length=100, validators=[PAPER_ID_VALIDATOR], help_text="folder name, e.g. focal-loss")
    title = models.CharField(max_length=500)
    venue = models.CharField(max_length=100, blank=True)
    arxiv_url = models.URLField(max_length=500, blank=True)
    code_url = models.URLField(max_length=500, blank=True)
    first_commit_date = models.DateField(null=True, blank=True)
    annotated_files = models.JSONField(default=list, blank=True, help_text="relative paths; empty: found from the tags")
    context_files = models.JSONField(default=list, blank=True)
    requirements = models.JSONField(default=list, blank=True, help_text="pip requirement lines")

    status = models.CharField(max_length=30, choices=STATUSES, default=SUBMITTED, db_index=True)
    revision = models.PositiveIntegerField(default=1)
    report = models.JSONField(default=dict, blank=True, help_text="the automatic checks of the current revision")
    status_changed_at = models.DateTimeField(auto_now_add=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    release_paper = models.ForeignKey(
        "catalog.ReleasePaper", null=True, blank=True, on_delete=models.SET_NULL, related_name="contributions"
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.paper_id} (#{self.pk}, revision {self.revision})"

    @property
    def current(self) -> "ContributionRevision | None":
        return self.revisions.filter(number=self.revision).first()

    @property
    def checks_passed(self) -> bool:
        return bool(self.report.get("passed"))


class ContributionRevision(models.Model):
    """One uploaded zip, unpacked; earlier revisions stay for the reviewers' history."""

    contribution = models.ForeignKey(PaperContribution, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    archive_name = models.CharField(max_length=255, blank=True)
    archive_sha256 = models.CharField(max_length=64)
    archive_bytes = models.PositiveBigIntegerField(default=0)
    folder = models.CharField(max_length=500, help_text="unpacked paper folder, relative to MEDIA_ROOT")
    files = models.JSONField(default=list)
    unpack_notes = models.JSONField(default=dict, blank=True)
    report = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["contribution", "number"]
        constraints = [models.UniqueConstraint(fields=["contribution", "number"], name="one_revision_number")]

    def __str__(self) -> str:
        return f"{self.contribution.paper_id} revision {self.number}"


class Review(models.Model):
    APPROVE, REJECT, REQUEST_CHANGES = "approve", "reject", "request_changes"
    DECISIONS = [(APPROVE, "approve"), (REQUEST_CHANGES, "request changes"), (REJECT, "reject")]

    contribution = models.ForeignKey(PaperContribution, on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="contribution_reviews")
    revision = models.PositiveIntegerField()
    decision = models.CharField(max_length=20, choices=DECISIONS)
    comment = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"{self.get_decision_display()} by {self.reviewer} on {self.contribution.paper_id}"


class PublishableRelease(Release):
    """The leaderboard's Release, as the admin's publishing screen sees it (a proxy: no table)."""

    class Meta:
        proxy = True
        verbose_name = "release to publish"
        verbose_name_plural = "releases to publish"
