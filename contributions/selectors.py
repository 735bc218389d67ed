"""Reads of the contributions app for pages: contributions, their review, release drafts, a release's succession."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db.models import QuerySet
from django.http import Http404
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from accounts.roles import user_is_reviewer
from benchmark_core.hashing import folder_hash
from catalog.models import Evaluation, Paper, Release, ReleasePaper
from catalog.ranking import HEAVY

from .models import ContributionRevision, PaperContribution

__all__ = [
    "contribution_get_for_user",
    "contributions_of_user",
    "review_queue",
    "contribution_code_view",
    "contribution_snippet_tree",
    "contribution_duplicates",
    "paper_id_taken",
    "releases_for_staff",
    "release_papers",
    "CodeFile",
    "ReleaseSuccession",
    "release_succession",
]

MAX_SHOWN_BYTES = 400_000


def contributions_of_user(*, user: Any) -> QuerySet[PaperContribution]:
    return PaperContribution.objects.filter(contributor=user).order_by("-created_at")


def contribution_get_for_user(*, pk: int, user: Any) -> PaperContribution:
    """The contribution if the user may see it (its contributor or a reviewer); 404 otherwise."""
    try:
        contribution = PaperContribution.objects.select_related("contributor").get(pk=pk)
    except PaperContribution.DoesNotExist:
        raise Http404("no such contribution") from None
    if contribution.contributor_id != user.pk and not user_is_reviewer(user):
        raise Http404("no such contribution")
    return contribution


def review_queue(*, status: str | None = None) -> QuerySet[PaperContribution]:
    rows = PaperContribution.objects.select_related("contributor").order_by("status_changed_at")
    if status == "all":
        return rows
    return rows.filter(status=status or PaperContribution.AWAITING_REVIEW)


def _revision_folder_hash(revision: ContributionRevision) -> str:
    notes = revision.unpack_notes or {}
    if notes.get("folder_hash"):
        return notes["folder_hash"]
    folder = Path(settings.MEDIA_ROOT) / revision.folder  # uploads from before the hash was noted
    return folder_hash(folder) if revision.folder and folder.is_dir() else ""


def contribution_duplicates(*, contributions: list[PaperContribution]) -> dict[int, list[dict[str, str]]]:
    """Per contribution: the papers of releases whose files are identical to its current upload."""
    by_pk = {c.pk: c for c in contributions}
    if not by_pk:
        return {}
    hashes: dict[int, str] = {}
    for rev in ContributionRevision.objects.filter(contribution__in=list(by_pk)).only(
        "contribution_id", "number", "unpack_notes", "folder"
    ):
        if rev.number == by_pk[rev.contribution_id].revision:
            hashes[rev.contribution_id] = _revision_folder_hash(rev)
    found: dict[str, list[ReleasePaper]] = {}
    for rp in ReleasePaper.objects.filter(content_hash__in={h for h in hashes.values() if h}).select_related(
        "paper", "release"
    ).order_by("release__created_at"):
        found.setdefault(rp.content_hash, []).append(rp)
    duplicates: dict[int, list[dict[str, str]]] = {}
    for pk, digest in hashes.items():
        rows = [
            {"paper_id": rp.paper.paper_id, "release": rp.release.name, "release_slug": rp.release.slug}
            for rp in found.get(digest, [])
            # the contribution's own approved copy is not a duplicate of it
            if (rp.paper.metadata or {}).get("contribution") != pk
        ]
        if rows:
            duplicates[pk] = rows
    return duplicates


def paper_id_taken(*, paper_id: str, exclude_pk: int | None = None) -> str | None:
    """Why this paper id cannot be used for a new contribution, or None."""
    if Paper.objects.filter(paper_id__iexact=paper_id).exists():
        return "a paper with this id is already in the benchmark"
    open_rows = PaperContribution.objects.filter(paper_id__iexact=paper_id).exclude(status=PaperContribution.REJECTED)
    if exclude_pk:
        open_rows = open_rows.exclude(pk=exclude_pk)
    if open_rows.exists():
        return "another contribution already uses this id"
    return None


@dataclass
class CodeFile:
    path: str
    role: str  # annotated, context, test, other
    html: str
    snippets: list[dict[str, Any]] = field(default_factory=list)


def _lexer(path: str):
    try:
        return get_lexer_for_filename(path, stripnl=False)
    except ClassNotFound:
        return PythonLexer(stripnl=False) if path.endswith(".py") else TextLexer(stripnl=False)


def contribution_code_view(*, contribution: PaperContribution) -> list[CodeFile]:
    """The current revision's annotated, context and test files, highlighted (Pygments escapes the text)."""
    revision = contribution.current
    if revision is None:
        return []
    folder = Path(settings.MEDIA_ROOT) / revision.folder
    snippets = contribution.report.get("snippets", [])
    annotated = list(dict.fromkeys([s["file"] for s in snippets] + list(contribution.annotated_files)))
    wanted = [(p, "annotated") for p in annotated]
    wanted += [(p, "context") for p in contribution.context_files if p not in annotated]
    wanted.append(("paper2code_test.py", "test"))
    files = []
    formatter = HtmlFormatter(linenos="table", cssclass="highlight")
    for rel, role in wanted:
        path = (folder / rel).resolve()
        if not path.is_relative_to(folder.resolve()) or not path.is_file():
            continue
        data = path.read_bytes()[:MAX_SHOWN_BYTES].decode("utf-8", errors="replace")
        files.append(CodeFile(path=rel, role=role, html=highlight(data, _lexer(rel), formatter),
                              snippets=[s for s in snippets if s["file"] == rel]))
    return files


