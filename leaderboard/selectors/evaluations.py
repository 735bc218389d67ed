"""Which evaluations a release shows, and what the boards read of them.

Public, not hidden evaluations (``public_evaluations``, optionally without their heavy JSON fields), the
latest per model, whether one is ranked (complete, not a baseline, no flags awaiting review), its stored
per-paper totals and coverage, and the fingerprint that tells whether the release's stored tiers
(leaderboard.aggregates.release_tiers_refresh) were computed from exactly these evaluations.
"""
from __future__ import annotations

import hashlib
from typing import Iterable, Mapping

from django.db.models import Q

from ..models import Evaluation, Release

__all__ = [
    "HEAVY",
    "evaluation_coverage",
    "evaluation_flags_pending",
    "evaluation_missing_on",
    "evaluation_ranked",
    "evaluation_totals",
    "evaluation_unranked_reason",
    "latest_per_model",
    "public_evaluations",
    "rate",
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
