"""Reads of the leaderboard app, for pages and the API.

Every selector reads stored aggregates (Evaluation fields written by services), never the
SnippetResult rows of a whole release, and issues a number of queries that does not grow with
the number of models. Selectors return plain dataclasses; unknown objects raise the model's
``DoesNotExist`` (views turn it into a 404).
"""
from __future__ import annotations

import datetime as dt
import difflib
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from django.core.cache import cache
from django.db.models import Count, IntegerField, Q, Sum
from django.db.models.functions import Cast

from benchmark_core import scoring

from .models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult
from .query import VIEWS, LeaderboardParams, leaderboard_params_parse

__all__ = [
    "VIEWS",
    "FEW_PAPERS",
    "LeaderboardParams",
    "evaluation_flags_pending",
    "model_visible",
    "LeaderboardRow",
    "LeaderboardTable",
    "PaperLeaderboard",
    "Heatmap",
    "ErrorCategories",
    "AblationRow",
    "ContaminationRow",
    "ModelDetail",
    "EvaluationCard",
    "PaperDetail",
    "SnippetNode",
    "SnippetDrilldown",
    "ReleaseInfo",
    "Scorability",
    "release_scorability",
    "release_tasks",
    "release_get",
    "release_get_recent",
    "release_memo_clear",
    "releases_list",
    "release_citation",
    "release_succession",
    "ReleaseSuccession",
    "leaderboard_params_parse",
    "leaderboard_rows",
    "paper_leaderboard",
    "heatmap",
    "error_categories",
    "paper_ablation",
    "contamination_per_model",
    "model_detail",
    "paper_detail",
    "snippet_drilldown",
    "snippet_masked_view",
    "evaluation_visible",
    "evaluation_outputs",
    "cached",
    "release_version",
    "tiers_fingerprint",
]

#: below this many papers in a date window the figures are flagged as unreliable
FEW_PAPERS = 5


# --------------------------------------------------------------------------- data classes
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


@dataclass
class LeaderboardRow:
    tier: int | None  # significance tier (1 = best); None when not ranked
    model_key: str
    name: str
    organisation: str
    open_weights: bool
    scaled_pass_rate: float | None  # percent
    ci_low: float | None
    ci_high: float | None
    pass_rate: float | None  # percent
    coverage: float  # percent of the release's snippets that have a result
    snippets: int  # snippets counted in this view
    ranked: bool  # complete, not a baseline, no flags awaiting review
    knowledge_cutoff: str  # as given, e.g. "2024-06"
    knowledge_cutoff_date: dt.date | None  # last day it covers
    input_cost: float | None  # USD per million tokens
    output_cost: float | None
    samples: int
    baseline: str  # "", "reference" or "empty"
    verified: bool
    source: str  # published / submission / baseline / demo
    evaluation_id: int
    with_paper: bool
    papers: int  # papers counted in this view
    # the model's figure in the release this one succeeds (None: not there, or no predecessor)
    previous_scaled_pass_rate: float | None = None
    succession: str = ""  # "rescored" / "carried" from the predecessor, "" when scored here first
    cost_per_snippet: float | None = None  # USD, measured by the run card of the evaluation
    # when the table ranks on the scorable subset of a release: the figures over the whole release
    full_scaled_pass_rate: float | None = None
    full_pass_rate: float | None = None


@dataclass
class LeaderboardTable:
    release: Release
    view: str
    rows: list[LeaderboardRow]
    papers: list[str]  # paper ids in the view
    snippets: int  # snippets in the view
    total_weight: int
    cutoff: dt.date | None = None
    date_from: dt.date | None = None
    date_to: dt.date | None = None
    with_paper: bool = True
    warning: str = ""  # set when the view leaves few papers
    messages: list[str] = field(default_factory=list)  # set by callers from leaderboard_params_parse
    organisations: list[str] = field(default_factory=list)  # every organisation (for filters)
    paper_dates: dict[str, dt.date | None] = field(default_factory=dict)  # first commit per paper of the release
    previous_release: Release | None = None  # the predecessor whose figures the rows carry
    # set when only part of the release can be scored on this site: every row is ranked on the
    # papers in ``papers`` (the scorable ones), its whole-release figure kept beside it
    scorable_subset: bool = False
    not_scorable: list[dict[str, str]] = field(default_factory=list)  # [{"paper", "reason"}]
    release_papers: int = 0  # papers of the whole release
    release_snippets: int = 0


@dataclass
class PaperLeaderboard:
    release: Release
    paper: Paper
    snippets: int
    total_weight: int
    rows: list[LeaderboardRow]  # figures on this paper only; tier None


@dataclass
class Heatmap:
    models: list[tuple[str, str]]  # (key, name), best overall first
    papers: list[str]
    values: list[list[float | None]]  # values[i][j]: scaled pass rate of models[i] on papers[j]


@dataclass
class ErrorCategories:
    categories: list[str]
    rows: list[dict[str, Any]]  # {"model_key", "name", "counts": {category: n}, "failures", "runs"}


