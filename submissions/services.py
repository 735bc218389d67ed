"""Writes of the submissions app: upload, scoring jobs and their lifecycle, publication (tokens: ``accounts``).

Lifecycle of a submission: queued -> running -> finished | failed (with the reason) | cancelled,
or waiting while a paper's environment is broken. It is derived from its scoring jobs, one per
paper of the release that has its code here. A job whose paper's reference code does not pass in
its environment ends as "environment error": the model is not to blame, the submission waits
(its quota is not used) and ``environment_jobs_requeue`` runs it again once the environment is
repaired. The jobs are rows of the one job model (``scoring.models.Job``, kind
``submission_paper``): attempts, claims, heartbeat, watchdog and re-enqueue are ``scoring.jobs``'
rules; what a paper job does (``scoring_job_run``) and what its submission learns are here.
Results go through ``scoring.results.evaluation_results_write``: a job run twice never counts twice.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import InterfaceError, OperationalError, transaction
from django.db.models import Q
from django.utils import timezone
from django.utils.text import slugify
from redis.exceptions import RedisError

from benchmark_core.masking import PROMPT_VERSION
from benchmark_core.predictions import LineProblem, parse_predictions, text_problem
from benchmark_core.problemset import Paper as CorePaper
from benchmark_core.problemset import paper_folder_load
from scoring.paper_store import PaperStorageUnavailable, release_paper_archive_ensure, release_paper_folder
from benchmark_core.runner import HARNESS_VERSION, Task, answer_code, reference_failures_forget, reference_known, run_tasks
from accounts.roles import user_is_reviewer
from benchmark_core.scoring import parse_cutoff
from leaderboard.models import Evaluation, LLMModel, Release, ReleasePaper, Snippet, SnippetResult
from scoring import queue
from scoring.jobs import (Heartbeat, KindSpec, history_add, job_claim, job_create, job_end, job_requeue,
                          job_retry_after_db_loss, job_wait, reason_of, worker_answered_again)
from scoring.models import Job, JobKind, JobStatus
from scoring.results import evaluation_results_write, result_row_from_run
from scoring.sandbox import PUBLIC, SandboxRefused, job_sandbox, reference_store
from leaderboard.aggregates import evaluation_aggregates_refresh, release_touch

from .flags import CompletionInput, submission_flags_compute
from .models import ACTIVE_STATUSES, EvaluationRun, PredictionSubmission, RunStatus, Status, SubmissionPrediction

__all__ = [
    "SubmissionError",
    "QuotaExceeded",
    "PartialCoverage",
    "predictions_coverage",
    "coverage_warning",
    "FileTooLarge",
    "SandboxRefused",
    "max_upload_bytes",
    "quota_check",
    "HeldOut",
    "prediction_submission_create",
    "scoring_job_run",
    "scoring_jobs_create",
    "submission_status_refresh",
    "submission_cancel",
    "submission_rerun",
    "submission_publish",
    "submission_unpublish",
    "evaluation_moderate",
    "submission_flags_clear",
    "submissions_settle",
    "SUBMISSION_PAPER",
    "environment_jobs_requeue",
]

logger = logging.getLogger(__name__)
User = get_user_model()


class SubmissionError(Exception):
    """An upload that cannot be accepted; ``problems`` lists every bad line. Nothing was stored."""

    http_status = 400

    def __init__(self, message: str, problems: list[LineProblem] | None = None):
        super().__init__(message)
        self.message = message
        self.problems = problems or []


class FileTooLarge(SubmissionError):
    http_status = 413


class QuotaExceeded(SubmissionError):
    http_status = 429


class HeldOut(SubmissionError):
    """Predictions uploaded to a held-out release: only evaluations run here are scored there."""

    http_status = 403


class PartialCoverage(SubmissionError):
    """The file leaves snippets of the release without a prediction; accepted only when confirmed."""

    http_status = 409

    def __init__(self, coverage: dict[str, Any]):
        self.coverage = coverage
        super().__init__(coverage_warning(coverage))


def predictions_coverage(*, snippet_rows: list[dict], predictions: list) -> dict[str, Any]:
    """How much of a release a file predicts: counts of (snippet, sample) pairs, the percent, and
    the snippets without a prediction in every sample (``missing_snippets``: paper, file, snippet,
    samples_missing), in release order."""
    samples = max(len({p.sample for p in predictions}), 1)
    expected = len(snippet_rows) * samples
    predicted: dict[tuple[str, str, str], int] = {}
    for p in predictions:
        predicted[(p.paper, p.file, p.snippet)] = predicted.get((p.paper, p.file, p.snippet), 0) + 1
    missing_snippets = [
        {"paper": r["paper__paper_id"], "file": r["file"], "snippet": r["name"],
         "samples_missing": samples - predicted.get((r["paper__paper_id"], r["file"], r["name"]), 0)}
        for r in snippet_rows if predicted.get((r["paper__paper_id"], r["file"], r["name"]), 0) < samples
    ]
    return {
        "predicted": len(predictions),
        "expected": expected,
        "missing": max(expected - len(predictions), 0),
        "snippets": len(snippet_rows),
        "samples": samples,
        "percent": round(100.0 * len(predictions) / expected, 1) if expected else 0.0,
        "missing_snippets": missing_snippets,
    }


def coverage_warning(coverage: dict[str, Any]) -> str:
    """One sentence for the form, the API and the CLI: how much is missing and what follows."""
    per = f" ({coverage['snippets']} snippets x {coverage['samples']} samples)" if coverage["samples"] > 1 else ""
    return (
        f"the file predicts {coverage['predicted']} of the release's {coverage['expected']} snippets{per} "
        f"({coverage['percent']} %): the {coverage['missing']} without a prediction count as missing (failed), and "
        "the evaluation is shown but not ranked"
    )


def max_upload_bytes() -> int:
    return int(settings.RCB_SUBMISSION_MAX_MB * 1024 * 1024)


def _now() -> dt.datetime:
    return timezone.now()


# --------------------------------------------------------------------------------------------
# Upload


@dataclass(frozen=True)
class _IndexedSnippet:
    file: str


class _PaperIndex:
    """A paper of a release as parse_predictions needs it, built from the database (no files)."""

    def __init__(self, paper_id: str):
        self.id = paper_id
        self.by_name: dict[str, list[str]] = {}

    def snippet(self, name: str, file: str | None = None) -> _IndexedSnippet:
        files = [f for f in self.by_name.get(name, []) if file is None or f == file]
        if not files:
            raise KeyError(f"{self.id}: no snippet {name!r}" + (f" in {file}" if file else ""))
        if len(files) > 1:
            raise KeyError(f"{self.id}: snippet {name!r} is in several files; give 'file'")
        return _IndexedSnippet(files[0])


class _ReleaseIndex:
    def __init__(self, rows: list[dict]):
        papers: dict[str, _PaperIndex] = {}
        for row in rows:
            paper = papers.setdefault(row["paper__paper_id"], _PaperIndex(row["paper__paper_id"]))
            paper.by_name.setdefault(row["name"], []).append(row["file"])
        self.papers = list(papers.values())


def _paper_files_loader(release: Release) -> Callable[[str], CorePaper | None]:
    """The release's papers with their files, loaded on first use: whole-file and diff answers need them."""
    loaded: dict[str, CorePaper | None] = {}

    def paper_files(paper_id: str) -> CorePaper | None:
        if paper_id not in loaded:
            row = release.release_papers.exclude(folder="").filter(paper__paper_id=paper_id).first()
            loaded[paper_id] = _core_paper_load(row) if row is not None else None
        return loaded[paper_id]

    return paper_files


