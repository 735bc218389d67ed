"""Reads of the submissions app: progress, results, permissions."""
from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.models import Count, Q, QuerySet

from leaderboard.models import Release, ReleasePaper, SnippetResult
from leaderboard.services import MISSING

from .models import ACTIVE_STATUSES, PredictionSubmission, ScoringJob, Status

__all__ = [
    "REVIEWERS_GROUP",
    "user_is_reviewer",
    "submission_can_view",
    "submission_can_see_outputs",
    "submission_get",
    "submissions_of_user",
    "submissions_for_review",
    "submission_progress",
    "submission_results",
    "submission_engine_flags",
    "submission_quota",
    "releases_open",
    "environments_overview",
]

REVIEWERS_GROUP = "reviewers"


def user_is_reviewer(user: Any) -> bool:
    return bool(user.is_authenticated and (user.is_staff or user.groups.filter(name=REVIEWERS_GROUP).exists()))


def submission_can_view(*, submission: PredictionSubmission, user: Any) -> bool:
    return bool(user.is_authenticated and (submission.user_id == user.pk or user_is_reviewer(user)))


def submission_can_see_outputs(*, submission: PredictionSubmission, user: Any) -> bool:
    """Verdicts, categories and test output: the owner's (and the admins')."""
    return bool(user.is_authenticated and (submission.user_id == user.pk or user.is_staff))


def submission_get(*, pk: int) -> PredictionSubmission | None:
    return (
        PredictionSubmission.objects.select_related("release", "model", "evaluation", "user").filter(pk=pk).first()
    )


def submissions_of_user(*, user: Any) -> QuerySet[PredictionSubmission]:
    return PredictionSubmission.objects.filter(user=user).select_related("release", "evaluation")


def submissions_for_review() -> QuerySet[PredictionSubmission]:
    """Finished submissions, flagged ones first in the template's eyes; newest first."""
    return PredictionSubmission.objects.filter(status=Status.FINISHED).select_related("release", "evaluation", "user")


def submission_progress(*, submission: PredictionSubmission) -> dict:
    """Snippets done / to do, overall and per paper, counted from the stored results.

    ``done`` counts every verdict written; ``missing`` those of snippets the file had no
    prediction for (failed without a run); ``scored`` = done - missing, the ones really run.
    """
    done_by_paper: dict[int, tuple[int, int]] = {}
    if submission.evaluation_id:
        done_by_paper = {
            pid: (n, m)
            for pid, n, m in SnippetResult.objects.filter(evaluation_id=submission.evaluation_id)
            .values("snippet__paper_id")
            .annotate(n=Count("id"), m=Count("id", filter=Q(category=MISSING)))
            .values_list("snippet__paper_id", "n", "m")
        }
    papers = []
    for job in submission.jobs.select_related("paper").order_by("paper__paper_id"):
        written, missing = done_by_paper.get(job.paper_id, (0, 0))
        done = min(written, job.tasks_total)
        papers.append(
            {
                "paper": job.paper.paper_id,
                "status": job.status,
                "done": done,
                "scored": max(done - missing, 0),
                "missing": missing,
                "total": job.tasks_total,
                "percent": round(100.0 * done / job.tasks_total, 1) if job.tasks_total else 100.0,
                "attempt": job.attempt,
                "error": job.error,
                "heartbeat_at": job.heartbeat_at.isoformat() if job.heartbeat_at else None,
                "history": job.history[-5:],
            }
        )
    done = sum(p["done"] for p in papers)
    total = sum(p["total"] for p in papers)
    return {
        "done": done,
        "scored": sum(p["scored"] for p in papers),
        "missing": sum(p["missing"] for p in papers),
        # what the file left out, known from the upload (before any job has run)
        "not_predicted": max(total - submission.predictions_count, 0),
        "total": total,
        "percent": round(100.0 * done / total, 1) if total else 0.0,
        "active": submission.status in ACTIVE_STATUSES,
        "papers": papers,
    }


def submission_results(*, submission: PredictionSubmission) -> list[dict]:
    if not submission.evaluation_id:
        return []
    return list(
        SnippetResult.objects.filter(evaluation_id=submission.evaluation_id)
        .order_by("snippet__paper__paper_id", "snippet__position", "sample")
        .values(
            "snippet__paper__paper_id", "snippet__file", "snippet__name", "snippet__weight", "sample", "passed",
            "category", "exit_code", "seconds", "output_tail", "completion", "flags",
        )
    )


def submission_engine_flags(*, submission: PredictionSubmission) -> list[dict]:
    """The results the engine flagged (paper, snippet, sample, flags), for the owner and reviewers."""
    if not submission.evaluation_id:
        return []
    return list(
        SnippetResult.objects.filter(evaluation_id=submission.evaluation_id)
        .exclude(flags=[])
        .order_by("snippet__paper__paper_id", "snippet__position", "sample")
        .values("snippet__paper__paper_id", "snippet__file", "snippet__name", "sample", "flags")
    )


def submission_quota(*, user: Any) -> dict:
    from .services import _quota_used  # the same count the upload checks

    return {"used": _quota_used(user), "limit": settings.RCB_SUBMISSIONS_PER_DAY, "unlimited": bool(user.is_staff)}


def releases_open() -> QuerySet[Release]:
    """Releases one can submit to: published, with the code of at least one paper here (published
    figures alone cannot score anything; papers without code are listed as not scorable); the
    default first."""
    return (
        Release.objects.filter(status=Release.PUBLISHED, release_papers__folder__gt="")
        .distinct()
        .order_by("-is_default", "-published_at")
    )


def environments_overview() -> list[dict[str, Any]]:
    """Per paper with code, per release: its environment, the reference's status and time, the last
    check and the jobs waiting for it (2 queries)."""
    waiting = dict(
        ScoringJob.objects.filter(status=Status.ENVIRONMENT)
        .values("release_paper_id").annotate(n=Count("id")).values_list("release_paper_id", "n")
    )
    rows = []
    for rp in (ReleasePaper.objects.exclude(folder="").select_related("release", "paper")
               .order_by("environment_ok", "paper__paper_id", "release__name")):
        status = {True: "passes", False: "fails", None: "not checked"}[rp.environment_ok]
        rows.append({"release": rp.release, "paper": rp.paper.paper_id, "environment": rp.environment or "default",
                     "status": status, "ok": rp.environment_ok, "error": rp.environment_error,
                     "seconds": rp.reference_seconds, "checked_at": rp.environment_checked_at,
                     "waiting": waiting.get(rp.pk, 0)})
    return rows
