"""The hardest snippets of a release: how many of its models pass each snippet, fewest first.

The models are the release's public models as its board lists them (latest evaluation per model,
with the paper, baselines left out); a snippet counts as passed by a model when any sample passed.
One aggregate over the result rows, kept in the cache until the release changes (as the paper
page's snippet figures are); 5 queries on a cold cache, none warm.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from django.db.models import Count

from catalog.models import Release, Snippet, SnippetResult
from catalog.ranking import latest_per_model, public_evaluations

from .caching import cached, release_version

__all__ = ["NAMED_UP_TO", "HardSnippet", "Hardest", "hardest_snippets"]

#: snippets passed by at most this many models name the models that passed them
NAMED_UP_TO = 3


@dataclass
class HardSnippet:
    paper: str
    file: str
    name: str
    weight: int
    depth: int
    passed_by: int  # models that passed it (any sample)
    answered_by: int  # models with a verdict on it
    models: list[str] = field(default_factory=list)  # who passed it, when passed_by <= NAMED_UP_TO


@dataclass
class Hardest:
    release: Release
    models: int  # models counted
    snippets: list[HardSnippet]  # fewest passes first, heavier first among equals
    histogram: list[tuple[int, int]]  # (models passing, snippets), from 0 up


def hardest_snippets(*, release: Release) -> Hardest:
    """Every snippet of the release with the number of its models that pass it, hardest first."""
    return cached(("hardest", release_version(release)), lambda: _hardest(release))


def _hardest(release: Release) -> Hardest:
    evs = [ev for ev in latest_per_model(public_evaluations(release, light=True)) if not ev.model.baseline]
    names = {ev.id: ev.model.display_name or ev.model.key for ev in evs}
    results = SnippetResult.objects.filter(evaluation_id__in=list(names))
    passed = dict(results.filter(passed=True).values_list("snippet_id").annotate(n=Count("evaluation_id", distinct=True))
                  .values_list("snippet_id", "n"))
    answered = dict(results.values_list("snippet_id").annotate(n=Count("evaluation_id", distinct=True))
                    .values_list("snippet_id", "n"))
    rows = list(Snippet.objects.filter(release=release).select_related("paper")
                .only("id", "file", "name", "weight", "depth", "paper__paper_id"))
    few = [s.id for s in rows if passed.get(s.id, 0) <= NAMED_UP_TO and passed.get(s.id, 0) > 0]
    who: dict[int, list[str]] = {}
    for snippet_id, ev_id in results.filter(passed=True, snippet_id__in=few).values_list(
            "snippet_id", "evaluation_id").distinct():
        who.setdefault(snippet_id, []).append(names[ev_id])
    snippets = sorted(
        (HardSnippet(paper=s.paper.paper_id, file=s.file, name=s.name, weight=s.weight, depth=s.depth,
                     passed_by=passed.get(s.id, 0), answered_by=answered.get(s.id, 0),
                     models=sorted(set(who.get(s.id, []))))
         for s in rows if answered.get(s.id)),
        key=lambda h: (h.passed_by, -h.weight, h.paper, h.file, h.name),
    )
    counts = Counter(h.passed_by for h in snippets)
    histogram = [(n, counts.get(n, 0)) for n in range(0, max(counts, default=-1) + 1)]
    return Hardest(release=release, models=len(evs), snippets=snippets, histogram=histogram)