def _quota_used(user: Any) -> int:
    """Uploads and evaluations run here in the last 24 hours (a run's scoring is the run: counted once)."""
    since = _now() - dt.timedelta(days=1)
    not_charged = [Status.FAILED, Status.CANCELLED, Status.WAITING]
    runs = EvaluationRun.objects.filter(user=user, created_at__gte=since).exclude(
        status__in=[RunStatus.FAILED, RunStatus.CANCELLED]).exclude(submission__status__in=not_charged).count()
    return runs + (
        PredictionSubmission.objects.filter(user=user, created_at__gte=since, run__isnull=True)
        # re-scoring onto a new release is ours, not theirs (a subquery: a negated JSON key lookup
        # would also drop every row whose succession has no "mode", i.e. all uploads)
        .exclude(evaluation__in=Evaluation.objects.filter(succession__mode="rescored").values("pk"))
        .exclude(status__in=not_charged)
        .count()
    )


def quota_check(user: Any) -> None:
    """Refuse a new upload or run past the daily quota (staff are exempt); call it under the user's row lock."""
    quota = settings.RCB_SUBMISSIONS_PER_DAY
    if not user.is_staff and _quota_used(user) >= quota:
        raise QuotaExceeded(
            f"you have {quota} submissions (uploads and evaluations run here) in the last 24 hours, the daily quota; "
            "failed and cancelled ones do not count"
        )