@dataclass
class AblationRow:
    model_key: str
    name: str
    with_paper: float
    without_paper: float
    diff: float  # with minus without, percentage points
    ci_low: float
    ci_high: float


@dataclass
class ContaminationRow:
    model_key: str
    name: str
    knowledge_cutoff: str
    knowledge_cutoff_date: dt.date | None
    papers: list[str]  # papers first committed after this model's own cutoff
    snippets: int
    scaled_pass_rate: float | None  # None when no paper is left
    pass_rate: float | None
    overall_scaled_pass_rate: float | None


@dataclass
class EvaluationCard:
    """One evaluation with its reproducibility card."""

    id: int
    release_name: str
    release_slug: str
    release_hash: str
    with_paper: bool
    samples: int
    decoding: dict
    prompt_version: str
    harness_version: str
    source: str
    verified: bool
    scaled_pass_rate: float | None
    pass_rate: float | None
    ci_low: float | None
    ci_high: float | None
    scaled_std: float | None
    pass_std: float | None
    coverage: float
    categories: dict[str, int]
    per_paper: dict[str, dict[str, float]]
    pass_at_k: dict
    computed_at: dt.datetime | None
    run_date: dt.date | None = None  # the day of the run the results come from (imported ones)
    succession: dict = field(default_factory=dict)  # how it came from the previous release
    run_card: dict = field(default_factory=dict)  # what `generate` recorded (benchmark_core.generate.card_public)


@dataclass
class ModelDetail:
    model: LLMModel
    evaluations: list[EvaluationCard]  # public ones, this release first


@dataclass
class SnippetNode:
    id: int
    name: str
    file: str
    parent_id: int | None
    depth: int
    weight: int
    start_line: int | None
    end_line: int | None
    code: str
    pass_rate: float | None  # percent of public model evaluations (all samples) that passed it
    runs: int


@dataclass
class PaperDetail:
    release: Release
    paper: Paper
    folder: str  # empty when the release has no code for this paper
    content_hash: str
    snippets: list[SnippetNode]  # in file order; parent_id / depth give the tree
    total_weight: int


@dataclass
class SnippetDrilldown:
    release: Release
    paper: Paper
    snippet: Snippet
    model: LLMModel
    evaluation: Evaluation
    results: list[dict[str, Any]]  # per sample: sample, passed, category, exit_code, seconds, output_tail, completion, diff


# --------------------------------------------------------------------------- helpers
def cached(key_parts: Iterable[Any], compute, *, timeout: int = 3600):
    """Return compute() cached under a key made of key_parts (include the release data_version)."""
    raw = json.dumps([str(p) for p in key_parts])
    key = "rcb:sel:" + hashlib.sha256(raw.encode()).hexdigest()[:32]
    value = cache.get(key)
    if value is None:
        value = compute()
        cache.set(key, value, timeout)
    return value


def release_version(release: Release) -> str:
    """What a cached figure of this release depends on: changes with every write (data_version),
    and differs between two releases that happen to reuse an id (created_at)."""
    return f"{release.id}:{release.created_at.isoformat()}:{release.data_version}"


def _rate(num: float, den: float) -> float | None:
    return 100.0 * num / den if den else None


#: JSON fields a leaderboard table does not show; decoding them is most of a table's cost
_HEAVY = ("per_paper", "categories", "pass_at_k", "decoding", "run_card", "model__links", "model__metadata")


def _public_evaluations(release: Release, *, with_paper: bool | None = True, light: bool = False,
                        keep: tuple[str, ...] = ()):
    """Public, not hidden evaluations of a release with their models. ``light`` leaves out the heavy
    JSON fields (and paper_totals, unless named in ``keep``): do not read them from such rows."""
    qs = Evaluation.objects.filter(release=release, is_public=True, hidden=False).select_related("model")
    if with_paper is not None:
        qs = qs.filter(with_paper=with_paper)
    if light:
        qs = qs.defer(*(f for f in (*_HEAVY, "paper_totals") if f not in keep))
    return qs.order_by("created_at", "id")


def _latest_per_model(evaluations: Iterable[Evaluation]) -> list[Evaluation]:
    """One evaluation per model: the latest wins (ordered by creation)."""
    chosen: dict[int, Evaluation] = {}
    for ev in evaluations:
        chosen[ev.model_id] = ev
    return list(chosen.values())


def _coverage(ev: Evaluation) -> float:
    return 100.0 * ev.snippets_covered / ev.snippets_total if ev.snippets_total else 0.0


def evaluation_flags_pending(ev: Evaluation) -> bool:
    """The engine flagged some of its results and no reviewer has cleared them yet."""
    return bool(ev.flagged_results) and ev.flags_cleared_at is None


def _is_ranked(ev: Evaluation) -> bool:
    return (
        not ev.model.baseline and ev.complete and ev.scaled_pass_rate is not None and not evaluation_flags_pending(ev)
    )


def _totals(ev: Evaluation, papers: Iterable[str] | None = None) -> dict[str, tuple[float, ...]]:
    """The stored per-paper totals of an evaluation, optionally only some papers."""
    stored = ev.paper_totals or {}
    if papers is None:
        return {p: tuple(v) for p, v in stored.items()}
    return {p: tuple(stored[p]) for p in papers if p in stored}


