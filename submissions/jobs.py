"""RQ entry points of the submissions' kinds of job, and the ``submission_paper`` kind itself.

They take a job's id and its attempt's RQ id (queued jobs name them by dotted path: these names stay)
and run under ``scoring.jobs.job_execute``, the one attempt of every kind (claim, heartbeat, end,
retries; the row is the truth). A ``submission_paper`` job scores one paper of one submission with
``scoring.evaluate.paper_evaluate``; around each attempt the submission's status is settled
(``submissions.lifecycle``). When the paper's reference code fails in its environment the job ends
as ``environment`` (the submission waits, no quota used) and the staff are told once.
"""
from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from scoring import queue
from scoring.evaluate import PaperOutcome, environment_job_end, paper_evaluate
from scoring.jobs import Heartbeat, KindSpec, job_execute
from scoring.models import Job
from scoring.sandbox import PUBLIC

from .lifecycle import submission_status_refresh, submissions_settle
from .models import PredictionSubmission, Status, SubmissionPrediction

__all__ = ["score_paper", "generate_answers", "SUBMISSION_PAPER"]


def score_paper(job_id: int, rq_job_id: str) -> str:
    """One attempt of a submission's paper: 'done', 'failed', 'environment' (the job waits for a repair),
    'lost' (cancelled or re-assigned meanwhile), 'skipped' (not this job's current queued attempt) or
    'retry' (the database connection dropped: queued again, the submission is not charged) or 'wait'
    (the papers storage, room on this host or the sandbox engine is away for now: the watchdog queues
    it again, saying why meanwhile)."""
    return job_execute(job_id=job_id, rq_job_id=rq_job_id, body=_paper_score).outcome


def generate_answers(job_id: int, rq_job_id: str) -> Any:
    from .runs import generation_job_run  # noqa: PLC0415

    return generation_job_run(job_id=job_id, rq_job_id=rq_job_id)


def _paper_score(job: Job, beat: Heartbeat) -> PaperOutcome:
    """Score the job's paper with the submission's predictions, continuing where an earlier attempt stopped."""
    submission = job.submission
    answers = {(p.snippet_id, p.sample): p.completion
               for p in SubmissionPrediction.objects.filter(submission=submission, snippet__paper_id=job.paper_id)}
    outcome = paper_evaluate(evaluation=submission.evaluation, release_paper=job.release_paper, trust=PUBLIC,
                             answers=answers, samples=submission.sample_ids or [0], beat=beat, resume=True)
    environment_job_end(outcome)
    return outcome


def _settle(job: Job) -> None:
    submission_status_refresh(submission_id=job.submission_id)


def _given_up(job: Job, reason: str) -> None:
    submission_status_refresh(submission_id=job.submission_id)


def _requeued(job: Job) -> None:
    """Queued again (an environment recheck, the watchdog): a waiting submission no longer says why it waited."""
    PredictionSubmission.objects.filter(pk=job.submission_id, status=Status.WAITING).update(failure_reason="")
    submission_status_refresh(submission_id=job.submission_id)


def _watched(jobs: QuerySet) -> QuerySet:
    return jobs.exclude(submission__status=Status.CANCELLED)


SUBMISSION_PAPER = KindSpec(
    entry="submissions.jobs.score_paper", queue=queue.SCORING, watched=_watched,
    on_failed=_given_up, on_requeued=_requeued, sweep=submissions_settle, settle=_settle, raise_failures=False,
)
