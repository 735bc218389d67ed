"""What the Atom feeds list: new ranked results and new releases (errata among them).

Only published releases, through ``release_info.releases_list`` and ``catalog.visibility.release_visible``
(the one rule for drafts): a draft never appears, nor a result on one. Ranked means ranked on the release's
own board (boards.leaderboard_rows, the one definition). Bounded: the newest FEED_RELEASES releases.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from catalog.models import Evaluation, Release
from catalog.visibility import release_visible

from .boards import leaderboard_rows
from .release_info import releases_list

__all__ = ["FEED_ITEMS", "FEED_RELEASES", "FeedRelease", "FeedResult", "feed_releases", "feed_results"]

FEED_ITEMS = 30
#: the ranked-results feed looks at the newest published releases only (a board read each)
FEED_RELEASES = 5


@dataclass
class FeedResult:
    evaluation_id: int
    model_key: str
    name: str
    release_slug: str
    release_name: str
    tier: int | None
    scaled_pass_rate: float | None
    ci_low: float | None
    ci_high: float | None
    source: str
    when: dt.datetime


@dataclass
class FeedRelease:
    slug: str
    name: str
    description: str
    predecessor: str  # name of the release it succeeds ("" for none)
    changelog: list  # the successor's public changelog (errata: what was retired and why)
    papers: int
    snippets: int
    when: dt.datetime


def _published() -> list[Release]:
    ids = [r.id for r in releases_list()]
    releases = Release.objects.filter(id__in=ids).select_related("predecessor")
    return sorted((r for r in releases if release_visible(release=r)),
                  key=lambda r: (r.published_at or r.created_at), reverse=True)


def feed_results(*, limit: int = FEED_ITEMS) -> list[FeedResult]:
    """The newest ranked results of the newest published releases, newest first."""
    items = []
    for release in _published()[:FEED_RELEASES]:
        rows = [r for r in leaderboard_rows(release=release).board if r.ranked]
        created = dict(Evaluation.objects.filter(id__in=[r.evaluation_id for r in rows])
                       .values_list("id", "created_at"))
        items += [FeedResult(
            evaluation_id=r.evaluation_id, model_key=r.model_key, name=r.name, release_slug=release.slug,
            release_name=release.name, tier=r.tier, scaled_pass_rate=r.scaled_pass_rate, ci_low=r.ci_low,
            ci_high=r.ci_high, source=r.source, when=created[r.evaluation_id],
        ) for r in rows if r.evaluation_id in created]
    return sorted(items, key=lambda i: (i.when, i.evaluation_id), reverse=True)[:limit]


def feed_releases(*, limit: int = FEED_ITEMS) -> list[FeedRelease]:
    """Published releases, newest first; a successor names its predecessor and its changelog."""
    counts = {r.id: r for r in releases_list()}
    return [FeedRelease(
        slug=r.slug, name=r.name, description=r.description,
        predecessor=r.predecessor.name if r.predecessor_id and r.predecessor else "",
        changelog=list(r.changelog or []), papers=counts[r.id].papers, snippets=counts[r.id].snippets,
        when=r.published_at or r.created_at,
    ) for r in _published()[:limit]]