def _row(ev: Evaluation, *, tier: int | None, ranked: bool, figures: Mapping[str, Any] | None = None) -> LeaderboardRow:
    m = ev.model
    f = figures or {}
    return LeaderboardRow(
        tier=tier,
        model_key=m.key,
        name=m.display_name,
        organisation=m.organisation,
        open_weights=m.open_weights,
        scaled_pass_rate=f.get("scaled_pass_rate", ev.scaled_pass_rate),
        ci_low=f.get("ci_low", ev.scaled_ci_low),
        ci_high=f.get("ci_high", ev.scaled_ci_high),
        pass_rate=f.get("pass_rate", ev.pass_rate),
        coverage=_coverage(ev),
        snippets=f.get("snippets", ev.snippets_total),
        ranked=ranked,
        knowledge_cutoff=m.knowledge_cutoff,
        knowledge_cutoff_date=m.knowledge_cutoff_date,
        input_cost=m.input_cost,
        output_cost=m.output_cost,
        cost_per_snippet=ev.cost_per_snippet,
        samples=ev.samples,
        baseline=m.baseline,
        verified=ev.verified,
        source=ev.source,
        evaluation_id=ev.id,
        with_paper=ev.with_paper,
        papers=f["papers"] if "papers" in f else len(ev.paper_totals or {}),
    )


def _sort_rows(rows: list[LeaderboardRow]) -> list[LeaderboardRow]:
    return sorted(rows, key=lambda r: (r.scaled_pass_rate is None, -(r.scaled_pass_rate or 0.0), r.name.lower()))


def tiers_key(with_paper: bool) -> str:
    return "with_paper" if with_paper else "without_paper"


def tiers_fingerprint(evaluations: Iterable[Evaluation]) -> str:
    """What the tiers of these ranked evaluations depend on: which evaluation and when it was computed."""
    parts = sorted(f"{ev.model.key}|{ev.id}|{ev.computed_at.isoformat() if ev.computed_at else ''}" for ev in evaluations)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def _stored_tiers(release: Release, with_paper: bool, ranked: list[Evaluation]) -> dict[str, int] | None:
    """Tiers stored by services.release_tiers_refresh, when computed from exactly these evaluations."""
    entry = (release.tiers or {}).get(tiers_key(with_paper))
    if not entry or entry.get("fingerprint") != tiers_fingerprint(ranked):
        return None
    return entry.get("tiers") or {}


# --------------------------------------------------------------------------- releases
def release_get(*, slug: str | None = None) -> Release:
    """The release with this slug; with None the default one (else the newest published, else any).

    Raises Release.DoesNotExist when there is none.
    """
    if slug:
        return Release.objects.get(slug=slug)
    release = (
        Release.objects.filter(is_default=True).first()
        or Release.objects.filter(status=Release.PUBLISHED).order_by("-release_date", "-published_at", "-created_at").first()
        or Release.objects.order_by("-created_at").first()
    )
    if release is None:
        raise Release.DoesNotExist("no release yet")
    return release


#: per-process memo of release lookups for the hot API path: {slug or None: (time, release)}
_RELEASE_MEMO: dict[str | None, tuple[float, Release]] = {}
RELEASE_MEMO_SECONDS = 2.0


def release_memo_clear() -> None:
    """Forget memoized releases (writes in this process call it; other processes wait out the TTL)."""
    _RELEASE_MEMO.clear()


def release_get_recent(*, slug: str | None = None, max_age: float = RELEASE_MEMO_SECONDS) -> Release:
    """release_get, memoized in this process for ``max_age`` seconds.

    For the API's cached responses: a hit then costs no query at all. A write made by another
    process (a scoring worker) shows after at most ``max_age`` seconds.
    """
    now = time.monotonic()
    hit = _RELEASE_MEMO.get(slug)
    if hit is not None and now - hit[0] < max_age:
        return hit[1]
    release = release_get(slug=slug)
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
        .defer(*_HEAVY).order_by("model__display_name", "id")
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
    from .references import BENCHMARK, benchmark_bibtex

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


def releases_list() -> list[ReleaseInfo]:
    """Every release with its counts and what can be scored here, newest first (4 queries whatever
    the number of releases)."""
    releases = list(Release.objects.order_by("-release_date", "-created_at"))
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
        )
        for r in releases
    ]


# --------------------------------------------------------------------------- the leaderboards
def _window_papers(
    paper_dates: Mapping[str, dt.date | None],
    *,
    cutoff: dt.date | None,
    date_from: dt.date | None,
    date_to: dt.date | None,
) -> list[str]:
    """Papers whose first commit is after cutoff, on/after date_from and on/before date_to."""
    out = []
    for pid, first in paper_dates.items():
        if first is None:
            continue
        if cutoff is not None and not first > cutoff:
            continue
        if date_from is not None and first < date_from:
            continue
        if date_to is not None and first > date_to:
            continue
        out.append(pid)
    return sorted(out)


