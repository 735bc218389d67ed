"""Reads of releases: which one a page shows, the list with its counts, citation and succession, and
what this site can score of a release (papers with their code here and a working environment).

``release_get_recent`` memoizes lookups in this process for a few seconds (the API's hot path);
``release_memo_clear`` forgets them (leaderboard.aggregates calls it on every write). Writes of
releases are in leaderboard.releases and contributions.release_services.
"""
from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass, field
from typing import Any, Iterable

from django.db.models import Count

from ..models import Evaluation, Paper, Release, ReleasePaper, Snippet
from .evaluations import HEAVY, evaluation_unranked_reason

__all__ = [
    "RELEASE_MEMO_SECONDS",
    "ReleaseInfo",
    "ReleaseSuccession",
    "Scorability",
    "release_citation",
    "release_get",
    "release_for_paper",
    "release_get_recent",
    "release_memo_clear",
    "release_visible",
    "release_content_visible",
    "release_paper",
    "release_scorability",
    "release_succession",
    "releases_list",
    "scorable_unranked_reason",
]


@dataclass(frozen=True)
class ReleaseInfo:
    id: int
    name: str
    slug: str
    status: str
    content_hash: str
    release_date: dt.date | None
    is_default: bool
    description: str
    papers: int
    snippets: int
    models: int
    citation: str
    scorable_papers: int = 0  # papers this site can score now (release_scorability)
    not_scorable: list[dict[str, str]] = field(default_factory=list)  # [{"paper", "reason"}]
    held_out: bool = False  # tasks and code staff-only; only evaluations run here are scored


@dataclass(frozen=True)
class Scorability:
    """Which papers of a release this site can score now, and why the others cannot."""

    scorable: list[str]  # paper ids, sorted
    not_scorable: list[dict[str, str]]  # [{"paper", "reason"}], sorted by paper
    snippets: int  # snippets of the scorable papers
    total_weight: int
    paper_snippets: dict[str, int] = field(default_factory=dict)  # scorable paper id -> its snippets
    failing: dict[str, int] = field(default_factory=dict)  # paper id -> snippets, environment failing here

    @property
    def partial(self) -> bool:
        """Some papers cannot be scored here (but at least one can)."""
        return bool(self.scorable) and bool(self.not_scorable)


def release_visible(*, release: Release, viewer: Any = None) -> bool:
    """A published release is everyone's; a draft is staff's only.

    ``viewer`` (a user, or a lazy one) is looked at for drafts only: the pages of a published
    release stay the same for every visitor, which the page cache relies on.
    """
    return release.frozen or _is_staff(viewer)


def release_content_visible(*, release: Release, viewer: Any = None) -> bool:
    """A release's tasks, reference code, masked files and paper files: everyone's, but a held-out
    release's are staff's only (``viewer`` looked at for held-out releases only)."""
    return not release.held_out or _is_staff(viewer)


def _is_staff(viewer: Any) -> bool:
    return bool(viewer is not None and viewer.is_authenticated and viewer.is_staff)


def release_get(*, slug: str | None = None, viewer: Any = None, content: bool = False) -> Release:
    """The release with this slug (or display name); with None the default published one (else the
    newest published; for staff, when none is published, the default or newest draft).

    The one door from a request to a release: a draft is staff-only, to anyone else it does not
    exist. With ``content`` the caller serves the release's tasks, reference code or paper files:
    a held-out release's are staff-only, to anyone else they do not exist. Raises
    Release.DoesNotExist.
    """
    if slug:
        release = Release.objects.filter(slug=slug).first() or Release.objects.filter(name=slug).first()
        if release is None or not release_visible(release=release, viewer=viewer):
            raise Release.DoesNotExist(f"no release {slug!r}")
        if content and not release_content_visible(release=release, viewer=viewer):
            raise Release.DoesNotExist(f"release {slug!r} is held out: its tasks and code are not public")
        return release
    published = Release.objects.filter(status=Release.PUBLISHED)
    release = (
        published.filter(is_default=True).first()
        or published.order_by("-release_date", "-published_at", "-created_at").first()
    )
    if release is None and _is_staff(viewer):
        release = Release.objects.filter(is_default=True).first() or Release.objects.order_by("-created_at").first()
    if release is None:
        raise Release.DoesNotExist("no release yet")
    return release


def release_for_paper(*, paper_id: str) -> Release:
    """The release a paper's page shows when none is asked for: the default one when it has the
    paper, else the latest published release that has it, else the default (which then says the
    paper is not there). Raises Release.DoesNotExist when there is no release at all."""
    default = release_get()
    if ReleasePaper.objects.filter(release=default, paper__paper_id=paper_id).exists():
        return default
    latest = (Release.objects.filter(status=Release.PUBLISHED, release_papers__paper__paper_id=paper_id)
              .order_by("-release_date", "-published_at", "-created_at").first())
    return latest or default


#: per-process memo of published releases' lookups for the hot API path: {slug or None: (time, release)}
_RELEASE_MEMO: dict[str | None, tuple[float, Release]] = {}


RELEASE_MEMO_SECONDS = 2.0


def release_memo_clear() -> None:
    """Forget memoized releases (writes in this process call it; other processes wait out the TTL)."""
    _RELEASE_MEMO.clear()


