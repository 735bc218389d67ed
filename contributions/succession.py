"""Succession of releases: what a published successor takes over from its predecessor, and errata.

When a release that has a predecessor is published, every public evaluation of the predecessor
(the latest per model and prompt variant; baselines are scored afresh) comes along:

- **re-scored** when its completions are stored here (submissions, the demo): a new submission
  of the same owner holds the same completions for the successor's snippets and goes through
  the normal scoring queue; it is published when it finishes;
- **carried** when they are not (imported published results): each per-snippet verdict is
  copied where the snippet is unchanged (same content hash); the others are missing, so the
  evaluation says how much was carried and is not ranked until complete.

Errata (a successor without some snippets) are in ``contributions.errata``, which publishes through
``release_services``; this module sits below both (publishing calls ``release_successor_populate``).
"""
from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from accounts.services import user_get_or_create
from benchmark_core.annotation import TAG_RE
from benchmark_core.runner import HARNESS_VERSION
from catalog.aggregates import MISSING, release_tiers_refresh
from catalog.models import Evaluation, Release, ReleasePaper, Snippet, SnippetResult
from catalog.ranking import latest_per_model, public_evaluations, release_ranked_count
from scoring.results import ResultRow, evaluation_results_write
from submissions.models import PredictionSubmission, SubmissionPrediction

__all__ = [
    "SuccessionReport",
    "snippet_content_hash",
    "release_successor_populate",
    "release_default_switch_warning",
]

logger = logging.getLogger(__name__)

#: owner of re-scored evaluations that had no submitter (the demo's models)
MAINTAINERS_USER = "rcb-maintainers"
#: sources whose completions are stored with their results, so they can be run again
RESCORED_SOURCES = (Evaluation.SUBMISSION, Evaluation.DEMO)


@dataclass
class SuccessionReport:
    release: Release
    rescored: list[int] = field(default_factory=list)  # new submissions queued
    carried: list[int] = field(default_factory=list)  # new evaluations with carried results
    skipped: list[int] = field(default_factory=list)  # predecessor evaluations already carried over


# --------------------------------------------------------------------------- snippet identity
def _test_hashes(release: Release) -> dict[int, str]:
    """Per paper id: sha256 of the paper's test file here ('' without code). Same test, same verdicts."""
    out: dict[int, str] = {}
    for rp in ReleasePaper.objects.filter(release=release):
        test = Path(rp.folder) / "paper2code_test.py" if rp.folder else None
        try:
            out[rp.paper_id] = hashlib.sha256(test.read_bytes()).hexdigest() if test else ""
        except OSError:
            out[rp.paper_id] = ""
    return out


def snippet_content_hash(*, file: str, name: str, weight: int, code: str, test_hash: str = "") -> str:
    """What a verdict depends on: the snippet's place, weight and code (tag lines aside) and the paper's test."""
    body = "\n".join(line.rstrip() for line in code.splitlines() if not TAG_RE.match(line))
    raw = "\0".join([file, name, str(weight), body, test_hash])
    return hashlib.sha256(raw.encode("utf-8")).hexdigest()


def _snippet_index(release: Release) -> dict[tuple[str, str, str], tuple[int, str]]:
    """(paper, file, name) -> (snippet id, content hash) for every snippet of the release."""
    tests = _test_hashes(release)
    return {
        (pid, f, n): (sid, snippet_content_hash(file=f, name=n, weight=w, code=c, test_hash=tests.get(paper, "")))
        for sid, paper, pid, f, n, w, c in Snippet.objects.filter(release=release).values_list(
            "id", "paper_id", "paper__paper_id", "file", "name", "weight", "code"
        )
    }


# --------------------------------------------------------------------------- carrying over
def _succession(ev: Evaluation, mode: str, **extra: Any) -> dict[str, Any]:
    return {"mode": mode, "from_evaluation": ev.pk, "from_release": ev.release.slug,
            "from_release_name": ev.release.name, **extra}


def _rescore(ev: Evaluation, release: Release, new_index: dict) -> PredictionSubmission | None:
    """A new submission with ev's stored completions for the successor's snippets; None if none is stored."""
    from submissions.upload import scoring_jobs_create

    rows = (SnippetResult.objects.filter(evaluation=ev).exclude(category=MISSING)
            .values_list("snippet__paper__paper_id", "snippet__file", "snippet__name", "sample", "completion"))
    predictions = [(new_index[(p, f, n)][0], sample, completion) for p, f, n, sample, completion in rows
                   if (p, f, n) in new_index]
    if not predictions:
        return None
    original = PredictionSubmission.objects.filter(evaluation=ev).select_related("user").first()
    owner = original.user if original is not None else user_get_or_create(username=MAINTAINERS_USER)[0]
    samples = sorted({s for _, s, _ in predictions})
    model = ev.model
    new_ev = Evaluation.objects.create(
        model=model, release=release, with_paper=ev.with_paper, samples=len(samples), decoding=ev.decoding,
        prompt_version=ev.prompt_version, harness_version=HARNESS_VERSION, source=ev.source, is_public=False,
        hidden=ev.hidden, succession=_succession(ev, "rescored"),
    )
    submission = PredictionSubmission.objects.create(
        user=owner, release=release, model=model, evaluation=new_ev, model_name=model.display_name,
        organisation=model.organisation, open_weights=model.open_weights, knowledge_cutoff=model.knowledge_cutoff,
        link=(model.links or {}).get("homepage", "")[:500], with_paper=ev.with_paper, decoding=ev.decoding or {},
        notes=f"Re-scored onto {release.name}: the completions of evaluation {ev.pk} on {ev.release.name}.",
        file_name=original.file_name if original else "", file_size=original.file_size if original else 0,
        content_hash=hashlib.sha256(f"rescore:{ev.pk}:{release.pk}".encode()).hexdigest(),
        predictions_count=len(predictions), sample_ids=samples, flags=original.flags if original else {},
        publish_when_finished=True,
    )
    SubmissionPrediction.objects.bulk_create(
        [SubmissionPrediction(submission=submission, snippet_id=sid, sample=sample, completion=completion)
         for sid, sample, completion in predictions],
        batch_size=500,
    )
    scoring_jobs_create(submission=submission, note=f"re-scoring evaluation {ev.pk} onto {release.name}")
    return submission