def _window_figures(
    ev: Evaluation, papers: list[str], release_papers: Mapping[str, ReleasePaper], interval: tuple[float, float] | None
) -> dict:
    totals = _totals(ev, papers)
    pw = sum(v[0] for v in totals.values())
    tw = sum(v[1] for v in totals.values())
    ps = sum(v[2] for v in totals.values())
    n = sum(v[3] for v in totals.values())
    lo, hi = interval if interval else (None, None)
    return {
        "scaled_pass_rate": _rate(pw, tw),
        "pass_rate": _rate(ps, n),
        "ci_low": lo,
        "ci_high": hi,
        "snippets": sum(release_papers[p].snippet_count for p in papers if p in release_papers),
        "papers": len(papers),
    }


def leaderboard_rows(
    *,
    release: Release,
    view: str = "overall",
    cutoff: dt.date | None = None,
    date_from: dt.date | None = None,
    date_to: dt.date | None = None,
    open_weights: bool | None = None,
    organisation: str | None = None,
    with_paper: bool = True,
) -> LeaderboardTable:
    """The leaderboard of a release: one row per model (its latest public evaluation), best first.

    view "overall": stored figures and stored significance tiers over all papers.
    view "contamination_safe": only papers first committed after ``cutoff`` (default: the latest
    knowledge cutoff among ranked models) and inside [date_from, date_to]; figures, intervals and
    tiers come from the stored per-paper totals. Filters (open_weights, organisation) hide rows
    but do not change tiers. Rows that are baselines or miss snippets are shown but not ranked.
    When only part of the release can be scored on this site (papers without their code, or whose
    environment fails: release_scorability), both views keep to the scorable papers: every model,
    published ones from their per-paper totals, is ranked on that subset (complete when it covers
    the subset) and keeps its whole-release figure beside it (``full_*``).
    Raises ValueError for an unknown view. Queries: 2, whatever the number of models.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}")
    release_papers = {
        rp.paper.paper_id: rp for rp in ReleasePaper.objects.filter(release=release).select_related("paper")
    }
    paper_dates = {pid: rp.paper.first_commit_date for pid, rp in release_papers.items()}
    overall = view == "overall"
    scorability = _scorability(release_papers.values())
    subset = scorability.partial
    evaluations = _latest_per_model(
        _public_evaluations(release, with_paper=with_paper, light=True,
                            keep=() if overall and not subset else ("paper_totals",))
    )
    organisations = sorted({ev.model.organisation for ev in evaluations if ev.model.organisation})

    def is_ranked(ev: Evaluation) -> bool:
        if not subset:
            return _is_ranked(ev)
        # complete on the subset: results for as many snippets as the scorable papers have
        return (not ev.model.baseline and ev.scaled_pass_rate is not None and not evaluation_flags_pending(ev)
                and ev.snippets_covered >= scorability.snippets)

    ranked_evs = [ev for ev in evaluations if is_ranked(ev)]
    warning = ""

    if subset and overall:
        papers = scorability.scorable
        intervals, tiers = scoring.bootstrap_table(
            {ev.model.key: _totals(ev, papers) for ev in evaluations}, papers,
            ranked={ev.model.key for ev in ranked_evs},
        )
        figures = {ev.id: _window_figures(ev, papers, release_papers, intervals.get(ev.model.key)) for ev in evaluations}
    elif overall:
        papers = sorted(release_papers)
        # missing snippets count as failed, so every row is over all the release's papers
        figures = {ev.id: {"papers": len(papers)} for ev in evaluations}
        tiers = _stored_tiers(release, with_paper, ranked_evs)
        if tiers is None:
            # stale (an evaluation was published, hidden or re-scored without a tiers refresh):
            # the same method, vectorized, from the stored per-paper totals (one more query)
            stored = dict(Evaluation.objects.filter(id__in=[ev.id for ev in ranked_evs]).values_list("id", "paper_totals"))
            _, tiers = scoring.bootstrap_table(
                {ev.model.key: {p: tuple(v) for p, v in (stored.get(ev.id) or {}).items()} for ev in ranked_evs},
                papers, ranked={ev.model.key for ev in ranked_evs},
            )
    else:
        if cutoff is None and date_from is None and date_to is None:
            dates = [ev.model.knowledge_cutoff_date for ev in ranked_evs if ev.model.knowledge_cutoff_date]
            cutoff = max(dates) if dates else None
        papers = _window_papers(paper_dates, cutoff=cutoff, date_from=date_from, date_to=date_to)
        if subset:
            papers = [p for p in papers if p in set(scorability.scorable)]
        intervals, tiers = scoring.bootstrap_table(
            {ev.model.key: _totals(ev, papers) for ev in evaluations}, papers,
            ranked={ev.model.key for ev in ranked_evs},
        )
        figures = {ev.id: _window_figures(ev, papers, release_papers, intervals.get(ev.model.key)) for ev in evaluations}
        if not papers:
            warning = "No paper is left in this window: widen it or move the cutoff earlier."
        elif len(papers) < FEW_PAPERS:
            warning = f"Only {len(papers)} paper(s) remain in this window: the figures are very uncertain."

    rows = []
    for ev in evaluations:
        m = ev.model
        if open_weights is not None and m.open_weights != open_weights:
            continue
        if organisation and m.organisation.lower() != organisation.lower():
            continue
        ranked = is_ranked(ev)
        rows.append(_row(ev, tier=tiers.get(m.key) if ranked else None, ranked=ranked, figures=figures.get(ev.id)))
        if subset:
            rows[-1].full_scaled_pass_rate, rows[-1].full_pass_rate = ev.scaled_pass_rate, ev.pass_rate
    previous = _previous_figures(release, with_paper=with_paper) if overall else {}
    succession = {ev.model.key: (ev.succession or {}).get("mode", "") for ev in evaluations}
    for row in rows:
        row.previous_scaled_pass_rate = previous.get(row.model_key)
        row.succession = succession[row.model_key]
    snippets = sum(release_papers[p].snippet_count for p in papers)
    total_weight = sum(release_papers[p].total_weight for p in papers)
    return LeaderboardTable(
        previous_release=release.predecessor if release.predecessor_id else None,
        release=release,
        view=view,
        rows=_sort_rows(rows),
        papers=papers,
        snippets=snippets,
        total_weight=total_weight,
        cutoff=cutoff,
        date_from=date_from,
        date_to=date_to,
        with_paper=with_paper,
        warning=warning,
        organisations=organisations,
        paper_dates=dict(sorted(paper_dates.items())),
        scorable_subset=subset,
        not_scorable=scorability.not_scorable if subset else [],
        release_papers=len(release_papers),
        release_snippets=sum(rp.snippet_count for rp in release_papers.values()),
    )


def _previous_figures(release: Release, *, with_paper: bool) -> dict[str, float | None]:
    """Each model's scaled pass rate in the release's predecessor (one query; none without one)."""
    if not release.predecessor_id:
        return {}
    rows = (Evaluation.objects.filter(release_id=release.predecessor_id, is_public=True, hidden=False,
                                      with_paper=with_paper)
            .order_by("created_at", "id").values_list("model__key", "scaled_pass_rate"))
    return dict(rows)  # the latest per model wins, as on the leaderboard


def _release_paper(release: Release, paper_id: str) -> ReleasePaper:
    """Raises Paper.DoesNotExist when the paper is not in the release."""
    try:
        return ReleasePaper.objects.select_related("paper").get(release=release, paper__paper_id=paper_id)
    except ReleasePaper.DoesNotExist:
        raise Paper.DoesNotExist(f"no paper {paper_id!r} in release {release.name}") from None


def paper_leaderboard(*, release: Release, paper_id: str, with_paper: bool = True) -> PaperLeaderboard:
    """Every model's figures on one paper of a release, best first. Raises Paper.DoesNotExist."""
    rp = _release_paper(release, paper_id)
    rows = []
    evaluations = _public_evaluations(release, with_paper=with_paper, light=True, keep=("per_paper", "paper_totals"))
    for ev in _latest_per_model(evaluations):
        stats = (ev.per_paper or {}).get(paper_id)
        totals = (ev.paper_totals or {}).get(paper_id)
        figures = {
            "scaled_pass_rate": stats["scaled_pass_rate"] if stats else None,
            "pass_rate": stats["pass_rate"] if stats else None,
            "ci_low": None,
            "ci_high": None,
            "snippets": rp.snippet_count,
            "papers": 1 if totals else 0,
        }
        rows.append(_row(ev, tier=None, ranked=_is_ranked(ev), figures=figures))
    return PaperLeaderboard(
        release=release, paper=rp.paper, snippets=rp.snippet_count, total_weight=rp.total_weight, rows=_sort_rows(rows)
    )


