"""Reads of the submissions app: progress, results, permissions."""
from __future__ import annotations

import functools
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count, Q, QuerySet, Sum

from accounts.roles import user_is_reviewer
from catalog.models import Evaluation, Release, SnippetResult
from catalog.aggregates import MISSING
from catalog.ranking import HEAVY
from catalog.ranking import release_scorability, scorable_unranked_reason
from scoring.models import Job, JobKind

from .models import ACTIVE_STATUSES, PredictionSubmission, Status

__all__ = [
    "submission_can_view",
    "submission_can_see_outputs",
    "submission_get",
    "submissions_of_user",
    "submissions_for_review",
    "submission_progress",
    "submission_result_completeness",
    "submission_results",
    "scoring_queue_overview",
    "scoring_queue_stamp",
    "submission_engine_flags",
    "submission_quota",
    "releases_open",
    "run_get",
    "run_can_view",
    "runs_of_user",
    "run_status",
    "run_overview",
]

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


def evaluations_for_review() -> QuerySet[Evaluation]:
    """Evaluations with engine flags that no submission carries (the demo's, imports): the review
    page lists them beside the submissions, so every flag reaches a reviewer."""
    return (Evaluation.objects.filter(flagged_results__gt=0, submission__isnull=True)
            .select_related("model", "release").defer(*HEAVY).order_by("-created_at"))


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


def submission_unranked_reason(*, submission: PredictionSubmission) -> str:
    """Why the submission's result is (or would be, once published) not ranked on its release's
    board: flags awaiting review, missing snippets, ...; "" when it is ranked or has no result yet."""
    ev = submission.evaluation
    if ev is None or ev.computed_at is None:
        return ""
    return scorable_unranked_reason(ev, scorability=release_scorability(release=submission.release))


def submission_result_completeness(*, submission: PredictionSubmission, progress: dict) -> dict[str, Any]:
    """Do the evaluation's figures rest on a verdict for every (snippet, sample) of the release?

    The stored figures count a snippet without a verdict as failed (``evaluation_aggregates_refresh``),
    so those of a submission whose scoring failed, or of a release with papers this site cannot
    score, come from partial results: ``partial`` says so, with the verdicts stored and expected
    (a missing prediction is a verdict: the file's, not scoring's, gap). ``progress`` is
    ``submission_progress``'s answer.
    """
    ev = submission.evaluation
    expected = (ev.snippets_total if ev is not None else 0) * len(submission.sample_ids or [0])
    stored = progress["done"]
    partial = submission.status != Status.FINISHED or stored < expected
    note = ""
    if partial:
        why = ("scoring did not finish" if submission.status != Status.FINISHED
               else "papers of the release cannot be scored on this site")
        note = (f"partial: {stored} of {expected} verdicts are stored ({why}); the {max(expected - stored, 0)} "
                "others count as failed in these figures")
    return {"partial": partial, "verdicts_stored": stored, "verdicts_expected": expected, "partial_note": note}


#: finished jobs whose durations estimate the wait
RECENT_JOBS = 50


def _paper_jobs():
    """The submissions' paper jobs (the one job model holds other kinds too)."""
    return Job.objects.filter(kind=JobKind.SUBMISSION_PAPER)