def _metadata_check(*, texts: dict[str, str], limits: dict[str, int], decoding: dict) -> None:
    """Refuse text no column can hold (NUL, lone surrogates, past its length) and non-finite settings."""
    for name, value in texts.items():
        why = text_problem(name, value)
        if why:
            raise SubmissionError(why)
        if name in limits and len(value) > limits[name]:
            raise SubmissionError(f"'{name}' has {len(value)} characters; at most {limits[name]} are allowed")
    for name, value in decoding.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
            raise SubmissionError(f"decoding setting '{name}' must be a finite number, got {str(value)[:40]!r}")


def _upload_check(*, release: Release, data: bytes, model_name: str, organisation: str, knowledge_cutoff: str,
                  link: str, notes: str, file_name: str, decoding: dict, run_here: bool = False,
                  ) -> tuple[str, dt.date | None]:
    """The upload's size, metadata and release, checked before its lines are read: the model name as
    stored and the knowledge cutoff's last day. Raises SubmissionError (FileTooLarge, HeldOut)."""
    if release.held_out and not run_here:
        raise HeldOut(
            f"release {release.name} is held out: its tasks are not public, so predictions cannot be uploaded to it; "
            "only evaluations run here (the Hub asks the model's endpoint itself) are scored on it"
        )
    limit = max_upload_bytes()
    if len(data) > limit:
        raise FileTooLarge(
            f"the file has {len(data) / 1048576:.1f} MB; the limit is {limit / 1048576:.0f} MB per submission"
        )
    _metadata_check(
        texts={"model_name": model_name, "organisation": organisation, "knowledge_cutoff": knowledge_cutoff,
               "link": link, "notes": notes, "file_name": file_name},
        limits={"organisation": 200, "knowledge_cutoff": 20, "link": 500, "notes": 5000},
        decoding=decoding,
    )
    model_name = " ".join(model_name.split())
    if not model_name:
        raise SubmissionError("a model name is required")
    if len(model_name) > 200:
        raise SubmissionError("the model name is longer than 200 characters")
    if not release.frozen:
        raise SubmissionError(f"release {release.name} is not published yet; submit to a published release")
    if not release.release_papers.exclude(folder="").exists():
        raise SubmissionError(
            f"release {release.name} cannot score submissions: no paper's code is attached here (it holds "
            "published figures only; an operator attaches the code with `manage.py import_pset`)"
        )
    cutoff_date = None
    if knowledge_cutoff.strip():
        try:
            cutoff_date = parse_cutoff(knowledge_cutoff.strip())
        except ValueError as exc:
            raise SubmissionError(f"knowledge cutoff: {exc}") from None
    return model_name, cutoff_date


def _predictions_read(*, release: Release, data: bytes, allow_partial: bool) -> tuple[list[dict], list]:
    """The release's snippets and the file's predictions matched to them; every bad line is reported.
    Raises SubmissionError, or PartialCoverage when snippets lack a prediction and that is not allowed."""
    snippet_rows = list(Snippet.objects.filter(release=release).order_by("paper__paper_id", "file", "position")
                        .values("id", "paper_id", "paper__paper_id", "file", "name", "code"))
    predictions, problems = parse_predictions(data, _ReleaseIndex(snippet_rows),  # type: ignore[arg-type]
                                              paper_files=_paper_files_loader(release))
    if problems:
        raise SubmissionError(f"{len(problems)} bad line(s) in the file; nothing was stored", problems)
    if not predictions:
        raise SubmissionError("the file holds no prediction (one JSON object per line expected)")
    coverage = predictions_coverage(snippet_rows=snippet_rows, predictions=predictions)
    if coverage["missing"] and not allow_partial:
        raise PartialCoverage(coverage)
    return snippet_rows, predictions


