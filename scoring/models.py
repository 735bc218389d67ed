"""The one job model: every unit of work a worker does is a ``Job`` row, whatever its kind.

A submission's paper, a contribution's checks, a release baseline on one paper, the requests of an
evaluation run here (and a re-scoring, which is a submission) are tracked the same way: the row says what is to be done, its status,
attempt, heartbeat and the RQ id of its current attempt; Redis only carries that pointer, so
whatever Redis loses is rebuilt from the rows (``scoring.jobs.jobs_reconcile``). The machinery
(attempts, heartbeat, watchdog, re-enqueue) is ``scoring.jobs``; what a job does is its kind's.
"""
from __future__ import annotations

from django.db import models
from django.db.models import Q


class JobStatus(models.TextChoices):
    QUEUED = "queued", "queued"
    RUNNING = "running", "running"
    FINISHED = "finished", "finished"
    FAILED = "failed", "failed"
    CANCELLED = "cancelled", "cancelled"
    # a job whose paper's reference code does not pass in its environment: the model is not to blame
    ENVIRONMENT = "environment", "environment error"


JOB_ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)


class JobKind(models.TextChoices):
    SUBMISSION_PAPER = "submission_paper", "submission paper"
    CONTRIBUTION_CHECK = "contribution_check", "contribution checks"
    RELEASE_BASELINE = "release_baseline", "release baseline"
    GENERATION = "generation", "generation (run here)"


class Job(models.Model):
    """One unit of work of a worker: what it is for (its kind and links) and where it stands."""

    kind = models.CharField(max_length=30, choices=JobKind.choices, default=JobKind.SUBMISSION_PAPER, db_index=True)
    queue = models.CharField(max_length=50, default="scoring", help_text="the RQ queue its attempts go to")
    # what it is for: a submission's paper, a contribution's revision, or a baseline evaluation's paper
    submission = models.ForeignKey("submissions.PredictionSubmission", on_delete=models.CASCADE, null=True,
                                   blank=True, related_name="jobs")
    contribution = models.ForeignKey("contributions.PaperContribution", on_delete=models.CASCADE, null=True,
                                     blank=True, related_name="jobs")
    revision = models.PositiveIntegerField(null=True, blank=True, help_text="the contribution's revision checked")
    evaluation = models.ForeignKey("catalog.Evaluation", on_delete=models.CASCADE, null=True, blank=True,
                                   related_name="baseline_jobs")
    run = models.ForeignKey("submissions.EvaluationRun", on_delete=models.CASCADE, null=True, blank=True,
                            related_name="jobs", help_text="the evaluation run here whose answers it asks for")
    paper = models.ForeignKey("catalog.Paper", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    release_paper = models.ForeignKey("catalog.ReleasePaper", on_delete=models.PROTECT, null=True, blank=True,
                                      related_name="+")
    # where it stands
    status = models.CharField(max_length=20, choices=JobStatus.choices, default=JobStatus.QUEUED, db_index=True)
    attempt = models.PositiveIntegerField(default=0, help_text="times handed to the queue")
    rq_job_id = models.CharField(max_length=100, blank=True, help_text="the RQ job of the current attempt")
    worker = models.CharField(max_length=200, blank=True)
    tasks_total = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True, db_index=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    history = models.JSONField(default=list, blank=True, help_text="what happened to this job, for operators")

    class Meta:
        ordering = ["submission_id", "paper__paper_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["submission", "paper"], name="one_job_per_submission_paper",
                                    condition=Q(kind="submission_paper")),
            models.UniqueConstraint(fields=["contribution", "revision"], name="one_job_per_contribution_revision",
                                    condition=Q(kind="contribution_check")),
            models.UniqueConstraint(fields=["evaluation", "paper"], name="one_job_per_baseline_paper",
                                    condition=Q(kind="release_baseline")),
            models.UniqueConstraint(fields=["run"], name="one_job_per_generation_run", condition=Q(kind="generation")),
        ]

    def __str__(self) -> str:
        if self.kind == JobKind.CONTRIBUTION_CHECK:
            what = f"contribution {self.contribution_id} r{self.revision}"
        elif self.kind == JobKind.GENERATION:
            what = f"generation of run {self.run_id}"
        elif self.kind == JobKind.RELEASE_BASELINE:
            what = f"baseline evaluation {self.evaluation_id} / {self.paper_id}"
        else:
            what = f"submission {self.submission_id} / {self.paper_id}"
        return f"{what} ({self.status})"
