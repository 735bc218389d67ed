"""Reads of releases for the pages: the release a paper's page shows, the list with its counts,
citation, a paper of a release (a release's succession: contributions.selectors).

The door from a request to a release (``release_get``, drafts and held-out content staff-only) and
its memo are catalog.visibility's; what this site can score of a release is catalog.ranking's
(``release_scorability``). Writes of releases are in catalog.releases and contributions.release_services.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from django.db.models import Count

from catalog.models import Evaluation, Paper, Release, ReleasePaper, Snippet
from catalog.ranking import scorability_of
from catalog.visibility import release_get

__all__ = [
    "ReleaseInfo",
    "release_citation",
    "release_for_paper",
    "release_paper",
    "releases_list",
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
    scorability = {rid: scorability_of(rps) for rid, rps in by_release.items()}
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


def release_paper(release: Release, paper_id: str) -> ReleasePaper:
    """Raises Paper.DoesNotExist when the paper is not in the release."""
    try:
        return ReleasePaper.objects.select_related("paper").get(release=release, paper__paper_id=paper_id)
    except ReleasePaper.DoesNotExist:
        raise Paper.DoesNotExist(f"no paper {paper_id!r} in release {release.name}") from None
