"""The tables of a release: one row per model (its latest public evaluation), best first.

The overall and contamination-safe leaderboards (``leaderboard_rows``), a paper's board, the model x
paper heatmap, failures by category, the with/without-paper ablation and each model after its own
knowledge cutoff. Figures come from the evaluations' stored aggregates and per-paper totals; tiers
and intervals that are not stored (a date window, a scorable subset, stale stored tiers) and the
ablation's paired interval are computed by benchmark_core.scoring, the one bootstrap.
"""
from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any, Mapping

from benchmark_core import scoring
from benchmark_core.errors import CATEGORIES

from catalog.models import Evaluation, Paper, Release, ReleasePaper
from catalog.ranking import (
    Scorability,
    evaluation_coverage,
    evaluation_missing_on,
    evaluation_totals,
    latest_per_model,
    public_evaluations,
    rate,
    release_scorability,
    scorable_unranked_reason,
    stored_tiers,
)

from ..query import VIEWS
from .caching import cached, release_version

__all__ = [
    "FEW_PAPERS",
    "AblationRow",
    "ContaminationRow",
    "ErrorCategories",
    "Heatmap",
    "LeaderboardRow",
    "LeaderboardTable",
    "PaperLeaderboard",
    "CostPoint",
    "LISTED_TOKENS",
    "contamination_per_model",
    "cost_vs_score",
    "error_categories",
    "heatmap",
    "leaderboard_rows",
    "paper_ablation",
    "paper_leaderboard",
]


#: below this many papers in a date window the figures are flagged as unreliable
FEW_PAPERS = 5


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
    unranked_reason: str  # why not ranked ("" when ranked): catalog.ranking.evaluation_unranked_reason
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
    run_here: bool = False  # the Hub asked the model's endpoint itself (submissions.runs)
    cost_per_snippet: float | None = None  # USD, measured by the run card of the evaluation
    # when the table ranks on the scorable subset of a release: the figures over the whole release
    full_scaled_pass_rate: float | None = None
    full_pass_rate: float | None = None
    # on a scorable subset: not one verdict on its papers (no figure there, shown apart, not ranked)
    no_verdict: bool = False


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

    @property
    def apart(self) -> list[LeaderboardRow]:
        """Rows without a verdict on the scorable subset: shown apart from the board, with the reason."""
        return [r for r in self.rows if r.no_verdict]

    @property
    def board(self) -> list[LeaderboardRow]:
        """The rows of the board itself (ranked or not), the ``apart`` ones left out."""
        return [r for r in self.rows if not r.no_verdict]


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


def _row(ev: Evaluation, *, tier: int | None, unranked_reason: str,
         figures: Mapping[str, Any] | None = None) -> LeaderboardRow:
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
        coverage=evaluation_coverage(ev),
        snippets=f.get("snippets", ev.snippets_total),
        ranked=not unranked_reason,
        unranked_reason=unranked_reason,
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
    totals = evaluation_totals(ev, papers)
    pw = sum(v[0] for v in totals.values())
    tw = sum(v[1] for v in totals.values())
    ps = sum(v[2] for v in totals.values())
    n = sum(v[3] for v in totals.values())
    lo, hi = interval if interval else (None, None)
    return {
        "scaled_pass_rate": rate(pw, tw),
        "pass_rate": rate(ps, n),
        "ci_low": lo,
        "ci_high": hi,
        "snippets": sum(release_papers[p].snippet_count for p in papers if p in release_papers),
        "papers": len(papers),
    }


def _subset_figures(
    evaluations: list[Evaluation], ranked_evs: list[Evaluation], papers: list[str],
    release_papers: Mapping[str, ReleasePaper],
) -> tuple[dict[int, dict], dict[str, int]]:
    """Figures (by evaluation id) and tiers over some papers, from the stored per-paper totals:
    intervals and tiers by benchmark_core.scoring.bootstrap_table."""
    intervals, tiers = scoring.bootstrap_table(
        {ev.model.key: evaluation_totals(ev, papers) for ev in evaluations}, papers,
        ranked={ev.model.key for ev in ranked_evs},
    )
    figures = {ev.id: _window_figures(ev, papers, release_papers, intervals.get(ev.model.key)) for ev in evaluations}
    return figures, tiers


