"""Uploads of predictions: the checks of a file and its metadata, the daily quota, the stored
submission and its scoring jobs.

An upload is checked whole before anything is stored (size, metadata, release, every line of the
file: ``SubmissionError`` lists every bad line); the daily quota is counted under a row lock on the
user; then the submission, its private evaluation and its predictions are stored, and one scoring
job per paper of the release with its code here (``scoring.models.Job``, kind ``submission_paper``:
``submissions.jobs``) is pushed once that is committed. What happens to it then is
``submissions.lifecycle``'s.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from benchmark_core.masking import PROMPT_VERSION
from benchmark_core.predictions import LineProblem, parse_predictions, text_problem
from benchmark_core.problemset import Paper as CorePaper
from benchmark_core.runner import HARNESS_VERSION
from benchmark_core.scoring import parse_cutoff
from catalog.models import Evaluation, LLMModel, Release, Snippet
from scoring.evaluate import paper_load
from scoring.jobs import job_create
from scoring.models import Job, JobKind
from scoring.paper_store import release_paper_archive_ensure

from .flags import CompletionInput, submission_flags_compute
from .models import EvaluationRun, PredictionSubmission, RunStatus, Status, SubmissionPrediction

__all__ = [
    "SubmissionError",
    "QuotaExceeded",
    "PartialCoverage",
    "FileTooLarge",
    "HeldOut",
    "predictions_coverage",
    "coverage_warning",
    "max_upload_bytes",
    "quota_used",
    "quota_check",
    "submission_duplicate_note",
    "prediction_submission_create",
    "scoring_jobs_create",
]

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
            loaded[paper_id] = paper_load(row) if row is not None else None
        return loaded[paper_id]

    return paper_files


def quota_used(user: Any) -> int:
    """Uploads and evaluations run here in the last 24 hours (a run's scoring is the run: counted once)."""
    since = timezone.now() - dt.timedelta(days=1)
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
    if not user.is_staff and quota_used(user) >= quota:
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