def scoring_queue_overview(*, user: Any = None) -> dict[str, Any]:
    """Submissions waiting and running, in queue order, each with its position and an estimated wait.

    The wait is the scoring jobs ahead of (and left in) a submission times the mean duration of
    the last RECENT_JOBS finished jobs, divided by the jobs running now (the busy workers).
    Submissions of others are anonymous; ``user``'s own carry their model name and id.
    """
    recent = list(
        _paper_jobs().filter(status=Status.FINISHED, started_at__isnull=False, finished_at__isnull=False)
        .order_by("-finished_at").values_list("started_at", "finished_at")[:RECENT_JOBS]
    )
    mean = (sum((end - start).total_seconds() for start, end in recent) / len(recent)) if recent else None
    active_jobs = list(
        _paper_jobs().filter(status__in=ACTIVE_STATUSES).exclude(submission__status=Status.CANCELLED)
        .order_by("enqueued_at", "id").values_list("submission_id", "status")
    )
    running = sum(1 for _, status in active_jobs if status == Status.RUNNING)
    workers = max(running, 1)
    left: dict[int, int] = {}
    last_index: dict[int, int] = {}
    for index, (sub_id, _) in enumerate(active_jobs):
        left[sub_id] = left.get(sub_id, 0) + 1
        last_index[sub_id] = index
    subs = {s.pk: s for s in PredictionSubmission.objects.filter(pk__in=left).select_related("release", "evaluation")}
    done = dict(
        SnippetResult.objects.filter(evaluation__submission__in=list(left)).values("evaluation__submission")
        .annotate(n=Count("id")).values_list("evaluation__submission", "n")
    )
    totals = dict(
        _paper_jobs().filter(submission__in=list(left)).values("submission")
        .annotate(n=Sum("tasks_total")).values_list("submission", "n")
    )
    rows = []
    for position, sub_id in enumerate(sorted(left, key=lambda s: last_index[s]), start=1):
        sub = subs[sub_id]
        jobs_until_done = last_index[sub_id] + 1  # every active job up to its own last one
        mine = user is not None and user.is_authenticated and sub.user_id == user.pk
        # re-scoring a public evaluation onto a new release is public; anybody else's upload is not
        rescoring = bool(sub.evaluation and (sub.evaluation.succession or {}).get("mode") == "rescored")
        rows.append({
            "position": position,
            "status": sub.status,
            "release": sub.release.slug,
            "jobs_left": left[sub_id],
            "jobs_ahead": jobs_until_done - left[sub_id],
            "wait_seconds": round(jobs_until_done * mean / workers) if mean is not None else None,
            "queued_at": sub.created_at,
            "done": done.get(sub_id, 0),
            "total": totals.get(sub_id) or 0,
            "mine": mine,
            "rescoring": rescoring,
            "id": sub.pk if mine else None,
            "model_name": sub.model_name if mine or rescoring else "",
        })
    return {"rows": rows, "mean_job_seconds": round(mean, 1) if mean is not None else None,
            "recent_jobs": len(recent), "running_jobs": running, "queued_jobs": len(active_jobs) - running}


@functools.cache
def _queue_stamp_sql(vendor: str) -> str:
    job, sub = Job._meta, PredictionSubmission._meta
    q = connection.ops.quote_name

    def col(meta: Any, field: str) -> str:
        return q(meta.get_field(field).column)

    status = f"j.{col(job, 'status')}"
    return (
        f"SELECT COUNT(*), SUM(j.{col(job, 'id')}), MAX(j.{col(job, 'id')}), "
        f"SUM(CASE WHEN {status} = %s THEN 1 ELSE 0 END), SUM(j.{col(job, 'attempt')}), "
        f"SUM(CASE WHEN s.{col(sub, 'status')} = %s THEN 1 ELSE 0 END) "
        f"FROM {q(job.db_table)} j JOIN {q(sub.db_table)} s ON s.{col(sub, 'id')} = j.{col(job, 'submission')} "
        f"WHERE {status} IN (%s, %s)"
    )


def scoring_queue_stamp() -> str:
    """What the queue page shows, but the progress of running jobs and the waits computed from it,
    in one query: the active jobs (how many, which, how many running, their attempts, their
    submissions' cancellations). A job queued, started, re-queued, finished, failed or cancelled
    changes it, so the cached queue page (submissions.views.queue_page) is rendered afresh on the
    next request.
    """
    # plain SQL, as leaderboard.page_cache.page_stamp: on a cache hit this is the request's only
    # query, and compiling the ORM's aggregate cost more than the rest of the hit
    with connection.cursor() as cursor:
        cursor.execute(_queue_stamp_sql(connection.vendor),
                       [Status.RUNNING, Status.CANCELLED, *ACTIVE_STATUSES])
        row = cursor.fetchone()
    return "queue:" + ":".join(str(v or 0) for v in row)


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
    from .upload import quota_used  # noqa: PLC0415  (the same count the upload checks)

    return {"used": quota_used(user), "limit": settings.RCB_SUBMISSIONS_PER_DAY, "unlimited": bool(user.is_staff)}


def release_published_get(*, slug: str) -> Release | None:
    """The published release with this slug (None: none, or a draft, which is staff-only)."""
    return Release.objects.filter(slug=slug, status=Release.PUBLISHED).first() if slug else None


