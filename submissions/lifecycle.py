"""A submission's life after its upload: its status, cancel and re-run, publication, moderation, e-mail.

queued -> running -> finished | failed (with the reason) | cancelled, or waiting while a paper's
environment is broken. The status is derived from its scoring jobs, one per paper of the release
with its code here (``submission_status_refresh``, which ``submissions.jobs`` calls around every
attempt). A job whose paper's reference code does not pass in its environment ends as
``environment``: the model is not to blame, the submission waits (its quota is not used) and
``scoring.health.environment_jobs_requeue`` runs it again once the environment is repaired. When
it ends, its evaluation's figures are stored and its owner gets an e-mail; publishing it is the
owner's decision (or asked for at upload), hiding and verifying it are the admins'.
"""
from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from django.conf import settings
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import RedisError

from accounts.roles import user_is_reviewer
from catalog.aggregates import evaluation_aggregates_refresh
from catalog.models import Evaluation
from scoring import queue
from scoring.jobs import job_requeue

from .models import ACTIVE_STATUSES, PredictionSubmission, Status
from .upload import SubmissionError

__all__ = [
    "submission_status_refresh",
    "submission_cancel",
    "submission_rerun",
    "submission_publish",
    "submission_unpublish",
    "evaluation_moderate",
    "submission_flags_clear",
    "evaluation_flags_clear",
    "submissions_settle",
]

logger = logging.getLogger(__name__)


def _now() -> dt.datetime:
    return timezone.now()


def submission_status_refresh(*, submission_id: int) -> PredictionSubmission:
    """Derive the submission's status from its jobs; on the way to an end, store aggregates and notify."""
    notify = False
    with transaction.atomic():
        submission = PredictionSubmission.objects.select_for_update().get(pk=submission_id)
        if submission.status == Status.CANCELLED:
            return submission
        jobs = list(submission.jobs.values_list("status", "paper__paper_id", "error"))
        states = {s for s, _, _ in jobs}
        if states & {Status.QUEUED, Status.RUNNING}:
            started = states & {Status.RUNNING, Status.FINISHED, Status.FAILED, Status.ENVIRONMENT}
            new = Status.RUNNING if started else Status.QUEUED
        elif Status.FAILED in states:
            new = Status.FAILED
        elif Status.ENVIRONMENT in states:
            new = Status.WAITING  # neither finished nor failed: environment_recheck runs it again
        elif Status.CANCELLED in states:
            new = Status.CANCELLED
        else:
            new = Status.FINISHED
        if new == submission.status:
            return submission
        now = _now()
        submission.status = new
        if new == Status.RUNNING and submission.started_at is None:
            submission.started_at = now
        if new == Status.WAITING:
            submission.failure_reason = "; ".join(
                f"{paper}: {error}" for status, paper, error in jobs if status == Status.ENVIRONMENT
            )
        if new in (Status.FINISHED, Status.FAILED):
            submission.finished_at = now
            submission.failure_reason = "; ".join(
                f"{paper}: {error or 'failed'}" for status, paper, error in jobs if status == Status.FAILED
            )
            if submission.evaluation_id:
                evaluation_aggregates_refresh(evaluation=submission.evaluation)
                if new == Status.FINISHED and submission.publish_when_finished:
                    _evaluation_publish(submission, now=now)  # asked for at upload (submit --publish)
            if submission.notified_at is None:
                submission.notified_at = now
                notify = True
        submission.save()
    if notify:
        _submission_notify(submission)
    return submission


def _submission_notify(submission: PredictionSubmission) -> None:
    email = submission.user.email
    if not email:
        return
    url = settings.RCB_SITE_URL.rstrip("/") + f"/submissions/{submission.pk}/"
    if submission.status == Status.FINISHED:
        ev = submission.evaluation
        rate = f"{ev.scaled_pass_rate:.2f} %" if ev and ev.scaled_pass_rate is not None else "n/a"
        subject = f"Submission #{submission.pk} ({submission.model_name}) finished: scaled pass rate {rate}"
        body = (
            f"Your submission #{submission.pk} of {submission.model_name} on {submission.release.name} is scored.\n"
            f"Scaled pass rate: {rate}.\n\nIt stays private until you publish it: {url}\n"
        )
    else:
        subject = f"Submission #{submission.pk} ({submission.model_name}) failed"
        body = f"Scoring of submission #{submission.pk} failed:\n\n{submission.failure_reason}\n\nDetails and re-run: {url}\n"
    try:
        send_mail(subject, body, None, [email])
    except Exception:  # a mail server problem must not fail the scoring job that just ended
        logger.exception("could not send the notification of submission %s", submission.pk)

def _can_manage(submission: PredictionSubmission, user: Any) -> bool:
    return user.is_authenticated and (submission.user_id == user.pk or user.is_staff)