def _model_evaluation_create(*, user: Any, release: Release, model_name: str, organisation: str, open_weights: bool,
                             knowledge_cutoff: str, cutoff_date: dt.date | None, link: str, with_paper: bool,
                             samples: int, decoding: dict, run_card: dict, run_here: bool = False,
                             ) -> tuple[LLMModel, Evaluation]:
    """The uploader's model (one per user and name, its details updated) and the submission's private evaluation."""
    model, _ = LLMModel.objects.update_or_create(
        key=f"u{user.pk}-{slugify(model_name)[:150] or 'model'}",
        defaults=dict(
            display_name=model_name,
            organisation=organisation.strip()[:200],
            open_weights=open_weights,
            knowledge_cutoff=knowledge_cutoff.strip()[:20],
            knowledge_cutoff_date=cutoff_date,
            links={"homepage": link} if link else {},
        ),
    )
    evaluation = Evaluation.objects.create(
        model=model,
        release=release,
        with_paper=with_paper,
        samples=samples,
        decoding=decoding,
        prompt_version=PROMPT_VERSION,
        harness_version=HARNESS_VERSION,
        source=Evaluation.SUBMISSION,
        is_public=False,
        # already reduced to what the site keeps (benchmark_core.generate.card_public)
        run_card=run_card,
        cost_per_snippet=run_card.get("cost_per_snippet_usd"),
        run_here=run_here,
    )
    return model, evaluation


def submission_duplicate_note(*, submission: PredictionSubmission, model_name: str) -> tuple[str, bool]:
    """What an identical re-upload is told: which earlier submission it is, and that a new model
    name was not taken (the result stays under the name it was scored with); and whether the
    upload asked for another name."""
    note = (f"This file is identical to your submission #{submission.pk} ({submission.model_name}, uploaded "
            f"{submission.created_at:%Y-%m-%d %H:%M} UTC, {submission.status}): nothing new was stored or scored")
    asked = " ".join((model_name or "").split())
    renamed = bool(asked) and asked != submission.model_name
    if renamed:
        note += (f"; it stays under the model name {submission.model_name!r}, not {asked!r} (one file, one result: "
                 "the same predictions are not scored twice)")
    return note + ".", renamed


def prediction_submission_create(
    *,
    user: Any,
    release: Release,
    data: bytes,
    model_name: str,
    file_name: str = "",
    organisation: str = "",
    open_weights: bool = False,
    knowledge_cutoff: str = "",
    link: str = "",
    with_paper: bool = True,
    decoding: dict | None = None,
    notes: str = "",
    allow_partial: bool = False,
    publish: bool = False,
    run_card: dict | None = None,
    run_here: bool = False,
) -> tuple[PredictionSubmission, bool]:
    """Validate and store an upload, and enqueue one scoring job per paper once it is committed.

    Returns (submission, created); an identical earlier upload of the same user to the same
    release is returned as it is (created False). Raises SubmissionError, nothing stored; a file
    that leaves snippets without a prediction raises PartialCoverage unless ``allow_partial``.
    With ``publish`` the evaluation is published as soon as scoring finishes. ``run_here`` is for
    ``submissions.runs`` only (the answers of an evaluation the Hub ran itself, already counted in the
    quota): its evaluation carries the run-here badge, and it is never an earlier upload's duplicate.
    """
    model_name, cutoff_date = _upload_check(
        release=release, data=data, model_name=model_name, organisation=organisation,
        knowledge_cutoff=knowledge_cutoff, link=link, notes=notes, file_name=file_name, decoding=decoding or {},
        run_here=run_here,
    )
    content_hash = hashlib.sha256(data).hexdigest()
    earlier = PredictionSubmission.objects.none() if run_here else PredictionSubmission.objects.filter(
        user=user, release=release, content_hash=content_hash, run__isnull=True)
    existing = earlier.first()
    if existing is not None:
        return existing, False

    snippet_rows, predictions = _predictions_read(release=release, data=data, allow_partial=allow_partial)
    if not run_here:
        quota_check(user)  # early, so an upload over quota is not flagged for nothing; again under the lock below

    by_key = {(r["paper__paper_id"], r["file"], r["name"]): r for r in snippet_rows}
    sample_ids = sorted({p.sample for p in predictions})
    flags = submission_flags_compute(
        CompletionInput(p.paper, p.snippet, p.sample, p.completion, by_key[(p.paper, p.file, p.snippet)]["code"])
        for p in predictions
    )
    with transaction.atomic():
        # the user's row lock serialises this user's uploads (SQLite: the IMMEDIATE transaction
        # does), so the count below and the insert cannot interleave with a concurrent upload
        User.objects.select_for_update().filter(pk=user.pk).first()
        existing = earlier.first()
        if existing is not None:
            return existing, False
        if not run_here:
            quota_check(user)
        model, evaluation = _model_evaluation_create(
            user=user, release=release, model_name=model_name, organisation=organisation, open_weights=open_weights,
            knowledge_cutoff=knowledge_cutoff, cutoff_date=cutoff_date, link=link, with_paper=with_paper,
            samples=len(sample_ids), decoding=decoding or {}, run_card=run_card or {}, run_here=run_here,
        )
        submission = PredictionSubmission.objects.create(
            user=user,
            release=release,
            model=model,
            evaluation=evaluation,
            model_name=model_name,
            organisation=organisation.strip()[:200],
            open_weights=open_weights,
            knowledge_cutoff=knowledge_cutoff.strip()[:20],
            link=link,
            with_paper=with_paper,
            decoding=decoding or {},
            notes=notes,
            file_name=Path(file_name).name[:255],
            file_size=len(data),
            content_hash=content_hash,
            predictions_count=len(predictions),
            sample_ids=sample_ids,
            flags=flags,
            publish_when_finished=publish,
        )
        SubmissionPrediction.objects.bulk_create(
            [
                SubmissionPrediction(
                    submission=submission,
                    snippet_id=by_key[(p.paper, p.file, p.snippet)]["id"],
                    sample=p.sample,
                    completion=p.completion,
                )
                for p in predictions
            ],
            batch_size=500,
        )
        scoring_jobs_create(submission=submission, note="submitted")
    return submission, True


