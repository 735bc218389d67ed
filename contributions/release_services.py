"""Releases: the draft that approved papers join, publishing (frozen, hashed) and the baselines.

A release's papers live under ``RCB_PSET_ROOT/<release slug>/<paper id>/`` next to a generated
``papers.yaml``, so every release folder is a complete problem set the CLI can score. A new
draft starts with the papers (with code) of the latest published release: a release is the whole
benchmark at one moment, not only what was added.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import yaml
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from benchmark_core.hashing import folder_hash
from benchmark_core.problemset import Paper as CorePaper
from benchmark_core.problemset import ProblemSetError, load_problemset, paper_entry
from benchmark_core.runner import HARNESS_VERSION
from catalog.aggregates import release_touch
from catalog.models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult
from catalog.papers import paper_summary_text
from catalog.releases import release_content_hash, release_slug_unique
from scoring import queue
from scoring.evaluate import PaperOutcome, paper_evaluate
from scoring.jobs import Heartbeat, KindSpec, job_create
from scoring.models import Job, JobKind
from scoring.paper_store import release_paper_archive_ensure
from scoring.sandbox import PUBLIC

from .models import PaperContribution
from .papers import contribution_pset_write
from .succession import release_successor_populate

__all__ = [
    "release_draft_get_or_create",
    "release_draft_create",
    "release_draft_rename",
    "release_draft_paper_add",
    "release_publish",
    "release_baselines_enqueue",
    "release_baseline_score",
    "release_pset_write",
    "baseline_model_get_or_create",
    "baselines_sweep",
    "RELEASE_BASELINE",
]

logger = logging.getLogger(__name__)

BASELINES = {
    LLMModel.REFERENCE: ("Reference code (baseline)", "the paper's own code: every snippet should pass"),
    LLMModel.EMPTY: ("Empty completion (baseline)", "nothing in place of each snippet: every snippet should fail"),
}


def _release_root(release: Release) -> Path:
    return Path(settings.RCB_PSET_ROOT) / release.slug


_DRAFT_NOTE = "Draft: approved contributions join it; an admin publishes it."


def _touch(release: Release) -> None:
    """Bulk writes send no signals: move the release's cache version by hand."""
    release_touch(release_id=release.pk)


def _entry_for(rp: ReleasePaper) -> dict[str, Any]:
    paper = rp.paper
    meta = paper.metadata or {}
    files = list(dict.fromkeys(Snippet.objects.filter(release_id=rp.release_id, paper=paper).order_by("position")
                               .values_list("file", flat=True)))
    return {
        "id": paper.paper_id,
        "title": paper.title,
        "venue": paper.venue or None,
        "arxiv_abs": paper.arxiv_abs or None,
        "github_url": paper.github_url or None,
        "first_commit_date": paper.first_commit_date.isoformat() if paper.first_commit_date else None,
        "annotated_file_paths": [f for f in files if f] or None,
        "context_file_paths": meta.get("context_file_paths") or None,
    }


def release_pset_write(*, release: Release) -> Path:
    """(Re)write the release folder's papers.yaml from the database: each paper's entry as its folder
    was loaded (timeout, fresh_process, environment kept), else one rebuilt from the rows."""
    root = _release_root(release)
    root.mkdir(parents=True, exist_ok=True)
    entries = [{**_entry_for(rp), **(rp.entry or {})}
               for rp in release.release_papers.select_related("paper") if rp.folder]
    tmp = root / f".papers.yaml.{uuid.uuid4().hex}"
    tmp.write_text(f"# release {release.name}: generated, do not edit\n" + yaml.safe_dump(entries, sort_keys=False),
                   encoding="utf-8")
    os.replace(tmp, root / "papers.yaml")
    return root


def _snippets_create(*, release: Release, paper: Paper, core: CorePaper) -> None:
    Snippet.objects.filter(release=release, paper=paper).delete()
    by_key: dict[tuple[str, str], Snippet] = {}
    for position, snip in enumerate(core.snippets):
        row = Snippet.objects.create(
            release=release, paper=paper, file=snip.file, name=snip.name,
            parent=by_key.get((snip.file, snip.parent)) if snip.parent else None,
            depth=snip.depth, position=position, start_line=snip.start_line, end_line=snip.end_line,
            weight=snip.weight, code=snip.code,
        )
        by_key[(snip.file, snip.name)] = row