def submission_cancel(*, submission: PredictionSubmission, user: Any) -> bool:
    """Cancel a queued or running submission; running jobs stop at their next snippet."""
    if not _can_manage(submission, user):
        raise PermissionError("only the owner can cancel this submission")
    with transaction.atomic():
        sub = PredictionSubmission.objects.select_for_update().get(pk=submission.pk)
        if sub.status not in (*ACTIVE_STATUSES, Status.WAITING):
            return False
        rq_ids = list(sub.jobs.filter(status__in=ACTIVE_STATUSES).values_list("rq_job_id", flat=True))
        sub.jobs.filter(status__in=(*ACTIVE_STATUSES, Status.ENVIRONMENT)).update(
            status=Status.CANCELLED, finished_at=_now()
        )
        sub.status, sub.finished_at = Status.CANCELLED, _now()
        sub.save(update_fields=["status", "finished_at"])

        def drop() -> None:
            for rq_id in rq_ids:
                try:
                    queue.rq_job_cancel(rq_job_id=rq_id)
                except (RedisError, ValueError) as exc:  # the claim check makes a leftover RQ job harmless
                    logger.info("could not cancel RQ job %s: %s", rq_id, exc)

        transaction.on_commit(drop)
    submission.refresh_from_db()
    return True


def submission_rerun(*, submission: PredictionSubmission, user: Any) -> bool:
    """Queue again the papers of a failed or cancelled submission that did not finish."""
    if not _can_manage(submission, user):
        raise PermissionError("only the owner can re-run this submission")
    with transaction.atomic():
        sub = PredictionSubmission.objects.select_for_update().get(pk=submission.pk)
        if sub.status not in (Status.FAILED, Status.CANCELLED):
            return False
        for job in sub.jobs.exclude(status=Status.FINISHED):
            job_requeue(job, expect=~Q(status=Status.FINISHED), note=f"re-run by {user}")
        sub.status, sub.failure_reason, sub.finished_at, sub.notified_at = Status.QUEUED, "", None, None
        sub.save(update_fields=["status", "failure_reason", "finished_at", "notified_at"])
    submission.refresh_from_db()
    return True


def _evaluation_publish(submission: PredictionSubmission, *, now: dt.datetime) -> None:
    """Make the evaluation public (save, not update: cached pages see it) and stamp the submission."""
    submission.evaluation.is_public = True
    submission.evaluation.save(update_fields=["is_public"])
    submission.published_at = now
    submission.publish_when_finished = False


def submission_publish(*, submission: PredictionSubmission, user: Any) -> str:
    """Publish a finished submission ('published'); a queued or running one when it finishes ('scheduled')."""
    if not _can_manage(submission, user):
        raise PermissionError("only the owner can publish this submission")
    with transaction.atomic():
        # of=self: PostgreSQL refuses FOR UPDATE on the nullable side of the evaluation's outer join
        sub = PredictionSubmission.objects.select_for_update(of=("self",)).select_related("evaluation").get(
            pk=submission.pk
        )
        if sub.status in ACTIVE_STATUSES and sub.evaluation is not None:
            sub.publish_when_finished = True
            sub.save(update_fields=["publish_when_finished"])
            outcome = "scheduled"
        elif sub.status != Status.FINISHED or sub.evaluation is None:
            raise SubmissionError(f"only a finished submission can be published (this one is {sub.status})")
        else:
            _evaluation_publish(sub, now=_now())
            sub.save(update_fields=["published_at", "publish_when_finished"])
            outcome = "published"
    submission.refresh_from_db()
    return outcome


def submission_unpublish(*, submission: PredictionSubmission, user: Any) -> None:
    """Withdraw a submission from the leaderboard (and cancel a publication asked for at upload)."""
    if not _can_manage(submission, user):
        raise PermissionError("only the owner can withdraw this submission")
    with transaction.atomic():
        if submission.evaluation is not None:
            submission.evaluation.is_public = False
            submission.evaluation.save(update_fields=["is_public"])
        submission.published_at = None
        submission.publish_when_finished = False
        submission.save(update_fields=["published_at", "publish_when_finished"])


def evaluation_moderate(*, evaluation: Evaluation, hidden: bool | None = None, verified: bool | None = None) -> None:
    """Admin decisions: hide an entry from the leaderboard, mark it verified (reproduced)."""
    fields = []
    if hidden is not None:
        evaluation.hidden = hidden
        fields.append("hidden")
    if verified is not None:
        evaluation.verified = verified
        fields.append("verified")
    if fields:
        evaluation.save(update_fields=fields)  # save (not update) so cached pages see the change


def submission_flags_clear(*, submission: PredictionSubmission, user: Any) -> bool:
    """A reviewer looked at the engine's flags of this submission and found them harmless: rank it."""
    return evaluation_flags_clear(evaluation=submission.evaluation, user=user)


def evaluation_flags_clear(*, evaluation: Evaluation | None, user: Any) -> bool:
    """A reviewer looked at the engine's flags of this evaluation (a submission's, or one without
    a submission: the demo's, an import's) and found them harmless: rank it."""
    if not user_is_reviewer(user):
        raise PermissionError("only reviewers can clear engine flags")
    if evaluation is None or not evaluation.flagged_results or evaluation.flags_cleared_at is not None:
        return False
    evaluation.flags_cleared_at, evaluation.flags_cleared_by = _now(), user.get_username()[:150]
    evaluation.save(update_fields=["flags_cleared_at", "flags_cleared_by"])  # save: cached pages see the change
    return True


def submissions_settle() -> list[int]:
    """Settle submissions whose jobs all ended (after a crash between a job's end and its submission's update)."""
    settled = []
    for sub_id in PredictionSubmission.objects.filter(status__in=ACTIVE_STATUSES).exclude(
        jobs__status__in=ACTIVE_STATUSES
    ).values_list("pk", flat=True):
        submission_status_refresh(submission_id=sub_id)
        settled.append(sub_id)
    return settled