def scoring_jobs_create(*, submission: PredictionSubmission, note: str) -> list[Job]:
    """One scoring job per paper of the submission's release, pushed to the queue after commit."""
    per_paper: dict[int, int] = {}
    for paper_id in Snippet.objects.filter(release_id=submission.release_id).values_list("paper_id", flat=True):
        per_paper[paper_id] = per_paper.get(paper_id, 0) + 1
    samples = len(submission.sample_ids or [0])
    jobs = []
    # papers without their code here cannot be scored: the release page lists them with the reason
    for release_paper in submission.release.release_papers.exclude(folder="").select_related("paper"):
        release_paper_archive_ensure(release_paper=release_paper)  # this host has the folder; workers take the hash
        jobs.append(job_create(
            kind=JobKind.SUBMISSION_PAPER, note=note, submission=submission, paper=release_paper.paper,
            release_paper=release_paper, tasks_total=per_paper.get(release_paper.paper_id, 0) * samples,
        ))
    return jobs


# --------------------------------------------------------------------------------------------
# Queueing


# --------------------------------------------------------------------------------------------
# Running a job


def _core_paper_load(release_paper: ReleasePaper) -> CorePaper:
    """The paper as stored with its papers.yaml entry (annotated files, timeout, environment...).

    Fetched by content hash into this worker's cache (scoring.paper_store): a worker needs no
    release folder of its own.
    """
    return paper_folder_load(release_paper_folder(release_paper=release_paper))


class _EnvironmentBroken(Exception):
    """The paper's reference code does not pass in its environment: no completion can be judged."""

    def __init__(self, environment: str, reason: str):
        super().__init__(reason)
        self.environment, self.reason = environment, reason


def _environment_name(paper: CorePaper) -> str:
    return str(getattr(paper, "environment", None) or "")


def _environment_record(*, release_paper_id: int, environment: str, ok: bool, reason: str = "",
                        seconds: float | None = None) -> bool:
    """Store what a job saw of the paper's environment; True when it newly broke (or broke differently)."""
    values: dict[str, Any] = dict(environment=environment[:100], environment_ok=ok, environment_error=reason,
                                  environment_checked_at=_now())
    if seconds is not None:
        values["reference_seconds"] = round(seconds, 3)
    rows = ReleasePaper.objects.filter(pk=release_paper_id)
    # one conditional update: of two jobs that find the same breakage, one alerts
    if not rows.exclude(environment_ok=ok, environment_error=reason).update(**values):
        rows.update(**values)  # the same verdict again: only the time of the check moves
        return False
    # what the release's pages say about its scorable papers changed: cached pages go stale
    release_touch(release_id=rows.values_list("release_id", flat=True).get())
    return not ok