def _snippets_copy(*, source: ReleasePaper, release: Release) -> None:
    mapping: dict[int, Snippet] = {}
    for old in Snippet.objects.filter(release_id=source.release_id, paper_id=source.paper_id).order_by("depth", "position"):
        new = Snippet.objects.create(
            release=release, paper_id=old.paper_id, file=old.file, name=old.name,
            parent=mapping.get(old.parent_id) if old.parent_id else None, depth=old.depth, position=old.position,
            start_line=old.start_line, end_line=old.end_line, weight=old.weight, code=old.code,
        )
        mapping[old.pk] = new


def _release_paper_copy(rp: ReleasePaper, *, release: Release, folder: str) -> ReleasePaper:
    """The same paper in another release: every field of the row (hash, counts, environment) but the folder."""
    values = {f.attname: getattr(rp, f.attname) for f in ReleasePaper._meta.concrete_fields
              if f.attname not in ("id", "release_id", "folder")}
    return ReleasePaper.objects.create(release=release, folder=folder, **values)


def release_draft_create(*, source: Release | None, name: str = "", description: str = _DRAFT_NOTE,
                         by: Any = None) -> Release:
    """A new draft holding ``source``'s papers and snippets (their code copied when attached here).

    The draft remembers ``source`` as its predecessor: publishing it carries every public
    evaluation of the predecessor over (release_successor_populate).
    """
    name = " ".join((name or "").split())[:100]
    if name and Release.objects.filter(name=name).exists():
        raise ValidationError(f"a release is already named {name!r}")
    today = timezone.now().date()
    slug = release_slug_unique(name or f"release-{today:%Y-%m-%d}")
    draft = Release.objects.create(
        name=name or f"Release {slug.removeprefix('release-')}", slug=slug, status=Release.DRAFT,
        description=description, predecessor=source,
    )
    root = _release_root(draft)
    try:
        if source is not None:
            for rp in source.release_papers.select_related("paper"):
                folder = ""
                if rp.folder and Path(rp.folder).is_dir():
                    dest = root / rp.paper.paper_id
                    if dest.exists():  # left by a failed attempt of the same slug: never trust it
                        shutil.rmtree(dest)
                    shutil.copytree(rp.folder, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
                    folder = str(dest)
                # a paper without code here (published figures) comes too: its snippets and results carry over
                _release_paper_copy(rp, release=draft, folder=folder)
                _snippets_copy(source=rp, release=draft)
            draft.description += f" Started from {source.name}."
            draft.save(update_fields=["description"])
        release_pset_write(release=draft)
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)  # the rows roll back with the caller's transaction
        raise
    _touch(draft)
    return draft


def release_draft_rename(*, release: Release, name: str) -> Release:
    """Name a draft; its slug (the URL and its folder here) follows the name while it is a draft.

    Once published a release's slug never changes: its URLs are cited (and a published release
    cannot be renamed at all)."""
    name = " ".join((name or "").split())[:100]
    if not name:
        raise ValidationError("give the release a name")
    if release.frozen:
        raise ValidationError(f"release {release.name} is published: its name is part of its citation")
    if Release.objects.filter(name=name).exclude(pk=release.pk).exists():
        raise ValidationError(f"a release is already named {name!r}")
    with transaction.atomic():
        release = Release.objects.select_for_update().get(pk=release.pk)
        old_root, slug = _release_root(release), release_slug_unique(name, exclude=release)
        release.name = name
        if slug != release.slug:
            release.slug = slug
            new_root = _release_root(release)
            for rp in release.release_papers.exclude(folder=""):
                if Path(rp.folder).parent == old_root:  # the draft's own copy moves with its folder
                    rp.folder = str(new_root / Path(rp.folder).name)
                    rp.save(update_fields=["folder"])
            if new_root.exists():  # left by a failed attempt of the same slug: never trust it
                shutil.rmtree(new_root)
            if old_root.exists():
                os.rename(old_root, new_root)  # last: a failure before it rolls the rows back
        release.save(update_fields=["name", "slug"])
    release_pset_write(release=release)
    return release


def _succession_source() -> Release | None:
    """What a new draft starts from: the default release if published, else the latest published one."""
    published = Release.objects.filter(status=Release.PUBLISHED)
    return (published.filter(is_default=True).first()
            or published.order_by("-published_at", "-created_at").first())


@transaction.atomic
def release_draft_get_or_create(*, by: Any = None, name: str = "") -> Release:
    """The draft of the next release; a new one starts from the default release (all its papers)."""
    # only a draft made here: a draft loaded with import_pset follows its folder and would drop our papers
    draft = (Release.objects.select_for_update().filter(status=Release.DRAFT, description__startswith=_DRAFT_NOTE)
             .order_by("created_at").first())
    if draft is not None:
        return draft
    return release_draft_create(source=_succession_source(), name=name, by=by)


