"""Succession of releases: what a published successor takes over from its predecessor, and errata.

When a release that has a predecessor is published, every public evaluation of the predecessor
(the latest per model and prompt variant; baselines are scored afresh) comes along:

- **re-scored** when its completions are stored here (submissions, the demo): a new submission
  of the same owner holds the same completions for the successor's snippets and goes through
  the normal scoring queue; it is published when it finishes;
- **carried** when they are not (imported published results): each per-snippet verdict is
  copied where the snippet is unchanged (same content hash); the others are missing, so the
  evaluation says how much was carried and is not ranked until complete.

Errata (``release_errata``) make and publish the successor of a release without some snippets,
with a public changelog, and so re-score everything as above.
"""
from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from benchmark_core.annotation import TAG_RE
from benchmark_core.hashing import folder_hash
from benchmark_core.problemset import ProblemSetError, load_problemset
from benchmark_core.runner import HARNESS_VERSION
from leaderboard import selectors as lb_selectors
from leaderboard.models import Evaluation, Release, ReleasePaper, Snippet, SnippetResult
from leaderboard.services import MISSING, evaluation_aggregates_refresh, release_tiers_refresh
from submissions.models import PredictionSubmission, SubmissionPrediction

__all__ = [
    "SuccessionReport",
    "snippet_content_hash",
    "release_successor_populate",
    "release_errata",
    "retire_targets_parse",
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
def _maintainers() -> Any:
    user, created = get_user_model().objects.get_or_create(username=MAINTAINERS_USER)
    if created:
        user.set_unusable_password()
        user.save(update_fields=["password"])
    return user


def _succession(ev: Evaluation, mode: str, **extra: Any) -> dict[str, Any]:
    return {"mode": mode, "from_evaluation": ev.pk, "from_release": ev.release.slug,
            "from_release_name": ev.release.name, **extra}


def _rescore(ev: Evaluation, release: Release, new_index: dict) -> PredictionSubmission | None:
    """A new submission with ev's stored completions for the successor's snippets; None if none is stored."""
    from submissions.services import scoring_jobs_create

    rows = (SnippetResult.objects.filter(evaluation=ev).exclude(category=MISSING)
            .values_list("snippet__paper__paper_id", "snippet__file", "snippet__name", "sample", "completion"))
    predictions = [(new_index[(p, f, n)][0], sample, completion) for p, f, n, sample, completion in rows
                   if (p, f, n) in new_index]
    if not predictions:
        return None
    original = PredictionSubmission.objects.filter(evaluation=ev).select_related("user").first()
    owner = original.user if original is not None else _maintainers()
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
    """A new public evaluation with ev's verdicts on every snippet whose content hash did not change."""
    old_by_id = {sid: (key, digest) for key, (sid, digest) in old_index.items()}
    copied_fields = [f.attname for f in SnippetResult._meta.concrete_fields
                     if f.attname not in ("id", "evaluation_id", "snippet_id")]
    new_ev = Evaluation.objects.create(
        model=ev.model, release=release, with_paper=ev.with_paper, samples=ev.samples, decoding=ev.decoding,
        prompt_version=ev.prompt_version, harness_version=ev.harness_version, source=ev.source, is_public=True,
        hidden=ev.hidden, verified=ev.verified, run_date=ev.run_date, input_hash="",
    )
    rows, carried = [], set()
    for result in SnippetResult.objects.filter(evaluation=ev).only("snippet_id", *copied_fields):
        key, digest = old_by_id.get(result.snippet_id, (None, None))
        target = new_index.get(key) if key else None
        if target is None or target[1] != digest:
            continue  # retired, or changed: its old verdict says nothing about the new snippet
        rows.append(SnippetResult(evaluation=new_ev, snippet_id=target[0],
                                  **{name: getattr(result, name) for name in copied_fields}))
        carried.add(target[0])
    SnippetResult.objects.bulk_create(rows, batch_size=2000)
    new_ev.succession = _succession(ev, "carried", carried=len(carried), not_carried=len(new_index) - len(carried))
    new_ev.save(update_fields=["succession"])
    evaluation_aggregates_refresh(evaluation=new_ev, refresh_release=False)
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
        sources = lb_selectors._latest_per_model(lb_selectors._public_evaluations(predecessor, with_paper=with_paper))
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


# --------------------------------------------------------------------------- errata
def retire_targets_parse(*, release: Release, targets: list[str]) -> list[Snippet]:
    """'PAPER/SNIPPET' strings -> the snippets to retire with their descendants; every bad one is named."""
    wanted, problems = [], []
    for raw in targets:
        paper_id, sep, name = raw.strip().partition("/")
        if not sep or not paper_id or not name.strip():
            problems.append(f"{raw!r}: write PAPER/SNIPPET, e.g. rope/attention scores")
            continue
        found = list(Snippet.objects.filter(release=release, paper__paper_id=paper_id, name=name.strip()))
        if not found:
            known = ReleasePaper.objects.filter(release=release, paper__paper_id=paper_id).exists()
            problems.append(f"{raw!r}: no snippet {name.strip()!r} in paper {paper_id!r} of {release.name}"
                            if known else f"{raw!r}: no paper {paper_id!r} in {release.name}")
        wanted.extend(found)
    if problems:
        raise ValidationError(problems)
    if not wanted:
        raise ValidationError("name at least one snippet to retire (PAPER/SNIPPET)")
    by_parent: dict[int | None, list[Snippet]] = {}
    for s in Snippet.objects.filter(release=release, paper_id__in={w.paper_id for w in wanted}):
        by_parent.setdefault(s.parent_id, []).append(s)
    out: dict[int, Snippet] = {}
    stack = list(wanted)
    while stack:  # a retired snippet takes the snippets nested in it along
        s = stack.pop()
        if s.pk not in out:
            out[s.pk] = s
            stack.extend(by_parent.get(s.pk, []))
    return sorted(out.values(), key=lambda s: (s.paper_id, s.position))


def _untag(folder: Path, snippets: list[Snippet]) -> None:
    """Remove the tag lines of these snippets from the paper's files: the code stays, the task goes."""
    by_file: dict[str, set[str]] = {}
    for s in snippets:
        by_file.setdefault(s.file, set()).add(s.name)
    for file, names in by_file.items():
        path = folder / file
        text = path.read_text(encoding="utf-8")
        kept = [line for line in text.splitlines(keepends=True)
                if not ((m := TAG_RE.match(line.rstrip("\r\n"))) and m.group("name") in names)]
        path.write_text("".join(kept), encoding="utf-8")


def _retire_in(release: Release, snippets: list[Snippet]) -> None:
    """Drop the snippets from the draft ``release``: rows, tags in its files, paper counts."""
    for paper_id in sorted({s.paper_id for s in snippets}):
        rp = ReleasePaper.objects.select_related("paper").get(release=release, paper_id=paper_id)
        mine = [s for s in snippets if s.paper_id == paper_id]
        Snippet.objects.filter(pk__in=[s.pk for s in mine]).delete()
        remaining = Snippet.objects.filter(release=release, paper_id=paper_id)
        if rp.folder:
            folder = Path(rp.folder)
            _untag(folder, mine)
            try:
                core = load_problemset(folder.parent, papers=[folder.name]).paper(folder.name)
            except ProblemSetError as exc:
                raise ValidationError(f"{rp.paper.paper_id}: the paper does not load without those tags: {exc}")
            lines = {(s.file, s.name): (s.start_line, s.end_line, i) for i, s in enumerate(core.snippets)}
            rows = list(remaining)
            if {(r.file, r.name) for r in rows} != set(lines):
                raise ValidationError(f"{rp.paper.paper_id}: the files and the release's snippets disagree after "
                                      "retiring; nothing was changed")
            for r in rows:  # the tags are gone: later lines moved up
                r.start_line, r.end_line, r.position = lines[(r.file, r.name)]
            Snippet.objects.bulk_update(rows, ["start_line", "end_line", "position"])
            rp.snippet_count, rp.total_weight = len(core.snippets), core.total_weight
            rp.content_hash = folder_hash(folder)
            rp.archive = ""  # the files changed: stored again by content hash when jobs are made (scoring.paper_store)
        else:
            rp.snippet_count = remaining.count()
            rp.total_weight = sum(remaining.values_list("weight", flat=True))
        rp.save(update_fields=["snippet_count", "total_weight", "content_hash", "archive"])


def release_errata(*, release: Release, retire: list[str], reason: str, by: Any = None, name: str = "") -> Release:
    """Make and publish the successor of ``release`` without the named snippets; re-score everything.

    ``retire``: 'PAPER/SNIPPET' strings (nested snippets go too). The successor's public changelog
    records what was retired and why; it is the default release if ``release`` was.
    """
    from .release_services import release_draft_create, release_publish, release_pset_write

    reason = " ".join((reason or "").split())
    if not reason:
        raise ValidationError("say why (--reason): the changelog is public")
    if not release.frozen:
        raise ValidationError(f"release {release.name} is a draft: retire snippets by editing it, not by errata")
    snippets = retire_targets_parse(release=release, targets=retire)
    now = timezone.now()
    name = name or _errata_name(release)
    with transaction.atomic():
        draft = release_draft_create(source=release, name=name, by=by,
                                     description=f"Errata of {release.name}: {reason}")
        keys = {(s.paper.paper_id, s.file, s.name) for s in snippets}
        targets = [s for s in Snippet.objects.filter(release=draft).select_related("paper")
                   if (s.paper.paper_id, s.file, s.name) in keys]
        _retire_in(draft, targets)
        who = getattr(by, "username", "") or "maintainers"
        draft.changelog = list(release.changelog or []) + [
            {"at": now.isoformat(timespec="seconds"), "release": draft.slug, "kind": "retired",
             "paper": s.paper.paper_id, "file": s.file, "snippet": s.name, "reason": reason, "by": who}
            for s in snippets
        ]
        draft.save(update_fields=["changelog"])
        release_pset_write(release=draft)
        release_publish(release=draft, by=by, make_default=release.is_default)
        _open_drafts_rebase(old=release, new=draft, keys=keys)
    draft.refresh_from_db()
    return draft


def _open_drafts_rebase(*, old: Release, new: Release, keys: set[tuple[str, str, str]]) -> None:
    """A draft started from ``old`` now succeeds ``new``: the retired snippets leave it too."""
    from .release_services import release_pset_write

    for open_draft in Release.objects.filter(status=Release.DRAFT, predecessor=old):
        stale = [s for s in Snippet.objects.filter(release=open_draft).select_related("paper")
                 if (s.paper.paper_id, s.file, s.name) in keys]
        if stale:
            _retire_in(open_draft, stale)
        open_draft.predecessor = new
        open_draft.save(update_fields=["predecessor"])
        release_pset_write(release=open_draft)


def _errata_name(release: Release) -> str:
    base = re.sub(r"\s+\(errata \d+\)$", "", release.name)
    n = 1
    while Release.objects.filter(name=f"{base} (errata {n})").exists():
        n += 1
    return f"{base} (errata {n})"


# --------------------------------------------------------------------------- the default release
def release_default_switch_warning(*, release: Release, current: Release | None = None) -> str:
    """A warning when ``release`` as the default shows fewer ranked models than ``current`` (default:
    the present default release, else the predecessor); '' otherwise."""
    current = (current or Release.objects.filter(is_default=True).exclude(pk=release.pk).first()
               or release.predecessor)
    if current is None or current.pk == release.pk:
        return ""

    def ranked(r: Release) -> int:
        return sum(1 for row in lb_selectors.leaderboard_rows(release=r).rows if row.ranked)

    new, old = ranked(release), ranked(current)
    if new >= old:
        return ""
    pending = PredictionSubmission.objects.filter(release=release, evaluation__succession__mode="rescored",
                                                  status__in=("queued", "running")).count()
    note = f"; {pending} re-scoring(s) are still running" if pending else (
        "; its evaluations are re-scored once it is published" if not release.frozen else "")
    return (f"{release.name} ranks {new} model(s), the current default {current.name} ranks {old}{note}: "
            "the home page would show fewer models")