def _paper_score(job: Job, beat: Heartbeat) -> str:
    """Run the job's snippets left through the engine's ``run_tasks``, each result written as it comes.

    The paper's reference code is run first (the engine's health gate, the run the proof needs
    anyway; a passing outcome known for this paper content and environment is not run again): when
    it fails the job raises _EnvironmentBroken. A cancel (the heartbeat finds the job no longer
    ours) stops the runs at once: their sessions are aborted and nothing more is written.
    """
    submission = job.submission
    paper = _core_paper_load(job.release_paper)
    rows = {(s.file, s.name): s for s in Snippet.objects.filter(release_id=submission.release_id, paper_id=job.paper_id)}
    unknown = [f"{s.file}:{s.name}" for s in paper.snippets if (s.file, s.name) not in rows]
    if unknown or len(rows) != len(paper.snippets):
        raise RuntimeError(
            f"the paper folder on this worker does not match the release ({len(paper.snippets)} snippets in the "
            f"folder, {len(rows)} in the release; not in the release: {', '.join(unknown[:5]) or '-'})"
        )
    completions = {
        (p.snippet_id, p.sample): p.completion
        for p in SubmissionPrediction.objects.filter(submission=submission, snippet__paper_id=job.paper_id)
    }
    done = set(
        SnippetResult.objects.filter(evaluation_id=submission.evaluation_id, snippet__paper_id=job.paper_id).values_list(
            "snippet_id", "sample"
        )
    )
    tasks: list[Task] = []
    answers: dict[tuple[str, str, int], tuple[int, str]] = {}  # (file, snippet, sample) -> (row id, completion)
    for sample in submission.sample_ids or [0]:
        for snip in paper.snippets:
            row = rows[(snip.file, snip.name)]
            if (row.id, sample) in done:  # a re-run attempt continues where the last one stopped
                continue
            answer = completions.get((row.id, sample))
            code = answer_code(paper, snip, answer) if answer is not None else None
            tasks.append(Task(paper, snip, code, sample))
            answers[(snip.file, snip.name, sample)] = (row.id, answer or "")
    stop = threading.Event()
    beat.on_lost = stop.set  # a cancel stops the running test within a heartbeat
    if beat.lost:
        stop.set()
    broken: list[tuple[str, str]] = []  # (environment, reason) the engine's health gate gave

    def write(run: Any) -> None:
        if beat.lost or broken:
            stop.set()
            return
        if run.category == "environment":  # the reference code fails here: no completion is judged
            broken.append((environment, str(run.extra.get("environment_error") or run.output_tail[-500:]
                                            or "environment error")))
            stop.set()
            return
        snippet_id, answer = answers[(run.file, run.snippet, run.sample)]
        with transaction.atomic():
            # the job row locked: a cancel (or a watchdog re-assignment) either came before, and nothing
            # is written, or waits for this write
            if not Job.objects.select_for_update().filter(
                pk=job.pk, rq_job_id=job.rq_job_id, status=JobStatus.RUNNING
            ).exists():
                beat.lost = True
                stop.set()
                return
            evaluation_results_write(evaluation=submission.evaluation_id, aggregates=False,
                                     rows=[result_row_from_run(snippet_id=snippet_id, run=run, completion=answer)])

    store = reference_store()
    reference_failures_forget()  # a worker outlives its jobs: each job sees a repaired environment
    with job_sandbox(trust=PUBLIC) as sandbox:
        # the paper's environment by name, else the backend's own words (not the pool's)
        environment = _environment_name(paper) or getattr(sandbox, "inner", sandbox).describe()
        runs = any(t.code is not None for t in tasks)
        known = runs and reference_known(sandbox, paper, store=store) is not None
        opened = getattr(sandbox, "opened", None)  # a pool counts the sessions it had to open
        run_tasks(tasks, sandbox=sandbox, workers=settings.RCB_SCORING_THREADS,
                  timeout=paper.timeout or settings.RCB_RUN_TIMEOUT, progress=write, store=store, stop=stop)
        kept = opened is not None and getattr(sandbox, "opened", None) == opened
        reference = reference_known(sandbox, paper, store=store) if runs and not broken else None
    if beat.lost:
        return "lost"
    if broken:
        raise _EnvironmentBroken(*broken[0])
    if reference is not None:
        _environment_record(release_paper_id=job.release_paper_id, ok=True, seconds=reference.get("seconds"),
                            environment=environment)
    if runs:  # what the job found ready (the operators' view of the worker's warm pool)
        history_add(job.pk, f"sandbox: {'warm, kept from an earlier job' if kept else 'opened'}; reference outcome: "
                             f"{'known, not run again' if known else 'run'}")
    return "done"