def heatmap(*, release: Release, with_paper: bool = True) -> Heatmap:
    """Scaled pass rate of each model (rows, best overall first) on each paper (columns)."""
    table = leaderboard_rows(release=release, with_paper=with_paper)
    evs = {
        ev.id: ev
        for ev in _latest_per_model(_public_evaluations(release, with_paper=with_paper, light=True, keep=("per_paper",)))
    }
    values = []
    for row in table.rows:
        per_paper = evs[row.evaluation_id].per_paper or {}
        values.append([per_paper[p]["scaled_pass_rate"] if p in per_paper else None for p in table.papers])
    return Heatmap(models=[(r.model_key, r.name) for r in table.rows], papers=table.papers, values=values)


def error_categories(*, release: Release, with_paper: bool = True) -> ErrorCategories:
    """Failures per category for each model (baselines excluded), best model first."""
    evs = [
        ev
        for ev in _latest_per_model(_public_evaluations(release, with_paper=with_paper, light=True, keep=("categories",)))
        if not ev.model.baseline
    ]
    evs.sort(key=lambda ev: (-(ev.scaled_pass_rate or 0.0), ev.model.display_name.lower()))
    categories = sorted({c for ev in evs for c in (ev.categories or {})})
    rows = []
    for ev in evs:
        counts = {c: int((ev.categories or {}).get(c, 0)) for c in categories}
        rows.append(
            {
                "model_key": ev.model.key,
                "name": ev.model.display_name,
                "counts": counts,
                "failures": sum(counts.values()),
                "runs": ev.snippets_total * max(ev.samples, 1),
            }
        )
    return ErrorCategories(categories=categories, rows=rows)