def _overall_figures(
    release: Release, *, with_paper: bool, evaluations: list[Evaluation], ranked_evs: list[Evaluation],
    papers: list[str],
) -> tuple[dict[int, dict], dict[str, int]]:
    """Figures and tiers of the overall view over the whole release: the stored ones (the tiers
    computed again from the stored per-paper totals when the stored ones are stale)."""
    # missing snippets count as failed, so every row is over all the release's papers
    figures = {ev.id: {"papers": len(papers)} for ev in evaluations}
    tiers = stored_tiers(release, with_paper, ranked_evs)
    if tiers is None:
        # stale (an evaluation was published, hidden or re-scored without a tiers refresh):
        # the same method, vectorized, from the stored per-paper totals (one more query)
        stored = dict(Evaluation.objects.filter(id__in=[ev.id for ev in ranked_evs]).values_list("id", "paper_totals"))
        _, tiers = scoring.bootstrap_table(
            {ev.model.key: {p: tuple(v) for p, v in (stored.get(ev.id) or {}).items()} for ev in ranked_evs},
            papers, ranked={ev.model.key for ev in ranked_evs},
        )
    return figures, tiers


def _window(
    paper_dates: Mapping[str, dt.date | None], *, ranked_evs: list[Evaluation], scorability: Scorability,
    cutoff: dt.date | None, date_from: dt.date | None, date_to: dt.date | None,
) -> tuple[list[str], dt.date | None, str]:
    """The contamination-safe view's papers (first committed after the cutoff, inside the dates,
    scorable), the cutoff (default: the latest knowledge cutoff of the ranked models when no bound
    is given) and the warning when none or few papers are left."""
    if cutoff is None and date_from is None and date_to is None:
        dates = [ev.model.knowledge_cutoff_date for ev in ranked_evs if ev.model.knowledge_cutoff_date]
        cutoff = max(dates) if dates else None
    papers = _window_papers(paper_dates, cutoff=cutoff, date_from=date_from, date_to=date_to)
    if scorability.partial:
        papers = [p for p in papers if p in set(scorability.scorable)]
    warning = ""
    if not papers:
        warning = "No paper is left in this window: widen it or move the cutoff earlier."
    elif len(papers) < FEW_PAPERS:
        warning = f"Only {len(papers)} paper(s) remain in this window: the figures are very uncertain."
    return papers, cutoff, warning


_NO_FIGURES = {"scaled_pass_rate": None, "pass_rate": None, "ci_low": None, "ci_high": None}


def _board_rows(
    evaluations: list[Evaluation], *, scorability: Scorability, figures: Mapping[int, dict], tiers: Mapping[str, int],
    open_weights: bool | None, organisation: str | None, run_here: bool | None = None,
) -> list[LeaderboardRow]:
    """The rows the filters keep (open weights, organisation), unsorted; tiers only on ranked rows,
    and on a scorable subset each row's whole-release figures beside (``full_*``)."""
    rows = []
    for ev in evaluations:
        m = ev.model
        if open_weights is not None and m.open_weights != open_weights:
            continue
        if organisation and m.organisation.lower() != organisation.lower():
            continue
        if run_here is not None and ev.run_here != run_here:
            continue
        reason = scorable_unranked_reason(ev, scorability=scorability)
        no_verdict = (scorability.partial and not m.baseline
                      and evaluation_missing_on(ev, scorability.paper_snippets) >= scorability.snippets)
        # no verdict on the subset is no figure on it, not 0 %
        row_figures = {**figures.get(ev.id, {}), **(_NO_FIGURES if no_verdict else {})}
        rows.append(_row(ev, tier=None if reason else tiers.get(m.key), unranked_reason=reason, figures=row_figures))
        rows[-1].run_here = ev.run_here
        if scorability.partial:
            rows[-1].full_scaled_pass_rate, rows[-1].full_pass_rate = ev.scaled_pass_rate, ev.pass_rate
            rows[-1].no_verdict = no_verdict
    return rows