def _carry(ev: Evaluation, release: Release, old_index: dict, new_index: dict) -> Evaluation:
    """A new public evaluation with ev's verdicts on every snippet whose content hash did not change.

    The verdicts are stored by the one writer (``scoring.results.evaluation_results_write``), which
    counts their flags and refreshes the figures once; the release's tiers are refreshed by the
    caller after the last evaluation. A reviewer's clearing of ev's flags comes along with them.
    """
    old_by_id = {sid: (key, digest) for key, (sid, digest) in old_index.items()}
    rows = []
    for result in SnippetResult.objects.filter(evaluation=ev).only(
        "snippet_id", "sample", "passed", "category", "exit_code", "seconds", "output_tail", "completion", "flags"
    ):
        key, digest = old_by_id.get(result.snippet_id, (None, None))
        target = new_index.get(key) if key else None
        if target is None or target[1] != digest:
            continue  # retired, or changed: its old verdict says nothing about the new snippet
        rows.append(ResultRow(
            snippet_id=target[0], sample=result.sample, passed=result.passed, category=result.category,
            exit_code=result.exit_code, seconds=result.seconds, output_tail=result.output_tail,
            completion=result.completion, flags=list(result.flags or []),
        ))
    carried = len({row.snippet_id for row in rows})
    new_ev = Evaluation.objects.create(
        model=ev.model, release=release, with_paper=ev.with_paper, samples=ev.samples, decoding=ev.decoding,
        prompt_version=ev.prompt_version, harness_version=ev.harness_version, source=ev.source, is_public=True,
        hidden=ev.hidden, verified=ev.verified, run_date=ev.run_date, input_hash="",
        flagged_results=ev.flagged_results, flags_cleared_at=ev.flags_cleared_at, flags_cleared_by=ev.flags_cleared_by,
        succession=_succession(ev, "carried", carried=carried, not_carried=len(new_index) - carried),
    )
    evaluation_results_write(evaluation=new_ev, rows=rows, replace=True, refresh_release=False)
    return new_ev


def _already_carried(release: Release) -> set[int]:
    return {s.get("from_evaluation") for s in Evaluation.objects.filter(release=release)
            .exclude(succession={}).values_list("succession", flat=True)}


@transaction.atomic
def release_successor_populate(*, release: Release, by: Any = None) -> SuccessionReport:
    """Bring the predecessor's public evaluations onto ``release`` (see the module docstring); idempotent."""
    report = SuccessionReport(release=release)
    predecessor = release.predecessor
    if predecessor is None:
        return report
    old_index, new_index = _snippet_index(predecessor), _snippet_index(release)
    done = _already_carried(release)
    for with_paper in (True, False):
        sources = latest_per_model(public_evaluations(predecessor, with_paper=with_paper))
        for ev in sources:
            if ev.model.baseline:
                continue  # the successor's own baselines are scored on publishing
            if ev.pk in done:
                report.skipped.append(ev.pk)
                continue
            submission = _rescore(ev, release, new_index) if ev.source in RESCORED_SOURCES else None
            if submission is not None:
                report.rescored.append(submission.pk)
            else:
                report.carried.append(_carry(ev, release, old_index, new_index).pk)
    release_tiers_refresh(release=release)
    logger.info("release %s (published by %s): %d evaluation(s) re-scored, %d carried over from %s", release.slug,
                getattr(by, "username", None) or "a command", len(report.rescored), len(report.carried),
                predecessor.slug)
    return report


# --------------------------------------------------------------------------- the default release
def release_default_switch_warning(*, release: Release, current: Release | None = None) -> str:
    """A warning when ``release`` as the default shows fewer ranked models than ``current`` (default:
    the present default release, else the predecessor); '' otherwise."""
    current = (current or Release.objects.filter(is_default=True).exclude(pk=release.pk).first()
               or release.predecessor)
    if current is None or current.pk == release.pk:
        return ""

    new, old = release_ranked_count(release=release), release_ranked_count(release=current)
    if new >= old:
        return ""
    pending = PredictionSubmission.objects.filter(release=release, evaluation__succession__mode="rescored",
                                                  status__in=("queued", "running")).count()
    note = f"; {pending} re-scoring(s) are still running" if pending else (
        "; its evaluations are re-scored once it is published" if not release.frozen else "")
    return (f"{release.name} ranks {new} model(s), the current default {current.name} ranks {old}{note}: "
            "the home page would show fewer models")