def contribution_snippet_tree(*, contribution: PaperContribution) -> list[dict[str, Any]]:
    """Snippets in file order with their depth, weight and blanked verdict (for an indented list)."""
    return list(contribution.report.get("snippets", []))


def releases_for_staff() -> QuerySet[Release]:
    return Release.objects.order_by("-created_at")


def release_papers(*, release: Release) -> list[dict[str, Any]]:
    rows = []
    for rp in release.release_papers.select_related("paper").order_by("paper__paper_id"):
        rows.append({"paper_id": rp.paper.paper_id, "title": rp.paper.title, "snippets": rp.snippet_count,
                     "weight": rp.total_weight, "content_hash": rp.content_hash, "has_code": bool(rp.folder)})
    return rows


@dataclass
class ReleaseSuccession:
    predecessor: Release | None
    successors: list[Release]
    changelog: list[dict[str, Any]]  # newest first
    rescoring: list[dict[str, Any]]  # {"model", "name", "from_release", "status", "public"}
    carried: list[dict[str, Any]]  # {"model", "name", "carried", "not_carried", "from_release"}
    active: int  # re-scorings still queued or running


def release_succession(*, release: Release) -> ReleaseSuccession:
    """Where a release comes from and what came along: changelog, re-scoring progress, carried results."""
    evaluations = list(
        Evaluation.objects.filter(release=release).exclude(succession={}).select_related("model", "submission")
        .defer(*HEAVY).order_by("model__display_name", "id")
    )
    rescoring, carried = [], []
    for ev in evaluations:
        base = {"model": ev.model.key, "name": ev.model.display_name, "from_release": ev.succession.get("from_release")}
        if ev.succession.get("mode") == "rescored":
            # the page is cached until the evaluation changes: live counts are on the (uncached) queue page
            submission = getattr(ev, "submission", None)
            rescoring.append({**base, "status": submission.status if submission else "?", "public": ev.is_public})
        else:
            carried.append({**base, "carried": ev.succession.get("carried", 0),
                            "not_carried": ev.succession.get("not_carried", 0)})
    return ReleaseSuccession(
        predecessor=release.predecessor if release.predecessor_id else None,
        successors=list(release.successors.filter(status=Release.PUBLISHED).order_by("published_at")),
        changelog=sorted(release.changelog or [], key=lambda e: e.get("at", ""), reverse=True),
        rescoring=rescoring,
        carried=carried,
        active=sum(1 for r in rescoring if not r["public"] and r["status"] in ("queued", "running")),
    )
