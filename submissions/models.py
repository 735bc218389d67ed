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
    release = models.ForeignKey("catalog.Release", on_delete=models.PROTECT, related_name="submissions")
    model = models.ForeignKey("catalog.LLMModel", on_delete=models.PROTECT, related_name="submissions")
    evaluation = models.OneToOneField(
        "catalog.Evaluation", on_delete=models.SET_NULL, null=True, blank=True, related_name="submission"
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
    snippet = models.ForeignKey("catalog.Snippet", on_delete=models.CASCADE, related_name="+")
    sample = models.PositiveIntegerField(default=0)
    completion = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["submission", "snippet", "sample"], name="one_prediction_per_snippet_sample")
        ]


class RunStatus(models.TextChoices):
    """Where an evaluation run here stands (the API's contract: these six words)."""

    QUEUED = "queued", "queued"
    GENERATING = "generating", "generating"
    SCORING = "scoring", "scoring"
    FINISHED = "finished", "finished"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"


RUN_ACTIVE = (RunStatus.QUEUED, RunStatus.GENERATING)


class EvaluationRun(models.Model):
    """An evaluation the Hub runs itself: it asks the model's endpoint for every answer (the
    ``generation`` kind of job), then scores them as a submission of ``user`` (``submission``).

    The API key, when one was given, is only ever here encrypted (``api_key_encrypted``, Fernet with
    ``RCB_GENERATION_SECRET``), and emptied when the generation ends in any way.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="evaluation_runs")
    release = models.ForeignKey("catalog.Release", on_delete=models.PROTECT, related_name="evaluation_runs")
    submission = models.OneToOneField(PredictionSubmission, on_delete=models.SET_NULL, null=True, blank=True,
                                      related_name="run")
    model_name = models.CharField(max_length=200)
    base_url = models.CharField(max_length=500)
    model_id = models.CharField(max_length=200, help_text="the model as the endpoint knows it")
    temperature = models.FloatField(null=True, blank=True)
    top_p = models.FloatField(null=True, blank=True)
    max_tokens = models.PositiveIntegerField()
    seed = models.BigIntegerField(null=True, blank=True)
    samples = models.PositiveIntegerField(default=1)
    with_paper = models.BooleanField(default=True)
    price_in = models.FloatField(null=True, blank=True, help_text="USD per million input tokens")
    price_out = models.FloatField(null=True, blank=True, help_text="USD per million output tokens")
    max_cost_usd = models.FloatField(null=True, blank=True)
    api_key_encrypted = models.BinaryField(blank=True, default=b"", editable=False)
    # where it stands
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.QUEUED, db_index=True)
    expected = models.PositiveIntegerField(default=0, help_text="answers asked for: snippets x samples")
    answers = models.PositiveIntegerField(default=0)
    tokens_in = models.PositiveBigIntegerField(default=0)
    tokens_out = models.PositiveBigIntegerField(default=0)
    cost_usd = models.FloatField(null=True, blank=True)
    run_card = models.JSONField(default=dict, blank=True, help_text="benchmark_core.generate.card_public of the run")
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"run #{self.pk} {self.model_name} ({self.status})"

    @property
    def has_key(self) -> bool:
        return bool(self.api_key_encrypted)
