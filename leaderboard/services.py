"""Writes of the leaderboard app. Aggregates are computed here, when results are written."""
from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from benchmark_core.scoring import SnippetOutcome, summarize

from .models import Evaluation, Snippet, SnippetResult

__all__ = ["evaluation_aggregates_refresh"]


@transaction.atomic
def evaluation_aggregates_refresh(*, evaluation: Evaluation, n_boot: int = 1000) -> Evaluation:
    """Recompute an evaluation's stored figures from its SnippetResult rows.

    Snippets of the release without a result count as failed ('missing'), so a partial
    evaluation never looks better than it is; coverage tells how much was scored.
    """
    snippets = list(
        Snippet.objects.filter(release_id=evaluation.release_id).values("id", "paper__paper_id", "file", "name", "weight")
    )
    rows = SnippetResult.objects.filter(evaluation=evaluation).values("snippet_id", "sample", "passed", "category")
    by_key = {(r["snippet_id"], r["sample"]): r for r in rows}
    samples = sorted({s for _, s in by_key}) or [0]
    outcomes = []
    covered = set()
    for sample in samples:
        for snip in snippets:
            row = by_key.get((snip["id"], sample))
            if row is not None:
                covered.add(snip["id"])
            outcomes.append(
                SnippetOutcome(
                    paper=snip["paper__paper_id"],
                    file=snip["file"],
                    snippet=snip["name"],
                    sample=sample,
                    weight=snip["weight"],
                    passed=bool(row and row["passed"]),
                    category=(row["category"] or None) if row else "missing",
                )
            )
    summary = summarize(outcomes, n_boot=n_boot)
    evaluation.scaled_pass_rate = summary["scaled_pass_rate"]
    evaluation.pass_rate = summary["pass_rate"]
    evaluation.scaled_ci_low, evaluation.scaled_ci_high = summary["scaled_pass_rate_ci95"]
    evaluation.scaled_std = summary["scaled_pass_rate_std"]
    evaluation.pass_std = summary["pass_rate_std"]
    evaluation.snippets_total = len(snippets)
    evaluation.snippets_covered = len(covered)
    evaluation.categories = summary["categories"]
    evaluation.per_paper = summary["papers"]
    evaluation.paper_totals = {
        p: [v["weight"] * v["scaled_pass_rate"] / 100, v["weight"], v["pass_rate"] * v["snippets"] / 100, v["snippets"]]
        for p, v in summary["papers"].items()
    }
    evaluation.pass_at_k = summary["pass_at_k"]
    evaluation.samples = max(evaluation.samples, len(samples))
    evaluation.computed_at = timezone.now()
    evaluation.save()
    return evaluation