def release_get_recent(*, slug: str | None = None, viewer: Any = None, max_age: float = RELEASE_MEMO_SECONDS) -> Release:
    """release_get, memoized in this process for ``max_age`` seconds (published releases only).

    For the API's cached responses: a hit then costs no query at all. A write made by another
    process (a scoring worker) shows after at most ``max_age`` seconds.
    """
    now = time.monotonic()
    hit = _RELEASE_MEMO.get(slug)
    if hit is not None and now - hit[0] < max_age:
        return hit[1]
    release = release_get(slug=slug, viewer=viewer)
    if release.frozen:
        if len(_RELEASE_MEMO) > 256:
            _RELEASE_MEMO.clear()
        _RELEASE_MEMO[slug] = (now, release)
    return release


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


def release_citation(release: Release) -> str:
    """Citation text (BibTeX) for results of a release: the benchmark's paper, then the release."""
    from ..references import BENCHMARK, benchmark_bibtex

    year = (release.release_date or (release.published_at or release.created_at).date()).year
    key = f"rcb{year}{release.slug.replace('-', '')}"
    return (
        f"{benchmark_bibtex()}\n\n"
        f"@misc{{{key},\n"
        f"  title = {{ResearchCodeBench leaderboard, release {release.name}}},\n"
        f"  year = {{{year}}},\n"
        f"  note = {{Benchmark: {BENCHMARK['short']}, arXiv:{BENCHMARK['arxiv_id']}. "
        f"Release content hash {release.content_hash or 'n/a'}}}\n"
        f"}}"
    )


def releases_list(*, include_drafts: bool = False) -> list[ReleaseInfo]:
    """Every published release (drafts too when asked: staff pages) with its counts and what can be
    scored here, newest first (4 queries whatever the number of releases)."""
    releases = Release.objects.order_by("-release_date", "-created_at")
    releases = list(releases if include_drafts else releases.filter(status=Release.PUBLISHED))
    snippets = dict(Snippet.objects.values_list("release_id").annotate(n=Count("id")).values_list("release_id", "n"))
    models = dict(
        Evaluation.objects.filter(is_public=True, hidden=False)
        .values_list("release_id")
        .annotate(n=Count("model_id", distinct=True))
        .values_list("release_id", "n")
    )
    by_release: dict[int, list[ReleasePaper]] = {}
    for rp in ReleasePaper.objects.select_related("paper").only(
        "release_id", "folder", "environment", "environment_ok", "environment_error", "snippet_count", "total_weight",
        "paper__paper_id",
    ):
        by_release.setdefault(rp.release_id, []).append(rp)
    scorability = {rid: _scorability(rps) for rid, rps in by_release.items()}
    return [
        ReleaseInfo(
            id=r.id,
            name=r.name,
            slug=r.slug,
            status=r.status,
            content_hash=r.content_hash,
            release_date=r.release_date,
            is_default=r.is_default,
            description=r.description,
            papers=len(by_release.get(r.id, [])),
            snippets=snippets.get(r.id, 0),
            models=models.get(r.id, 0),
            citation=release_citation(r),
            scorable_papers=len(scorability[r.id].scorable) if r.id in scorability else 0,
            not_scorable=scorability[r.id].not_scorable if r.id in scorability else [],
            held_out=r.held_out,
        )
        for r in releases
    ]


def _scorability(release_papers: Iterable[ReleasePaper]) -> Scorability:
    scorable, not_scorable, weight, paper_snippets, failing = [], [], 0, {}, {}
    for rp in sorted(release_papers, key=lambda r: r.paper.paper_id):
        pid = rp.paper.paper_id
        if not rp.folder:
            not_scorable.append({"paper": pid, "reason": "its code is not attached on this site"})
        elif rp.environment_ok is False:
            not_scorable.append({"paper": pid, "reason": f"its reference code fails in environment "
                                 f"{rp.environment or 'default'}: {rp.environment_error[:300]}"})
            failing[pid] = rp.snippet_count
        else:
            scorable.append(pid)
            paper_snippets[pid] = rp.snippet_count
            weight += rp.total_weight
    return Scorability(scorable=scorable, not_scorable=not_scorable, snippets=sum(paper_snippets.values()),
                       total_weight=weight, paper_snippets=paper_snippets, failing=failing)


def release_scorability(*, release: Release, release_papers: Iterable[ReleasePaper] | None = None) -> Scorability:
    """Papers with their code here whose environment is not known to fail are scorable (1 query;
    none when the caller passes the release's ReleasePaper rows, with their papers)."""
    if release_papers is None:
        release_papers = ReleasePaper.objects.filter(release=release).select_related("paper")
    return _scorability(release_papers)


def scorable_unranked_reason(ev: Evaluation, *, scorability: Scorability) -> str:
    """Why an evaluation is not ranked on its release's board ("" when it is): over the whole
    release, or on the scorable subset when only part of the release can be scored here."""
    return evaluation_unranked_reason(ev, subset=scorability.paper_snippets if scorability.partial else None,
                                      failing=scorability.failing)


def release_paper(release: Release, paper_id: str) -> ReleasePaper:
    """Raises Paper.DoesNotExist when the paper is not in the release."""
    try:
        return ReleasePaper.objects.select_related("paper").get(release=release, paper__paper_id=paper_id)
    except ReleasePaper.DoesNotExist:
        raise Paper.DoesNotExist(f"no paper {paper_id!r} in release {release.name}") from None