def release_draft_paper_add(*, contribution: PaperContribution, by: Any) -> ReleasePaper:
    """Put an approved contribution's paper into the draft (replacing an older version of it)."""
    revision = contribution.current
    if revision is None:
        raise ValidationError("the contribution has no uploaded revision")
    with transaction.atomic():
        draft = release_draft_get_or_create(by=by)
        draft = Release.objects.select_for_update().get(pk=draft.pk)
        if draft.frozen:
            raise ValidationError(f"release {draft.name} is published and frozen")
        root = _release_root(draft)
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=root))
        pid = contribution.paper_id
        try:
            contribution_pset_write(contribution=contribution, revision=revision, root=staging)
            core = load_problemset(staging, papers=[pid]).paper(pid)
        except ProblemSetError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise ValidationError(f"the approved files do not load as a paper: {exc}") from None
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        try:
            paper, _ = Paper.objects.update_or_create(
                paper_id=pid,
                defaults=dict(
                    title=contribution.title, venue=contribution.venue, arxiv_abs=contribution.arxiv_url,
                    github_url=contribution.code_url, first_commit_date=contribution.first_commit_date,
                ),
            )
            paper.metadata = {**(paper.metadata or {}), "context_file_paths": list(core.context_files),
                              "contribution": contribution.pk, "requirements": list(core.requirements)}
            # the zip's paper2code_paper.md is the paper's summary (a .tex paper is not shown)
            paper.summary = paper_summary_text(paper=core) or paper.summary
            paper.save(update_fields=["metadata", "summary"])
            dest = root / pid
            rp, _ = ReleasePaper.objects.update_or_create(
                release=draft, paper=paper,
                defaults=dict(
                    folder=str(dest), content_hash=folder_hash(staging / pid), archive="",  # stored when published
                    snippet_count=len(core.snippets), total_weight=core.total_weight,
                    entry=json.loads(json.dumps(paper_entry(core), default=str)),
                    environment=str(core.environment or ""),
                    deterministic=any(c.get("key") == "repeatable" and c.get("status") == "ok"
                                      for c in contribution.report.get("checks", [])),
                ),
            )
            _snippets_create(release=draft, paper=paper, core=core)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)  # the rows roll back: so does the copy
            raise

        def swap_in() -> None:
            # the files follow the rows: only a committed approval replaces the paper's folder
            old = None
            if dest.exists():
                old = root / f".old-{pid}-{uuid.uuid4().hex}"
                os.rename(dest, old)
            os.rename(staging / pid, dest)
            shutil.rmtree(staging, ignore_errors=True)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
            release_pset_write(release=draft)

        transaction.on_commit(swap_in)
        _touch(draft)
    return rp


def baseline_model_get_or_create(*, kind: str) -> LLMModel:
    model = LLMModel.objects.filter(baseline=kind).order_by("pk").first()
    if model is None:
        name, note = BASELINES[kind]
        model, _ = LLMModel.objects.get_or_create(
            key=f"baseline-{kind}", defaults=dict(display_name=name, baseline=kind, links={"note": note}),
        )
    return model


def release_publish(*, release: Release, by: Any, make_default: bool = False) -> Release:
    """Freeze a draft: hash its papers' files, mark it published, queue the baselines, and carry the
    predecessor's public evaluations over (re-scored in the normal queue, or carried per snippet)."""
    with transaction.atomic():
        row = Release.objects.select_for_update().get(pk=release.pk)
        if row.frozen:
            raise ValidationError(f"release {row.name} is already published")
        papers = list(row.release_papers.select_related("paper"))
        if not papers:
            raise ValidationError(f"release {row.name} has no paper yet")
        for rp in papers:
            if rp.folder and Path(rp.folder).is_dir():
                # what is frozen is what is on disk now
                current = folder_hash(Path(rp.folder))
                if current != rp.content_hash:
                    rp.content_hash = current
                    rp.archive = ""  # the stored version is not what is frozen
                    rp.save(update_fields=["content_hash", "archive"])
                # the frozen files by content hash, for every worker host (scoring.paper_store)
                release_paper_archive_ensure(release_paper=rp)
        row.content_hash = release_content_hash(release=row)
        row.status = Release.PUBLISHED
        row.published_at = timezone.now()
        row.release_date = row.release_date or row.published_at.date()
        if row.description.startswith(_DRAFT_NOTE):
            # the draft's own note no longer holds; keep what follows it (where it started from)
            rest = row.description[len(_DRAFT_NOTE):].strip()
            row.description = f"{len(papers)} paper(s), published {row.published_at:%Y-%m-%d}. {rest}".strip()
        if make_default:
            Release.objects.exclude(pk=row.pk).update(is_default=False)
            row.is_default = True
        row.save()
        release_pset_write(release=row)
        evaluations = []
        for kind in (LLMModel.REFERENCE, LLMModel.EMPTY):
            evaluation, _ = Evaluation.objects.get_or_create(
                model=baseline_model_get_or_create(kind=kind), release=row, source=Evaluation.BASELINE,
                with_paper=True,
                defaults=dict(is_public=True, samples=1, harness_version=HARNESS_VERSION),
            )
            evaluations.append(evaluation)
        paper_ids = [rp.paper.paper_id for rp in papers if rp.folder]
        release_baselines_enqueue(evaluations=evaluations, paper_ids=paper_ids)  # rows now, pushes after commit
        if row.predecessor_id:
            # every public result of the predecessor comes along: re-scored (jobs queued on commit) or carried
            release_successor_populate(release=row, by=by)
    release.refresh_from_db()
    return release