def _rows_history(
    rows: list[LeaderboardRow], evaluations: list[Evaluation], *, release: Release, with_paper: bool, overall: bool
) -> None:
    """Set each row's figure in the predecessor release (overall view only) and its succession mode."""
    previous = _previous_figures(release, with_paper=with_paper) if overall else {}
    succession = {ev.model.key: (ev.succession or {}).get("mode", "") for ev in evaluations}
    for row in rows:
        row.previous_scaled_pass_rate = previous.get(row.model_key)
        row.succession = succession[row.model_key]


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
    run_here: bool | None = None,
) -> LeaderboardTable:
    """The leaderboard of a release: one row per model (its latest public evaluation), best first.

    view "overall": stored figures and stored significance tiers over all papers.
    view "contamination_safe": only papers first committed after ``cutoff`` (default: the latest
    knowledge cutoff among ranked models) and inside [date_from, date_to]; figures, intervals and
    tiers come from the stored per-paper totals. Filters (open_weights, organisation, run_here) hide rows
    but do not change tiers. Rows that are baselines or miss snippets are shown but not ranked.
    When only part of the release can be scored on this site (papers without their code, or whose
    environment fails: release_scorability), both views keep to the scorable papers: a model,
    published ones from their per-paper totals, is ranked on that subset only when it has a verdict
    for every snippet of it (catalog.ranking.evaluation_unranked_reason), and keeps its whole-release
    figure beside it (``full_*``); a model without any verdict there has no figure on the subset
    (``no_verdict``: the table's ``apart`` rows), never 0 %. Every unranked row says why
    (``unranked_reason``).
    Raises ValueError for an unknown view. Queries: 2, whatever the number of models.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}")
    release_papers = {
        rp.paper.paper_id: rp for rp in ReleasePaper.objects.filter(release=release).select_related("paper")
    }
    paper_dates = {pid: rp.paper.first_commit_date for pid, rp in release_papers.items()}
    overall = view == "overall"
    scorability = release_scorability(release=release, release_papers=release_papers.values())
    subset = scorability.partial
    evaluations = latest_per_model(
        public_evaluations(release, with_paper=with_paper, light=True,
                            keep=() if overall and not subset else ("paper_totals",))
    )
    organisations = sorted({ev.model.organisation for ev in evaluations if ev.model.organisation})
    ranked_evs = [ev for ev in evaluations if not scorable_unranked_reason(ev, scorability=scorability)]
    warning = ""
    if subset and overall:
        papers = scorability.scorable
        figures, tiers = _subset_figures(evaluations, ranked_evs, papers, release_papers)
    elif overall:
        papers = sorted(release_papers)
        figures, tiers = _overall_figures(release, with_paper=with_paper, evaluations=evaluations,
                                          ranked_evs=ranked_evs, papers=papers)
    else:
        papers, cutoff, warning = _window(paper_dates, ranked_evs=ranked_evs, scorability=scorability,
                                          cutoff=cutoff, date_from=date_from, date_to=date_to)
        figures, tiers = _subset_figures(evaluations, ranked_evs, papers, release_papers)
    rows = _board_rows(evaluations, scorability=scorability, figures=figures, tiers=tiers,
                       open_weights=open_weights, organisation=organisation, run_here=run_here)
    _rows_history(rows, evaluations, release=release, with_paper=with_paper, overall=overall)
    return LeaderboardTable(
        previous_release=release.predecessor if release.predecessor_id else None,
        release=release,
        view=view,
        rows=_sort_rows(rows),
        papers=papers,
        snippets=sum(release_papers[p].snippet_count for p in papers),
        total_weight=sum(release_papers[p].total_weight for p in papers),
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


def paper_leaderboard(*, release: Release, paper_id: str, with_paper: bool = True) -> PaperLeaderboard:
    """Every model's figures on one paper of a release, best first. Raises Paper.DoesNotExist."""
    release_papers = list(ReleasePaper.objects.filter(release=release).select_related("paper"))
    rp = next((r for r in release_papers if r.paper.paper_id == paper_id), None)
    if rp is None:
        raise Paper.DoesNotExist(f"no paper {paper_id!r} in release {release.name}")
    rows = []
    # ranked or not as on the release's board (on its scorable subset, when it has one)
    scorability = release_scorability(release=release, release_papers=release_papers)
    evaluations = public_evaluations(release, with_paper=with_paper, light=True, keep=("per_paper", "paper_totals"))
    for ev in latest_per_model(evaluations):
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
        rows.append(_row(ev, tier=None, unranked_reason=scorable_unranked_reason(ev, scorability=scorability), figures=figures))
    return PaperLeaderboard(
        release=release, paper=rp.paper, snippets=rp.snippet_count, total_weight=rp.total_weight, rows=_sort_rows(rows)
    )


