"""Which evaluations a release shows, and what the boards read of them.

Public, not hidden evaluations (``public_evaluations``, optionally without their heavy JSON fields), the
latest per model, whether one is ranked (complete, not a baseline, no flags awaiting review), its stored
per-paper totals and coverage, and the fingerprint that tells whether the release's stored tiers
(leaderboard.aggregates.release_tiers_refresh) were computed from exactly these evaluations.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

from django.db.models import Q

from ..models import Evaluation, Release

__all__ = [
    "HEAVY",
    "evaluation_coverage",
    "evaluation_flags_pending",
    "evaluation_ranked",
    "evaluation_totals",
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


def evaluation_ranked(ev: Evaluation) -> bool:
    return (
        not ev.model.baseline and ev.complete and ev.scaled_pass_rate is not None and not evaluation_flags_pending(ev)
    )


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