#: how an operator attaches a release's code (README, "Hosting the real benchmark")
ATTACH_CODE_COMMAND = "python manage.py import_pset FOLDER"


def release_closed_reason(*, release: Release) -> str:
    """Why a published release takes no submissions on this site ("" when it takes them:
    releases_open); drafts are not asked about (they are staff-only until published)."""
    if releases_open(runs=True).filter(pk=release.pk).exists():
        return ""  # (a held-out one is open to runs here only: the upload is refused saying so)
    return (f"release {release.name} takes no submissions on this site until the code of its papers is attached "
            f"(its published figures are shown, but nothing can be scored here): an operator attaches it with "
            f"`{ATTACH_CODE_COMMAND}` (the release's problem set, or a folder with some of its papers)")


def releases_open(*, runs: bool = False) -> QuerySet[Release]:
    """Releases one can submit to: published, with the code of at least one paper here (published
    figures alone cannot score anything; papers without code are listed as not scorable); the
    default first. Held-out releases take evaluations run here only (``runs``), never uploads."""
    releases = Release.objects.filter(status=Release.PUBLISHED, release_papers__folder__gt="")
    if not runs:
        releases = releases.filter(held_out=False)
    return releases.distinct().order_by("-is_default", "-published_at")


# --------------------------------------------------------------------------------------------
# Evaluations run here (submissions.runs)

_RUN_FROM_SUBMISSION = {Status.FINISHED: "finished", Status.FAILED: "failed", Status.CANCELLED: "cancelled"}


def run_get(*, pk: int) -> "EvaluationRun | None":
    from .models import EvaluationRun  # noqa: PLC0415

    return EvaluationRun.objects.select_related("release", "user", "submission", "submission__evaluation").filter(
        pk=pk).first()


def run_can_view(*, run: Any, user: Any) -> bool:
    return bool(user.is_authenticated and (run.user_id == user.pk or user.is_staff))


def runs_of_user(*, user: Any) -> QuerySet:
    from .models import EvaluationRun  # noqa: PLC0415

    return EvaluationRun.objects.filter(user=user).select_related("release", "submission")


def run_status(*, run: Any) -> str:
    """queued, generating, scoring, finished, failed or cancelled: once scoring, its submission's word."""
    if run.status == "scoring" and run.submission is not None:
        return _RUN_FROM_SUBMISSION.get(run.submission.status, "scoring")
    return run.status


def run_overview(*, run: Any) -> dict:
    """What the run's page and the API show of it (never its key, its endpoint's path or its card's secrets)."""
    import urllib.parse  # noqa: PLC0415

    status = run_status(run=run)
    submission = run.submission
    scoring = submission_progress(submission=submission) if submission is not None else None
    evaluation = submission.evaluation if submission is not None else None
    result = None
    if evaluation is not None and evaluation.computed_at and status in ("finished", "failed"):
        result = {"scaled_pass_rate": evaluation.scaled_pass_rate, "pass_rate": evaluation.pass_rate,
                  "snippets_total": evaluation.snippets_total, "snippets_covered": evaluation.snippets_covered,
                  "run_here": evaluation.run_here, "evaluation": evaluation.pk}
    return {
        "id": run.pk,
        "status": status,
        "error": run.error or (submission.failure_reason if submission is not None else ""),
        "model_name": run.model_name,
        "model": run.model_id,
        "endpoint_host": urllib.parse.urlsplit(run.base_url).netloc.rsplit("@", 1)[-1],
        "release": run.release.slug,
        "decoding": {"temperature": run.temperature, "top_p": run.top_p, "max_tokens": run.max_tokens,
                     "seed": run.seed},
        "samples": run.samples,
        "with_paper": run.with_paper,
        "max_cost_usd": run.max_cost_usd,
        "progress": {
            "answers": run.answers, "expected": run.expected,
            "percent": round(100.0 * run.answers / run.expected, 1) if run.expected else 0.0,
            "tokens_in": run.tokens_in, "tokens_out": run.tokens_out, "cost_usd": run.cost_usd,
            "scoring": ({"done": scoring["done"], "total": scoring["total"], "percent": scoring["percent"]}
                        if scoring is not None else None),
        },
        "submission": submission.pk if submission is not None else None,
        "run_card": run.run_card,
        "result": result,
        "created_at": run.created_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "active": status in ("queued", "generating", "scoring"),
    }