def scoring_job_run(*, job_id: int, rq_job_id: str) -> str:
    """Score one paper of one submission: claim the job, run every snippet left, record the end.

    Returns 'done', 'failed', 'environment' (the paper's reference code fails in its environment:
    the job waits for a repair), 'lost' (cancelled or re-assigned meanwhile), 'skipped' (this RQ
    job is not the job's current attempt, or the job is not queued) or 'retry' (the database
    connection dropped: the job is queued again, the submission is not charged).
    """
    try:
        return _scoring_job_attempt(job_id=job_id, rq_job_id=rq_job_id)
    except (InterfaceError, OperationalError) as exc:
        # dropped while claiming or settling the job (the scoring's own losses are caught inside):
        # the same remedy, not the RQ failure that would leave the row for the watchdog
        logger.warning("scoring job %s: database connection lost around the scoring (%s); queued again", job_id, exc)
        job_retry_after_db_loss(job_id=job_id, rq_job_id=rq_job_id, reason=reason_of(exc))
        return "retry"


def _scoring_job_attempt(*, job_id: int, rq_job_id: str) -> str:
    if job_claim(job_id=job_id, rq_job_id=rq_job_id) is None:
        return "skipped"
    job = Job.objects.select_related("submission", "release_paper", "paper").get(pk=job_id)
    if job.submission.status != Status.RUNNING:  # (a running one stays so while a job of it runs)
        submission_status_refresh(submission_id=job.submission_id)
    beat = Heartbeat(job_id, rq_job_id)
    beat.start()
    try:
        outcome = _paper_score(job, beat)
    except _EnvironmentBroken as exc:
        outcome = "environment"
        reason = f"environment {exc.environment or '?'}: {exc.reason}"[:2000]
        job_end(job_id=job_id, rq_job_id=rq_job_id, status=JobStatus.ENVIRONMENT, error=reason,
                note=f"attempt {job.attempt}: environment error: {reason[:200]}")
        if _environment_record(release_paper_id=job.release_paper_id, environment=exc.environment, ok=False,
                               reason=exc.reason[:2000]):
            _environment_alert(release_paper_id=job.release_paper_id, reason=reason)
    except (InterfaceError, OperationalError) as exc:
        # the database connection dropped (restart, pg_terminate_backend): not the submission's fault
        logger.warning("scoring job %s: database connection lost (%s); queued again", job_id, exc)
        outcome = "retry"
        job_retry_after_db_loss(job_id=job_id, rq_job_id=rq_job_id, reason=reason_of(exc))
    except PaperStorageUnavailable as exc:
        # the bucket is away or this host has no room: not the submission's fault, and not for good
        logger.warning("scoring job %s: %s; waiting for the watchdog's next round", job_id, exc)
        outcome = "retry"
        job_wait(job_id=job_id, rq_job_id=rq_job_id,
                 reason=f"waiting: the paper's files cannot be fetched right now ({exc}); scoring of this paper "
                        "resumes by itself when they can, nothing is lost or charged")
    except Exception as exc:  # any failure ends the job as failed with its reason; never left running
        logger.exception("scoring job %s failed", job_id)
        outcome = "failed"
        job_end(job_id=job_id, rq_job_id=rq_job_id, status=JobStatus.FAILED, error=reason_of(exc),
                note=f"attempt {job.attempt} failed: {reason_of(exc)[:200]}")
    finally:
        beat.stop()
    if outcome == "done":
        job_end(job_id=job_id, rq_job_id=rq_job_id, status=JobStatus.FINISHED,
                note=f"attempt {job.attempt} finished")
    # whatever ended the attempt (lost, a dropped connection after a pause...), a worker still running
    # it that was taken for dead meanwhile had hung: it says so, and that loss does not count
    try:
        worker_answered_again(job_id=job_id)
    except (InterfaceError, OperationalError) as exc:  # the database away again: the next attempt will say it
        logger.warning("scoring job %s: could not record that its worker answered again: %s", job_id, exc)
    submission_status_refresh(submission_id=job.submission_id)
    return outcome