def heatmap(*, release: Release, with_paper: bool = True) -> Heatmap:
    """Scaled pass rate of each model (rows, best overall first) on each paper (columns)."""
    table = leaderboard_rows(release=release, with_paper=with_paper)
    evs = {
        ev.id: ev
        for ev in latest_per_model(public_evaluations(release, with_paper=with_paper, light=True, keep=("per_paper",)))
    }
    values = []
    for row in table.rows:
        per_paper = evs[row.evaluation_id].per_paper or {}
        values.append([per_paper[p]["scaled_pass_rate"] if p in per_paper else None for p in table.papers])
    return Heatmap(models=[(r.model_key, r.name) for r in table.rows], papers=table.papers, values=values)


def error_categories(*, release: Release, with_paper: bool = True) -> ErrorCategories:
    """Failures per category for each model (baselines excluded), best model first; the categories in
    the engine's order (syntax ... missing: it reads better than the alphabet and keeps colours stable)."""
    evs = [
        ev
        for ev in latest_per_model(public_evaluations(release, with_paper=with_paper, light=True, keep=("categories",)))
        if not ev.model.baseline
    ]
    evs.sort(key=lambda ev: (-(ev.scaled_pass_rate or 0.0), ev.model.display_name.lower()))
    categories = sorted({c for ev in evs for c in (ev.categories or {})},
                        key=lambda c: (CATEGORIES.index(c) if c in CATEGORIES else len(CATEGORIES), c))
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
        with_ev = {ev.model_id: ev for ev in latest_per_model(
            public_evaluations(release, with_paper=True, light=True, keep=("paper_totals",)))}
        without = {ev.model_id: ev for ev in latest_per_model(
            public_evaluations(release, with_paper=False, light=True, keep=("paper_totals",)))}
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
    for ev in latest_per_model(public_evaluations(release, with_paper=with_paper, light=True, keep=("paper_totals",))):
        m = ev.model
        if m.baseline:
            continue
        cutoff = m.knowledge_cutoff_date
        papers = _window_papers(paper_dates, cutoff=cutoff, date_from=None, date_to=None) if cutoff else []
        totals = evaluation_totals(ev, papers)
        rows.append(
            ContaminationRow(
                model_key=m.key,
                name=m.display_name,
                knowledge_cutoff=m.knowledge_cutoff,
                knowledge_cutoff_date=cutoff,
                papers=papers,
                snippets=sum(release_papers[p].snippet_count for p in papers),
                scaled_pass_rate=rate(sum(v[0] for v in totals.values()), sum(v[1] for v in totals.values())),
                pass_rate=rate(sum(v[2] for v in totals.values()), sum(v[3] for v in totals.values())),
                overall_scaled_pass_rate=ev.scaled_pass_rate,
            )
        )
    return sorted(rows, key=lambda r: (r.scaled_pass_rate is None, -(r.scaled_pass_rate or 0.0), r.name.lower()))


#: tokens per snippet at which a list price (USD per million tokens) becomes a cost per snippet: a
#: prompt with the paper's text and the masked file, and one answer; said on the page beside the chart
LISTED_TOKENS = {"input": 20_000, "output": 1_000}


@dataclass
class CostPoint:
    model_key: str
    name: str
    scaled_pass_rate: float
    cost: float  # USD per snippet
    measured: bool  # from the run card; else from the list price at LISTED_TOKENS
    on_front: bool  # on the Pareto front: no model is at most as costly and scores at least as high
    ranked: bool


def cost_vs_score(*, release: Release) -> tuple[list[CostPoint], list[str]]:
    """Each model of the release's overall board with a known cost: its cost per snippet (measured,
    else estimated from its list price) against its scaled pass rate, the Pareto front marked; and
    the names of models left out for lack of a cost. Reads the board (leaderboard_rows)."""
    points, without = [], []
    for r in leaderboard_rows(release=release).board:
        if r.baseline or r.scaled_pass_rate is None:
            continue
        if r.cost_per_snippet is not None:
            cost, measured = r.cost_per_snippet, True
        elif r.input_cost is not None or r.output_cost is not None:
            cost = ((r.input_cost or 0.0) * LISTED_TOKENS["input"] + (r.output_cost or 0.0) * LISTED_TOKENS["output"]) / 1e6
            measured = False
        else:
            without.append(r.name)
            continue
        points.append(CostPoint(model_key=r.model_key, name=r.name, scaled_pass_rate=r.scaled_pass_rate, cost=cost,
                                measured=measured, on_front=False, ranked=r.ranked))
    for i in scoring.pareto_front([(p.cost, p.scaled_pass_rate) for p in points]):
        points[i].on_front = True
    return sorted(points, key=lambda p: (p.cost, -p.scaled_pass_rate)), without