def paper_ablation(*, release: Release) -> list[AblationRow]:
    """With-paper minus without-paper scaled pass rate (paired bootstrap over papers) per model having both."""

    def compute() -> list[AblationRow]:
        with_ev = {ev.model_id: ev for ev in _latest_per_model(
            _public_evaluations(release, with_paper=True, light=True, keep=("paper_totals",)))}
        without = {ev.model_id: ev for ev in _latest_per_model(
            _public_evaluations(release, with_paper=False, light=True, keep=("paper_totals",)))}
        pairs = [(with_ev[m], without[m]) for m in set(with_ev) & set(without) if not with_ev[m].model.baseline]
        papers = sorted({p for a, b in pairs for p in set(a.paper_totals or {}) & set(b.paper_totals or {})})
        if not pairs or not papers:
            return []

        def totals(ev: Evaluation) -> dict[str, tuple[float, ...]]:
            stored = ev.paper_totals or {}
            return {p: tuple(stored[p]) if p in stored else (0.0, 0.0) for p in papers}

        rows = []
        for a, b in pairs:
            # paired: both prompt variants resampled with the same papers
            diff, lo, hi = scoring.paired_bootstrap(totals(a), totals(b))
            rows.append(
                AblationRow(
                    model_key=a.model.key,
                    name=a.model.display_name,
                    with_paper=a.scaled_pass_rate or 0.0,
                    without_paper=b.scaled_pass_rate or 0.0,
                    diff=diff,
                    ci_low=lo,
                    ci_high=hi,
                )
            )
        return sorted(rows, key=lambda r: (-r.diff, r.name.lower()))

    return cached(("ablation", release_version(release)), compute)


def contamination_per_model(*, release: Release, with_paper: bool = True) -> list[ContaminationRow]:
    """Each model's figures on the papers first committed after ITS OWN knowledge cutoff, best first.

    Models without a known cutoff get no papers (None figures). Baselines are excluded.
    """
    release_papers = {
        rp.paper.paper_id: rp for rp in ReleasePaper.objects.filter(release=release).select_related("paper")
    }
    paper_dates = {pid: rp.paper.first_commit_date for pid, rp in release_papers.items()}
    rows = []
    for ev in _latest_per_model(_public_evaluations(release, with_paper=with_paper, light=True, keep=("paper_totals",))):
        m = ev.model
        if m.baseline:
            continue
        cutoff = m.knowledge_cutoff_date
        papers = _window_papers(paper_dates, cutoff=cutoff, date_from=None, date_to=None) if cutoff else []
        totals = _totals(ev, papers)
        rows.append(
            ContaminationRow(
                model_key=m.key,
                name=m.display_name,
                knowledge_cutoff=m.knowledge_cutoff,
                knowledge_cutoff_date=cutoff,
                papers=papers,
                snippets=sum(release_papers[p].snippet_count for p in papers),
                scaled_pass_rate=_rate(sum(v[0] for v in totals.values()), sum(v[1] for v in totals.values())),
                pass_rate=_rate(sum(v[2] for v in totals.values()), sum(v[3] for v in totals.values())),
                overall_scaled_pass_rate=ev.scaled_pass_rate,
            )
        )
    return sorted(rows, key=lambda r: (r.scaled_pass_rate is None, -(r.scaled_pass_rate or 0.0), r.name.lower()))


# --------------------------------------------------------------------------- detail pages
def _card(ev: Evaluation) -> EvaluationCard:
    return EvaluationCard(
        id=ev.id,
        release_name=ev.release.name,
        release_slug=ev.release.slug,
        release_hash=ev.release.content_hash,
        with_paper=ev.with_paper,
        samples=ev.samples,
        decoding=ev.decoding or {},
        prompt_version=ev.prompt_version,
        harness_version=ev.harness_version,
        source=ev.source,
        verified=ev.verified,
        scaled_pass_rate=ev.scaled_pass_rate,
        pass_rate=ev.pass_rate,
        ci_low=ev.scaled_ci_low,
        ci_high=ev.scaled_ci_high,
        scaled_std=ev.scaled_std,
        pass_std=ev.pass_std,
        coverage=_coverage(ev),
        categories=ev.categories or {},
        per_paper=ev.per_paper or {},
        pass_at_k=ev.pass_at_k or {},
        computed_at=ev.computed_at,
        run_date=ev.run_date,
        succession=ev.succession or {},
        run_card=ev.run_card or {},
    )


def model_visible(*, model: LLMModel, viewer: Any = None) -> bool:
    """Whether ``viewer`` may know the model exists: a model that only uploads made and none of
    them is public belongs to its uploaders (and staff); every other model is public."""
    if Evaluation.objects.filter(model=model, is_public=True).exists():
        return True
    owners = set(model.submissions.values_list("user_id", flat=True))
    if not owners:
        return True  # loaded by the site itself (published results, baselines, demo)
    return bool(viewer is not None and viewer.is_authenticated and (viewer.is_staff or viewer.pk in owners))