def release_baselines_enqueue(*, evaluations: list[Evaluation], paper_ids: list[str],
                              note: str = "release published") -> list[int]:
    """One job per (baseline, paper), pushed after commit; a pair that has its job already is left alone."""
    made = []
    papers = {p.paper_id: p for p in Paper.objects.filter(paper_id__in=paper_ids)}
    for evaluation in evaluations:
        rps = {rp.paper_id: rp for rp in ReleasePaper.objects.filter(release_id=evaluation.release_id)}
        for pid in paper_ids:
            paper = papers[pid]
            with transaction.atomic():
                if Job.objects.filter(kind=JobKind.RELEASE_BASELINE, evaluation=evaluation, paper=paper).exists():
                    continue
                made.append(job_create(kind=JobKind.RELEASE_BASELINE, note=note, evaluation=evaluation, paper=paper,
                                       release_paper=rps.get(paper.pk)).pk)
    return made


def baselines_sweep() -> list[int]:
    """Give a job to every (baseline of a published release, paper with code) whose results are missing and
    that has none (made before jobs were rows); returns the jobs made."""
    made: list[int] = []
    evaluations = Evaluation.objects.filter(source=Evaluation.BASELINE, release__status=Release.PUBLISHED,
                                            model__baseline__in=list(BASELINES))
    for evaluation in evaluations.select_related("release"):
        scored = set(SnippetResult.objects.filter(evaluation=evaluation).values_list("snippet_id", flat=True))
        missing = {pid for sid, pid in Snippet.objects.filter(release=evaluation.release)
                   .values_list("id", "paper__paper_id") if sid not in scored}
        with_code = set(ReleasePaper.objects.filter(release=evaluation.release).exclude(folder="")
                        .values_list("paper__paper_id", flat=True))
        jobs = set(Job.objects.filter(kind=JobKind.RELEASE_BASELINE, evaluation=evaluation)
                   .values_list("paper__paper_id", flat=True))
        todo = sorted((missing & with_code) - jobs)
        if todo:
            made += release_baselines_enqueue(evaluations=[evaluation], paper_ids=todo,
                                              note="results missing, no job on record: queued by reconcile")
    return made


#: a baseline job that fails is tried again by reconcile, up to this many attempts in all (then a human looks)
MAX_BASELINE_ATTEMPTS = 3

RELEASE_BASELINE = KindSpec(
    entry="contributions.jobs.score_baseline", queue=queue.SCORING,
    timeout=lambda: settings.RCB_CONTRIB_JOB_TIMEOUT, retry_failed=MAX_BASELINE_ATTEMPTS, sweep=baselines_sweep,
)


def release_baseline_score(*, evaluation_id: int, paper_id: str, beat: Heartbeat | None = None) -> PaperOutcome:
    """Score a baseline (reference or empty) on one paper of a published release, as every paper is
    scored (``scoring.evaluate``); its figures are refreshed. Idempotent: stored verdicts are kept."""
    evaluation = Evaluation.objects.select_related("model", "release").get(pk=evaluation_id)
    kind = evaluation.model.baseline
    if kind not in BASELINES:
        raise ValidationError(f"{evaluation.model} is not a baseline")
    release_paper = ReleasePaper.objects.select_related("paper").get(release=evaluation.release,
                                                                    paper__paper_id=paper_id)
    return paper_evaluate(evaluation=evaluation, release_paper=release_paper, trust=PUBLIC, baseline=kind,
                          beat=beat, resume=True, aggregates=True)
