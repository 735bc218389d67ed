"""Import a problem-set folder: a draft release of its own, or its code attached to the published release."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from benchmark_core.hashing import folder_hash, ignored
from benchmark_core.problemset import Paper as CorePaper
from benchmark_core.problemset import ProblemSet, paper_entry, paper_entry_write, validate_problemset
from scoring.health import environment_import_fields
from scoring.paper_store import paper_archive_put
from catalog.aggregates import release_touch
from catalog.models import Paper, Release, ReleasePaper, Snippet
from catalog.papers import paper_summary_text
from catalog.releases import release_content_hash, release_slug_unique
from .common import ImportProblem, paper_fields

__all__ = ["PsetImportResult", "paper_copy_store", "pset_import"]


@dataclass
class PsetImportResult:
    release: Release
    attached: bool  # the folder was attached to an existing published release
    papers: int
    snippets: int
    warnings: list[str] = field(default_factory=list)


def _pset_load(path: Path) -> ProblemSet:
    pset, problems = validate_problemset(path)
    if problems:
        raise ImportProblem("\n".join(str(p) for p in problems) + f"\n{len(problems)} problem(s): nothing was imported")
    if not pset.papers:
        raise ImportProblem(f"{path}: no paper found")
    return pset


def _pset_names(pset: ProblemSet) -> set[tuple[str, str]]:
    return {(paper.id, snip.name) for paper, snip in pset.snippets}


def _matching_published(pset: ProblemSet) -> Release | None:
    """The published release that has every paper of the folder with exactly the folder's snippet
    names, if any: the folder may hold only some of the release's papers (the others then stay
    without code, so not scorable here)."""
    names = _pset_names(pset)
    paper_ids = {paper.id for paper in pset.papers}
    for release in Release.objects.filter(status=Release.PUBLISHED).order_by("-created_at"):
        have = set(
            Snippet.objects.filter(release=release, paper__paper_id__in=paper_ids).values_list("paper__paper_id", "name")
        )
        if have == names:
            return release
    return None


def _copy_ignore(src: Path):
    """shutil.copytree's ignore callable for the one rule of what is not part of a paper."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        base = Path(directory).relative_to(src)
        return {name for name in names if ignored(base / name)}

    return ignore


def paper_copy_store(*, paper: CorePaper, root: Path, entry: dict[str, Any] | None = None) -> Path:
    """Copy a paper's folder to ROOT/<id>/ and its papers.yaml entry into ROOT/papers.yaml; return the copy.

    The entry keeps what decides the paper's scoring (annotated files, context files, timeout,
    fresh_process, environment): the copy loads as the original did (benchmark_core.problemset.
    paper_folder_load), and a tagged ``*_ref.py`` beside the annotated file is never a snippet.
    """
    dst = Path(root) / paper.id
    if dst.exists():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(paper.folder, dst, ignore=_copy_ignore(Path(paper.folder)))
    paper_entry_write(root, entry or paper_entry(paper))
    return dst


def _pset_target(pset: ProblemSet, release_name: str | None) -> tuple[Release | None, bool]:
    """The published release the folder matches (``_matching_published``) and whether the folder is
    attached to it: when no other release is named. ImportProblem when the named release is a
    published one whose snippets are not the folder's."""
    target = Release.objects.filter(name=release_name).first() if release_name else None
    published = _matching_published(pset)
    if target is not None and target.frozen and target != published:
        raise ImportProblem(
            f"release {target.name!r} is published (frozen) and its snippets are not this folder's; "
            "choose another --release name"
        )
    return published, published is not None and (target is None or target == published)


def _pset_release(*, name: str, status: str | None) -> Release:
    """The release named ``name`` (a new draft when there is none), moved to ``status`` when given
    (its publication date set the first time it is published)."""
    release, _ = Release.objects.get_or_create(
        name=name[:100], defaults={"slug": release_slug_unique(name), "status": Release.DRAFT}
    )
    if status:
        release.status = status
        if status == Release.PUBLISHED and release.published_at is None:
            release.published_at = timezone.now()
            release.release_date = timezone.now().date()
        release.save()
    return release


def _paper_upsert(paper: CorePaper) -> Paper:
    """The site's Paper for a folder's paper: made from its metadata and summary, or, when it
    exists, only its empty fields filled (published metadata is kept)."""
    meta = dict(paper.metadata or {"id": paper.id})
    meta.setdefault("id", paper.id)
    fields = paper_fields(meta)
    summary = str(meta["summary"]) if meta.get("summary") else paper_summary_text(paper=paper)
    if summary:
        fields["summary"] = summary
    db_paper = Paper.objects.filter(paper_id=paper.id).first()
    if db_paper is None:
        return Paper.objects.create(paper_id=paper.id, **fields)
    # keep published metadata; fill what the folder adds
    changed = [k for k, v in fields.items() if v not in (None, "", {}) and getattr(db_paper, k) in (None, "", {})]
    for k in changed:
        setattr(db_paper, k, fields[k])
    if changed:
        db_paper.save(update_fields=changed)
    return db_paper


