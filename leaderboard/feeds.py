"""Atom feeds (Django's syndication framework): new ranked results, and new releases with errata.

What they list comes from selectors.feeds (published releases only, through release_info). Text
that people wrote (release descriptions, changelog reasons) is escaped: a summary is HTML to readers.
"""
from __future__ import annotations

from django.contrib.syndication.views import Feed
from django.urls import reverse
from django.utils.feedgenerator import Atom1Feed
from django.utils.html import escape

from .selectors.feeds import FeedRelease, FeedResult, feed_releases, feed_results

__all__ = ["ReleasesFeed", "ResultsFeed", "releases_feed", "results_feed"]


class ResultsFeed(Feed):
    feed_type = Atom1Feed
    title = "ResearchCodeBench Hub: new ranked results"
    subtitle = "Models newly ranked on a published release, with their scaled pass rate and significance tier."

    def link(self) -> str:
        return reverse("leaderboard:leaderboard")

    def items(self) -> list[FeedResult]:
        return feed_results()

    def item_title(self, item: FeedResult) -> str:
        rate = "—" if item.scaled_pass_rate is None else f"{item.scaled_pass_rate:.2f} %"
        return f"{item.name}: {rate} on {item.release_name}"

    def item_description(self, item: FeedResult) -> str:
        parts = [f"Tier {item.tier}" if item.tier else "Ranked"]
        if item.ci_low is not None and item.ci_high is not None:
            parts.append(f"95 % interval {item.ci_low:.1f}–{item.ci_high:.1f} %")
        if item.source == "published":
            parts.append("imported from the published results")
        return escape(", ".join(parts) + f" (release {item.release_name}).")

    def item_link(self, item: FeedResult) -> str:
        return reverse("leaderboard:model", args=[item.model_key]) + f"?release={item.release_slug}"

    def item_guid(self, item: FeedResult) -> str:
        return f"urn:rcb-hub:evaluation:{item.evaluation_id}"

    item_guid_is_permalink = False

    def item_pubdate(self, item: FeedResult):
        return item.when

    def item_updateddate(self, item: FeedResult):
        return item.when


class ReleasesFeed(Feed):
    feed_type = Atom1Feed
    title = "ResearchCodeBench Hub: releases and errata"
    subtitle = "Published releases of the benchmark; an erratum is a successor that retires snippets, with why."

    def link(self) -> str:
        return reverse("leaderboard:releases")

    def items(self) -> list[FeedRelease]:
        return feed_releases()

    def item_title(self, item: FeedRelease) -> str:
        retired = [e for e in item.changelog if e.get("kind") == "retired" and e.get("release") == item.slug]
        if item.predecessor and retired:
            return f"{item.name}: errata of {item.predecessor} ({len(retired)} snippet(s) retired)"
        if item.predecessor:
            return f"{item.name}: succeeds {item.predecessor}"
        return f"Release {item.name}"

    def item_description(self, item: FeedRelease) -> str:
        lines = [f"{item.papers} papers, {item.snippets} snippets."]
        if item.description:
            lines.append(item.description)
        for e in item.changelog:
            if e.get("release") == item.slug:
                lines.append(f"{e.get('kind', 'changed')}: {e.get('paper', '')}/{e.get('snippet', '')}: {e.get('reason', '')}")
        return "<br>".join(escape(line) for line in lines)

    def item_link(self, item: FeedRelease) -> str:
        return reverse("leaderboard:release_detail", args=[item.slug])

    def item_pubdate(self, item: FeedRelease):
        return item.when


# plain functions, so the page cache (leaderboard.page_cache.public_page) can name and keep them
_RESULTS, _RELEASES = ResultsFeed(), ReleasesFeed()


def results_feed(request):
    return _RESULTS(request)


def releases_feed(request):
    return _RELEASES(request)
