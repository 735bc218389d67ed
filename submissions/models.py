"""Prediction submissions and their predictions (API tokens are in ``accounts.models``).

A submission's per-paper scoring jobs are rows of the one job model, ``scoring.models.Job``
(kind ``submission_paper``, ``submission.jobs``).
"""
from __future__ import annotations

from django.conf import settings
from django.db import models

from scoring.models import JobStatus


#: a submission's status: those of its jobs (``scoring.models.JobStatus``, the one list), and ``waiting``:
#: a job of it ended in an environment error, so it is neither finished nor failed, it waits for the repair
Status = models.TextChoices(
    "Status",
    [(member.name, (member.value, member.label)) for member in JobStatus]
    + [("WAITING", ("waiting", "waiting (environment)"))],
)


ACTIVE_STATUSES = (Status.QUEUED, Status.RUNNING)
TERMINAL_STATUSES = (Status.FINISHED, Status.FAILED, Status.CANCELLED)


class PredictionSubmission(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="prediction_submissions")
    release = models.ForeignKey("leaderboard.Release", on_delete=models.PROTECT, related_name="submissions")
    model = models.ForeignKey("leaderboard.LLMModel", on_delete=models.PROTECT, related_name="submissions")
    evaluation = models.OneToOneField(
        "leaderboard.Evaluation", on_delete=models.SET_NULL, null=True, blank=True, related_name="submission"
    )
    # what the submitter told us
    model_name = models.CharField(max_length=200)
    organisation = models.CharField(max_length=200, blank=True)
    open_weights = models.BooleanField(default=False)
    knowledge_cutoff = models.CharField(max_length=20, blank=True)
    link = models.URLField(max_length=500, blank=True)
    with_paper = models.BooleanField(default=True)
    decoding = models.JSONField(default=dict, blank=True)
    notes = models.TextField(blank=True)
    # the file
    file_name = models.CharField(max_length=255, blank=True)
    file_size = models.PositiveBigIntegerField(default=0)
    content_hash = models.CharField(max_length=64, db_index=True)
    predictions_count = models.PositiveIntegerField(default=0)
    sample_ids = models.JSONField(default=list, blank=True)
    flags = models.JSONField(default=dict, blank=True, help_text="automatic checks for reviewers")
    # lifecycle
    status = models.CharField(max_length=20, choices=Status.choices, default=Status.QUEUED, db_index=True)
    failure_reason = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    published_at = models.DateTimeField(null=True, blank=True)
    publish_when_finished = models.BooleanField(default=False, help_text="publish as soon as scoring finishes")
    notified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["user", "content_hash"])]

    def __str__(self) -> str:
        return f"#{self.pk} {self.model_name} ({self.status})"

    @property
    def is_published(self) -> bool:
        return self.published_at is not None


class SubmissionPrediction(models.Model):
    """One uploaded completion, matched to a snippet of the submission's release."""

    submission = models.ForeignKey(PredictionSubmission, on_delete=models.CASCADE, related_name="predictions")
    snippet = models.ForeignKey("leaderboard.Snippet", on_delete=models.CASCADE, related_name="+")
    sample = models.PositiveIntegerField(default=0)
    completion = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["submission", "snippet", "sample"], name="one_prediction_per_snippet_sample")
        ]