def model_detail(*, key: str, release: Release | None = None, viewer: Any = None) -> ModelDetail:
    """A model and its public evaluations (those of ``release`` first). Raises LLMModel.DoesNotExist,
    also for a private model ``viewer`` may not see (its key must not tell that it exists)."""
    model = LLMModel.objects.get(key=key)
    if not model_visible(model=model, viewer=viewer):
        raise LLMModel.DoesNotExist(f"no model {key!r}")
    evs = list(
        Evaluation.objects.filter(model=model, is_public=True, hidden=False)
        .select_related("release")
        .order_by("-created_at", "-id")
    )
    if release is not None:
        evs.sort(key=lambda ev: ev.release_id != release.id)
    return ModelDetail(model=model, evaluations=[_card(ev) for ev in evs])


def paper_detail(*, release: Release, paper_id: str) -> PaperDetail:
    """A paper of a release: metadata, snippet tree with each snippet's pass rate across public
    model evaluations (baselines excluded). Raises Paper.DoesNotExist. Queries: 3 (2 when cached)."""
    rp = _release_paper(release, paper_id)
    snippets = list(Snippet.objects.filter(release=release, paper=rp.paper).order_by("file", "position", "id"))

    def snippet_stats() -> dict[int, dict[str, Any]]:
        rows = (
            SnippetResult.objects.filter(
                snippet__release=release,
                snippet__paper=rp.paper,
                evaluation__is_public=True,
                evaluation__hidden=False,
                evaluation__with_paper=True,
                evaluation__model__baseline="",
            )
            .values("snippet_id")
            .annotate(runs=Count("id"), passed=Sum(Cast("passed", IntegerField())))
        )
        return {r["snippet_id"]: r for r in rows}

    # the one aggregate over result rows a page needs: cached until the release changes
    stats = cached(("snippet-stats", release_version(release), paper_id), snippet_stats)
    nodes = []
    for s in snippets:
        st = stats.get(s.id)
        nodes.append(
            SnippetNode(
                id=s.id,
                name=s.name,
                file=s.file,
                parent_id=s.parent_id,
                depth=s.depth,
                weight=s.weight,
                start_line=s.start_line,
                end_line=s.end_line,
                code=s.code,
                pass_rate=_rate(st["passed"] or 0, st["runs"]) if st else None,
                runs=st["runs"] if st else 0,
            )
        )
    return PaperDetail(
        release=release,
        paper=rp.paper,
        folder=rp.folder,
        content_hash=rp.content_hash,
        snippets=nodes,
        total_weight=rp.total_weight,
    )


def _snippet(release: Release, paper_id: str, snippet: str, file: str | None) -> Snippet:
    qs = Snippet.objects.filter(release=release, paper__paper_id=paper_id, name=snippet).select_related("paper")
    if file:
        qs = qs.filter(file=file)
    found = list(qs[:2])
    if len(found) != 1:
        raise Snippet.DoesNotExist(f"no single snippet {snippet!r} in {paper_id}")
    return found[0]


def snippet_drilldown(
    *, release: Release, paper_id: str, snippet: str, model_key: str, file: str | None = None, with_paper: bool = True,
    evaluation: Evaluation | None = None,
) -> SnippetDrilldown:
    """One model's results on one snippet: per sample verdict, category, test output, completion and
    a unified diff against the reference code. Raises Snippet.DoesNotExist / LLMModel.DoesNotExist /
    Evaluation.DoesNotExist (no public evaluation of that model on the release).

    ``evaluation`` (one the caller may see, e.g. from evaluation_visible: an owner's private one)
    replaces the model's latest public evaluation."""
    snip = _snippet(release, paper_id, snippet, file)
    if evaluation is not None:
        if evaluation.release_id != release.pk:
            raise Evaluation.DoesNotExist(f"evaluation {evaluation.pk} is not on {release.name}")
        model, evs = evaluation.model, [evaluation]
    else:
        model = LLMModel.objects.get(key=model_key)
        evs = _latest_per_model(
            Evaluation.objects.filter(release=release, model=model, is_public=True, hidden=False, with_paper=with_paper)
            .select_related("model")
            .order_by("created_at", "id")
        )
    if not evs:
        raise Evaluation.DoesNotExist(f"no public evaluation of {model_key} on {release.name}")
    ev = evs[0]
    reference = snip.code.splitlines()
    results = []
    for r in SnippetResult.objects.filter(evaluation=ev, snippet=snip).order_by("sample"):
        diff = ""
        if r.completion:
            diff = "\n".join(
                difflib.unified_diff(reference, r.completion.splitlines(), "reference", model.display_name, lineterm="")
            )
        results.append(
            {
                "sample": r.sample,
                "passed": r.passed,
                "category": r.category,
                "exit_code": r.exit_code,
                "seconds": r.seconds,
                "output_tail": r.output_tail,
                "completion": r.completion,
                "diff": diff,
            }
        )
    return SnippetDrilldown(release=release, paper=snip.paper, snippet=snip, model=model, evaluation=ev, results=results)