# --------------------------------------------------------------------------------------------
# Submission lifecycle


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


def _environment_alert(*, release_paper_id: int, reason: str) -> None:
    """Tell the staff that a paper's environment broke (once per new reason, not once per job)."""
    rp = ReleasePaper.objects.select_related("release", "paper").get(pk=release_paper_id)
    emails = list(User.objects.filter(is_staff=True, is_active=True).exclude(email="").values_list("email", flat=True))
    if not emails:
        return
    url = settings.RCB_SITE_URL.rstrip("/") + "/staff/environments/"
    waiting = Job.objects.filter(release_paper_id=release_paper_id, status=JobStatus.ENVIRONMENT).count()
    subject = f"Environment error: {rp.paper.paper_id} ({rp.release.name})"
    body = (
        f"The reference code of paper {rp.paper.paper_id} does not pass in its environment, so its completions "
        f"cannot be judged. No model is blamed: {waiting} scoring job(s) wait.\n\n{reason}\n\n"
        f"Repair the environment, then run `python manage.py environment_recheck --paper {rp.paper.paper_id}`.\n"
        f"Environments: {url}\n"
    )
    try:
        send_mail(subject, body, None, emails)
    except Exception:  # a mail server problem must not fail the job that found the error
        logger.exception("could not send the environment alert of %s", rp.paper.paper_id)


def environment_jobs_requeue(*, paper_id: str | None = None, release: Release | None = None) -> list[int]:
    """Queue again the jobs that ended in an environment error (after a repair); return their ids."""
    jobs = Job.objects.filter(kind=JobKind.SUBMISSION_PAPER, status=JobStatus.ENVIRONMENT).exclude(
        submission__status=Status.CANCELLED)
    if paper_id:
        jobs = jobs.filter(paper__paper_id=paper_id)
    if release is not None:
        jobs = jobs.filter(submission__release=release)
    requeued: list[int] = []
    submissions: set[int] = set()
    for job in jobs:
        with transaction.atomic():
            if job_requeue(job, expect=Q(status=Status.ENVIRONMENT), note="environment recheck"):
                requeued.append(job.pk)
                submissions.add(job.submission_id)
    for submission_id in sorted(submissions):
        PredictionSubmission.objects.filter(pk=submission_id, status=Status.WAITING).update(failure_reason="")
        submission_status_refresh(submission_id=submission_id)
    return requeued


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


# --------------------------------------------------------------------------------------------
# The submission paper kind of job (registered by SubmissionsConfig.ready)


def submissions_settle() -> list[int]:
    """Settle submissions whose jobs all ended (after a crash between a job's end and its submission's update)."""
    settled = []
    for sub_id in PredictionSubmission.objects.filter(status__in=ACTIVE_STATUSES).exclude(
        jobs__status__in=ACTIVE_STATUSES
    ).values_list("pk", flat=True):
        submission_status_refresh(submission_id=sub_id)
        settled.append(sub_id)
    return settled


def _job_given_up(job: Job, reason: str) -> None:
    submission_status_refresh(submission_id=job.submission_id)


def _job_requeued(job: Job) -> None:
    # a job given up is resumed (its worker had hung, not died): its failed submission runs again
    if PredictionSubmission.objects.filter(pk=job.submission_id, status=Status.FAILED).exists():
        submission_status_refresh(submission_id=job.submission_id)


SUBMISSION_PAPER = KindSpec(
    entry="submissions.jobs.score_paper", queue=queue.SCORING,
    watched=lambda jobs: jobs.exclude(submission__status=Status.CANCELLED),
    on_failed=_job_given_up, on_requeued=_job_requeued, sweep=submissions_settle,
)


