"""Finding models by name, and two or more models of a release side by side.

Figures are the evaluations' stored aggregates and per-paper totals; the per-snippet differences
read the compared evaluations' verdict rows (one query, bounded by snippets x models x samples);
the significance of each difference comes from benchmark_core.scoring (paired bootstrap over
papers, exact McNemar over snippets).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from django.db.models import Q

from benchmark_core import scoring

from catalog.models import Evaluation, Release, Snippet, SnippetResult
from catalog.ranking import evaluation_coverage, evaluation_totals, latest_per_model, public_evaluations, rate

from .caching import cached, release_version

__all__ = ["COMPARE_MAX", "Comparison", "ModelHit", "models_compare", "models_search"]

#: models one comparison shows at most (the first is the one the others are measured against)
COMPARE_MAX = 6
SEARCH_MAX = 50


@dataclass
class ModelHit:
    key: str
    name: str
    organisation: str
    releases: list[dict[str, str]]  # [{"slug", "name"}] published releases where it has public results


def models_search(*, query: str, limit: int = SEARCH_MAX) -> list[ModelHit]:
    """Models whose name, key or organisation contains ``query`` and that have public results on a
    published release (drafts and private uploads never show), best-known name first. One query."""
    query = (query or "").strip()
    if not query:
        return []
    rows = (
        Evaluation.objects.filter(is_public=True, hidden=False, release__status=Release.PUBLISHED)
        .filter(Q(model__display_name__icontains=query) | Q(model__key__icontains=query)
                | Q(model__organisation__icontains=query))
        .values_list("model__key", "model__display_name", "model__organisation", "release__slug", "release__name")
        .order_by("model__display_name", "model__key", "release__slug")
        .distinct()
    )
    hits: dict[str, ModelHit] = {}
    for key, name, organisation, slug, release_name in rows:
        hit = hits.get(key)
        if hit is None:
            if len(hits) >= limit:
                break
            hit = hits[key] = ModelHit(key=key, name=name or key, organisation=organisation, releases=[])
        if all(r["slug"] != slug for r in hit.releases):
            hit.releases.append({"slug": slug, "name": release_name})
    return list(hits.values())


@dataclass
class Comparison:
    release: Release
    models: list[dict[str, Any]]  # per model: key, name, figures, and vs the first: diff, ci, p
    papers: list[dict[str, Any]]  # per paper: paper id, [scaled % per model] (None: no verdict)
    snippets: list[dict[str, Any]]  # snippets where the models disagree: paper, file, name, [pass share]
    agreeing: int  # snippets every compared model got the same verdict on
    missing: list[str] = field(default_factory=list)  # asked-for keys without public results here
    left_out: list[str] = field(default_factory=list)  # asked-for keys beyond COMPARE_MAX: not compared


def models_compare(*, release: Release, keys: list[str], with_paper: bool = True) -> Comparison:
    """The asked-for models (at most COMPARE_MAX, in the order asked) side by side on ``release``.

    Each model after the first is compared with the first: the difference of scaled pass rates with
    a paired bootstrap interval over papers, and an exact McNemar test over snippets (sample 0).
    Queries: 3 on a cold cache, whatever the number of models.
    """
    asked = list(dict.fromkeys(k for k in keys if k))
    keys, left_out = asked[:COMPARE_MAX], asked[COMPARE_MAX:]
    comparison = cached(["compare", release_version(release), with_paper, *keys],
                        lambda: _compare(release=release, keys=keys, with_paper=with_paper))
    return replace(comparison, left_out=left_out) if left_out else comparison


def _compare(*, release: Release, keys: list[str], with_paper: bool) -> Comparison:
    found = {ev.model.key: ev for ev in latest_per_model(
        public_evaluations(release, with_paper=with_paper).filter(model__key__in=keys))}
    evs = [found[k] for k in keys if k in found]
    missing = [k for k in keys if k not in found]
    snippet_info = {
        s["id"]: s for s in Snippet.objects.filter(release=release)
        .values("id", "paper__paper_id", "file", "name", "weight").order_by("paper__paper_id", "file", "position")
    }
    verdicts: dict[int, dict[int, list[bool]]] = {ev.id: {} for ev in evs}
    for ev_id, snippet_id, sample, passed in SnippetResult.objects.filter(
            evaluation_id__in=[ev.id for ev in evs]).values_list("evaluation_id", "snippet_id", "sample", "passed"):
        verdicts[ev_id].setdefault(snippet_id, []).append((sample, passed))
    totals = [evaluation_totals(ev) for ev in evs]
    models = []
    for i, ev in enumerate(evs):
        row = {
            "key": ev.model.key, "name": ev.model.display_name or ev.model.key,
            "organisation": ev.model.organisation, "scaled_pass_rate": ev.scaled_pass_rate,
            "pass_rate": ev.pass_rate, "ci_low": ev.scaled_ci_low, "ci_high": ev.scaled_ci_high,
            "coverage": evaluation_coverage(ev), "samples": ev.samples, "source": ev.source,
        }
        if i > 0:
            diff, low, high = scoring.paired_bootstrap(totals[i], totals[0])
            first = {sid: dict(v).get(0) for sid, v in verdicts[evs[0].id].items()}
            mine = {sid: dict(v).get(0) for sid, v in verdicts[ev.id].items()}
            both = [sid for sid in first if sid in mine and first[sid] is not None and mine[sid] is not None]
            only_me = sum(1 for sid in both if mine[sid] and not first[sid])
            only_first = sum(1 for sid in both if first[sid] and not mine[sid])
            row.update(diff=diff, diff_low=low, diff_high=high,
                       significant=bool(low > 0 or high < 0), only_this=only_me, only_first=only_first,
                       mcnemar_p=scoring.mcnemar_exact(only_me, only_first), paired_snippets=len(both))
        models.append(row)
    papers = sorted({p for t in totals for p in t})
    paper_rows = [{"paper": p, "rates": [rate(*t[p][:2]) if p in t else None for t in totals]} for p in papers]
    snippets, agreeing = [], 0
    for sid, info in snippet_info.items():
        shares = []
        for ev in evs:
            got = verdicts[ev.id].get(sid)
            shares.append(100.0 * sum(1 for _, ok in got if ok) / len(got) if got else None)
        known = [s for s in shares if s is not None]
        if len(known) < 2:
            continue
        if len(set(known)) == 1 and len(known) == len(shares):
            agreeing += 1
            continue
        snippets.append({"paper": info["paper__paper_id"], "file": info["file"], "name": info["name"],
                         "weight": info["weight"], "shares": shares})
    return Comparison(release=release, models=models, papers=paper_rows, snippets=snippets,
                      agreeing=agreeing, missing=missing)