def _release_snippets(release: Release, *, attached: bool) -> dict[tuple[str, ...], Snippet]:
    """The release's snippets as the folder's are matched to them: by (paper id, name) in the
    published release the folder is attached to, by (paper id, file, name) in a draft."""
    existing = {
        (s.paper.paper_id, s.file, s.name): s for s in Snippet.objects.filter(release=release).select_related("paper")
    }
    if attached:
        return {(pid, name): s for (pid, _f, name), s in existing.items()}
    return existing


def _paper_snippets_store(
    *, paper: CorePaper, db_paper: Paper, release: Release, attached: bool,
    existing: dict[tuple[str, ...], Snippet], seen: set[int], warnings: list[str],
) -> dict[tuple[str, str], Snippet]:
    """Create or update the release's snippets of one paper (their ids added to ``seen``), then
    their parents; return them by (file, name). Attached to a published release, a snippet keeps
    its published weight (a different one in the folder is a warning); in a draft it takes the folder's."""
    created: dict[tuple[str, str], Snippet] = {}
    for position, core in enumerate(paper.snippets):
        snip = existing.get((paper.id, core.name) if attached else (paper.id, core.file, core.name))
        values = {
            "file": core.file,
            "depth": core.depth,
            "position": position,
            "start_line": core.start_line,
            "end_line": core.end_line,
            "code": core.code,
        }
        if snip is None:
            snip = Snippet.objects.create(release=release, paper=db_paper, name=core.name, weight=core.weight, **values)
        else:
            if attached and snip.weight != core.weight:
                warnings.append(
                    f"{paper.id}/{core.name}: weight {core.weight} in the folder, {snip.weight} in the "
                    "published release (kept: the published figures use it)"
                )
            elif not attached:
                values["weight"] = core.weight
            for k, v in values.items():
                setattr(snip, k, v)
            snip.save()
        created[(core.file, core.name)] = snip
        seen.add(snip.id)
    for core in paper.snippets:  # parents once every snippet of the paper exists
        snip = created[(core.file, core.name)]
        parent = created.get((core.file, core.parent)) if core.parent else None
        if snip.parent_id != (parent.id if parent else None):
            snip.parent = parent
            snip.save(update_fields=["parent"])
    return created


def _release_paper_store(
    *, release: Release, db_paper: Paper, paper: CorePaper, dst: Path, entry: dict[str, Any],
    snippets: dict[tuple[str, str], Snippet],
) -> None:
    """The release's ReleasePaper row for the paper: its copy's folder, hash and archive, its
    snippet count and weight, its papers.yaml entry and environment (known unavailable or not)."""
    ReleasePaper.objects.update_or_create(
        release=release,
        paper=db_paper,
        defaults={
            "folder": str(dst),
            "content_hash": folder_hash(dst),
            # the files once more, by content hash: what every worker host fetches (scoring.paper_store)
            "archive": paper_archive_put(folder=dst),
            "snippet_count": len(paper.snippets),
            "total_weight": sum(snippets[(c.file, c.name)].weight for c in paper.snippets),
            "entry": json.loads(json.dumps(entry, default=str)),
            "environment": str(entry.get("environment") or ""),
            **environment_import_fields(entry.get("environment")),
        },
    )


def _draft_prune(*, release: Release, pset: ProblemSet, seen: set[int]) -> None:
    """A draft follows its folder: drop the snippets and papers the folder no longer has, and
    store the release's content hash again."""
    stale = Snippet.objects.filter(release=release).exclude(id__in=seen)
    stale.delete()
    ReleasePaper.objects.filter(release=release).exclude(paper__paper_id__in=[p.id for p in pset.papers]).delete()
    release.content_hash = release_content_hash(release=release)
    release.save(update_fields=["content_hash"])


def pset_import(*, path: str | Path, release_name: str | None = None, status: str | None = None) -> PsetImportResult:
    """Load a problem-set folder into a release; idempotent.

    Attaches code, files, lines and the folder to the snippets of the published release that has
    every paper of the folder with exactly its snippet names (so new submissions are scored on the
    release the published models are ranked on; a folder with some of its papers makes those
    scorable); otherwise loads a draft release named ``release_name`` (default: the folder's
    name). Paper folders are copied under settings.RCB_PSET_ROOT/<slug>/ with their papers.yaml
    entries (paper_copy_store).
    Raises ImportProblem with every validation problem (nothing is written then).
    """
    src = Path(path).resolve()
    pset = _pset_load(src)
    warnings: list[str] = []
    published, attached = _pset_target(pset, release_name)
    with transaction.atomic():
        release = published if attached else _pset_release(name=release_name or src.name, status=status)
        root = Path(settings.RCB_PSET_ROOT) / release.slug
        existing = _release_snippets(release, attached=attached)
        seen: set[int] = set()
        for paper in pset.papers:
            db_paper = _paper_upsert(paper)
            entry = paper_entry(paper)
            dst = paper_copy_store(paper=paper, root=root, entry=entry)
            snippets = _paper_snippets_store(paper=paper, db_paper=db_paper, release=release, attached=attached,
                                             existing=existing, seen=seen, warnings=warnings)
            _release_paper_store(release=release, db_paper=db_paper, paper=paper, dst=dst, entry=entry,
                                 snippets=snippets)
        if not attached:
            _draft_prune(release=release, pset=pset, seen=seen)
        release_touch(release_id=release.id)
    return PsetImportResult(
        release=release, attached=attached, papers=len(pset.papers), snippets=len(pset.snippets), warnings=warnings
    )
