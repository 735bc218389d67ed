"""Ranking rules: which evaluations a release shows, which are ranked, and what this site can score.

Public, not hidden evaluations (``public_evaluations``, optionally without their heavy JSON fields), the
latest per model, whether one is ranked (complete, not a baseline, no flags awaiting review; on the
scorable subset when only part of the release can be scored here: ``release_scorability``,
``scorable_unranked_reason``), its stored per-paper totals and coverage, and the fingerprint that tells
whether the release's stored tiers (catalog.aggregates.release_tiers_refresh) were computed from
exactly these evaluations. The pages (leaderboard.selectors) and the stored figures (catalog.aggregates)
read the same rules from here.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from django.db.models import Q

from .models import Evaluation, Release, ReleasePaper

__all__ = [
    "HEAVY",
    "Scorability",
    "evaluation_coverage",
    "evaluation_flags_pending",
    "evaluation_missing_on",
    "evaluation_ranked",
    "evaluation_totals",
    "evaluation_unranked_reason",
    "latest_per_model",
    "public_evaluations",
    "rate",
    "release_ranked_count",
    "release_scorability",
    "scorability_of",
    "scorable_unranked_reason",
    "stored_tiers",
    "tiers_fingerprint",
    "tiers_key",
]


def rate(num: float, den: float) -> float | None:
    return 100.0 * num / den if den else None


#: JSON fields a leaderboard table does not show; decoding them is most of a table's cost
HEAVY = ("per_paper", "categories", "pass_at_k", "decoding", "run_card", "model__links", "model__metadata")


def public_evaluations(release: Release, *, with_paper: bool | None = True, light: bool = False,
                       keep: tuple[str, ...] = ()):
    """Public, not hidden evaluations of a release with their models. ``light`` leaves out the heavy
    JSON fields (and paper_totals, unless named in ``keep``): do not read them from such rows. A held-out
    release shows only evaluations run here (and its baselines)."""
    qs = Evaluation.objects.filter(release=release, is_public=True, hidden=False).select_related("model")
    if release.held_out:  # only what the Hub ran itself is scored there (and the baselines)
        qs = qs.filter(Q(run_here=True) | ~Q(model__baseline=""))
    if with_paper is not None:
        qs = qs.filter(with_paper=with_paper)
    if light:
        qs = qs.defer(*(f for f in (*HEAVY, "paper_totals") if f not in keep))
    return qs.order_by("created_at", "id")


def latest_per_model(evaluations: Iterable[Evaluation]) -> list[Evaluation]:
    """One evaluation per model: the latest wins (ordered by creation)."""
    chosen: dict[int, Evaluation] = {}
    for ev in evaluations:
        chosen[ev.model_id] = ev
    return list(chosen.values())


def evaluation_coverage(ev: Evaluation) -> float:
    return 100.0 * ev.snippets_covered / ev.snippets_total if ev.snippets_total else 0.0


def evaluation_flags_pending(ev: Evaluation) -> bool:
    """The engine flagged some of its results and no reviewer has cleared them yet."""
    return bool(ev.flagged_results) and ev.flags_cleared_at is None


def evaluation_missing_on(ev: Evaluation, papers: Mapping[str, int]) -> int:
    """Snippets of these papers (paper id -> snippets) without a prediction in every sample."""
    covered = ev.paper_covered or {}
    return sum(max(n - int(covered.get(p, 0)), 0) for p, n in papers.items())


def evaluation_unranked_reason(
    ev: Evaluation, *, subset: Mapping[str, int] | None = None, failing: Mapping[str, int] | None = None,
) -> str:
    """Why a shown evaluation is not ranked ("" when it is): every reason that applies, joined.

    The one definition of ranked. Over the whole release an evaluation is ranked when it is not
    hidden, not a baseline, scored, complete and has no engine flags awaiting review. On a scorable
    ``subset`` (paper id -> snippets of the papers this site can score) completeness is over those
    papers only: a row without a verdict for each of their snippets is not ranked on them (it is
    not a model at 0 % there). ``failing`` (paper id -> snippets of papers whose environment fails
    here) names environment errors as the cause of missing results.
    """
    reasons = []
    if ev.hidden:
        reasons.append("hidden by an admin")
    if ev.model.baseline:
        reasons.append("a baseline, shown for scale (" + (
            "the reference code itself" if ev.model.baseline == "reference" else "an empty completion") + ")")
    if ev.scaled_pass_rate is None:
        reasons.append("not scored yet")
    if evaluation_flags_pending(ev):
        reasons.append(f"{ev.flagged_results} result(s) flagged by the engine await a reviewer")
    if subset is not None:
        missing, total = evaluation_missing_on(ev, subset), sum(subset.values())
        if missing >= total:
            reasons.append(f"no verdict on the {len(subset)} paper(s) this site can score ({', '.join(sorted(subset))})"
                           ": its results are on papers without code here")
        elif missing:
            reasons.append(f"results are missing for {missing} of the {total} snippets this site can score")
    elif not ev.complete and ev.scaled_pass_rate is not None:
        blocked = {p: n for p, n in (failing or {}).items() if evaluation_missing_on(ev, {p: n})}
        missing = ev.snippets_total - ev.snippets_covered
        if blocked:
            reasons.append(f"the environment of {', '.join(sorted(blocked))} fails on this site: "
                           "its snippets wait for a re-check")
        if missing > sum(evaluation_missing_on(ev, {p: n}) for p, n in blocked.items()):
            reasons.append(f"results are missing for {missing} of {ev.snippets_total} snippets")
    return "; ".join(reasons)


def evaluation_ranked(ev: Evaluation) -> bool:
    """Ranked over the whole release (evaluation_unranked_reason says why not)."""
    return not evaluation_unranked_reason(ev)


def evaluation_totals(ev: Evaluation, papers: Iterable[str] | None = None) -> dict[str, tuple[float, ...]]:
    """The stored per-paper totals of an evaluation, optionally only some papers."""
    stored = ev.paper_totals or {}
    if papers is None:
        return {p: tuple(v) for p, v in stored.items()}
    return {p: tuple(stored[p]) for p in papers if p in stored}


def tiers_key(with_paper: bool) -> str:
    return "with_paper" if with_paper else "without_paper"


def tiers_fingerprint(evaluations: Iterable[Evaluation]) -> str:
    """What the tiers of these ranked evaluations depend on: which evaluation and when it was computed."""
    parts = sorted(f"{ev.model.key}|{ev.id}|{ev.computed_at.isoformat() if ev.computed_at else ''}" for ev in evaluations)
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def stored_tiers(release: Release, with_paper: bool, ranked: list[Evaluation]) -> dict[str, int] | None:
    """Tiers stored by aggregates.release_tiers_refresh, when computed from exactly these evaluations."""
    entry = (release.tiers or {}).get(tiers_key(with_paper))
    if not entry or entry.get("fingerprint") != tiers_fingerprint(ranked):
        return None
    return entry.get("tiers") or {}


# --------------------------------------------------------------------------- what this site can score
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


def scorability_of(release_papers: Iterable[ReleasePaper]) -> Scorability:
    """Scorability of these rows (with their papers): no query."""
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
    return scorability_of(release_papers)


def scorable_unranked_reason(ev: Evaluation, *, scorability: Scorability) -> str:
    """Why an evaluation is not ranked on its release's board ("" when it is): over the whole
    release, or on the scorable subset when only part of the release can be scored here."""
    return evaluation_unranked_reason(ev, subset=scorability.paper_snippets if scorability.partial else None,
                                      failing=scorability.failing)


def release_ranked_count(*, release: Release, with_paper: bool = True) -> int:
    """How many models the release's overall board ranks (its rows without an unranked reason)."""
    scorability = release_scorability(release=release)
    evaluations = latest_per_model(public_evaluations(release, with_paper=with_paper, light=True,
                                                      keep=("paper_totals",)))
    return sum(1 for ev in evaluations if not scorable_unranked_reason(ev, scorability=scorability))
