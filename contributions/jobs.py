"""RQ entry points: take ids, call a service (the database is the source of truth)."""
from __future__ import annotations

from .release_services import release_baseline_score
from .services import contribution_validate

__all__ = ["validate_contribution", "score_baseline"]


def validate_contribution(contribution_id: int, revision: int) -> bool:
    report = contribution_validate(contribution_id=contribution_id, revision=revision)
    return bool(report and report.get("passed"))


def score_baseline(evaluation_id: int, paper_id: str) -> float | None:
    return release_baseline_score(evaluation_id=evaluation_id, paper_id=paper_id).scaled_pass_rate