def evaluation_visible(*, evaluation_id: int, user: Any = None) -> Evaluation:
    """A public, not hidden evaluation, or one of ``user``'s own (staff: any). Raises Evaluation.DoesNotExist."""
    ev = Evaluation.objects.select_related("model", "release").defer(*_HEAVY).get(pk=evaluation_id)
    if ev.is_public and not ev.hidden:
        return ev
    owner = getattr(getattr(ev, "submission", None), "user_id", None)
    if user is not None and user.is_authenticated and (user.is_staff or (owner is not None and owner == user.pk)):
        return ev
    raise Evaluation.DoesNotExist(f"no public evaluation {evaluation_id}")


def evaluation_outputs(*, evaluation: Evaluation) -> Iterable[dict[str, Any]]:
    """Every stored result of an evaluation, one dict per snippet and sample, in release order (streamed)."""
    rows = (
        SnippetResult.objects.filter(evaluation=evaluation)
        .order_by("snippet__paper__paper_id", "snippet__position", "snippet_id", "sample")
        .values_list("snippet__paper__paper_id", "snippet__file", "snippet__name", "snippet__weight", "sample",
                     "passed", "category", "exit_code", "seconds", "completion", "output_tail")
    )
    for paper, file, name, weight, sample, passed, category, exit_code, seconds, completion, output in rows.iterator(
        chunk_size=500
    ):
        yield {"paper": paper, "file": file, "snippet": name, "weight": weight, "sample": sample, "passed": passed,
               "category": category or None, "exit_code": exit_code, "seconds": seconds, "completion": completion,
               "test_output": output}


def snippet_masked_view(*, release: Release, paper_id: str, snippet: str, file: str | None = None) -> str | None:
    """The annotated file as the model saw it (snippet masked, other tags removed); None without code."""
    from benchmark_core.annotation import parse_annotations
    from benchmark_core.masking import masked_file

    snip = _snippet(release, paper_id, snippet, file)
    rp = ReleasePaper.objects.filter(release=release, paper=snip.paper).first()
    if rp is None or not rp.folder or not snip.file:
        return None
    path = Path(rp.folder) / snip.file
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return None
    parsed = parse_annotations(text, snip.file)
    try:
        core_snippet = parsed.snippet(snip.name)
    except KeyError:
        return None
    return masked_file(parsed.lines, core_snippet)


# --------------------------------------------------------------------------- what can be scored here
@dataclass(frozen=True)
class Scorability:
    """Which papers of a release this site can score now, and why the others cannot."""

    scorable: list[str]  # paper ids, sorted
    not_scorable: list[dict[str, str]]  # [{"paper", "reason"}], sorted by paper
    snippets: int  # snippets of the scorable papers
    total_weight: int

    @property
    def partial(self) -> bool:
        """Some papers cannot be scored here (but at least one can)."""
        return bool(self.scorable) and bool(self.not_scorable)


def _scorability(release_papers: Iterable[ReleasePaper]) -> Scorability:
    scorable, not_scorable, snippets, weight = [], [], 0, 0
    for rp in sorted(release_papers, key=lambda r: r.paper.paper_id):
        pid = rp.paper.paper_id
        if not rp.folder:
            not_scorable.append({"paper": pid, "reason": "its code is not attached on this site"})
        elif rp.environment_ok is False:
            not_scorable.append({"paper": pid, "reason": f"its reference code fails in environment "
                                 f"{rp.environment or 'default'}: {rp.environment_error[:300]}"})
        else:
            scorable.append(pid)
            snippets += rp.snippet_count
            weight += rp.total_weight
    return Scorability(scorable=scorable, not_scorable=not_scorable, snippets=snippets, total_weight=weight)


def release_scorability(*, release: Release, release_papers: Iterable[ReleasePaper] | None = None) -> Scorability:
    """Papers with their code here whose environment is not known to fail are scorable (1 query;
    none when the caller passes the release's ReleasePaper rows, with their papers)."""
    if release_papers is None:
        release_papers = ReleasePaper.objects.filter(release=release).select_related("paper")
    return _scorability(release_papers)


def release_tasks(*, release: Release, with_paper: bool = True) -> Iterable[dict[str, Any]]:
    """The tasks of the release's papers that have their code here, as ``python -m benchmark_core
    tasks`` writes them (one dict per snippet, in the problem set's order)."""
    from benchmark_core.masking import task_record
    from benchmark_core.problemset import load_problemset

    roots: dict[Path, list[str]] = {}
    for folder in ReleasePaper.objects.filter(release=release).exclude(folder="").values_list("folder", flat=True):
        roots.setdefault(Path(folder).parent, []).append(Path(folder).name)
    for root, ids in roots.items():
        # the release folder is a problem set: its papers.yaml gives the entries and the order
        for paper, snip in load_problemset(root, papers=ids).snippets:
            yield task_record(paper, snip, with_paper=with_paper)
