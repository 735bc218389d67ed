"""The one writer of ``SnippetResult`` rows: ``evaluation_results_write``.

Every verdict the site stores (a submission's paper, a release baseline, the demo, a carried
evaluation) comes through here, so the rules live once: a second write of (evaluation, snippet,
sample) replaces the first; the run's audit flags (tampering:*, audit:*) keep the evaluation off the
ranked board until a reviewer clears them, and new flags undo a clearing; the aggregates (with
G1's missing/coverage rule, in ``evaluation_aggregates_refresh``) are refreshed when asked.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from django.db import transaction

from benchmark_core.tamper import review_flags
from catalog.models import Evaluation, SnippetResult
from catalog.aggregates import evaluation_aggregates_refresh

__all__ = ["ResultRow", "result_row_from_run", "evaluation_results_write"]


@dataclass(frozen=True)
class ResultRow:
    """One verdict to store: a snippet's sample and what the engine said of it."""

    snippet_id: int
    sample: int
    passed: bool
    category: str = ""
    exit_code: int | None = None
    seconds: float | None = None
    output_tail: str = ""
    completion: str = ""
    flags: list[str] = field(default_factory=list)

    def values(self) -> dict[str, Any]:
        """The stored row's fields but its keys."""
        return dict(passed=self.passed, category=self.category or "", exit_code=self.exit_code,
                    seconds=self.seconds, output_tail=self.output_tail, completion=self.completion,
                    flags=list(self.flags or []))


def result_row_from_run(*, snippet_id: int, run: Any, completion: str = "") -> ResultRow:
    """The row of an engine ``TestRun``."""
    return ResultRow(
        snippet_id=snippet_id, sample=run.sample, passed=run.passed, category=run.category or "",
        exit_code=run.exit_code, seconds=round(run.seconds, 3) if run.seconds is not None else None,
        output_tail=run.output_tail, completion=completion, flags=list(getattr(run, "flags", None) or []),
    )


def _flags_refresh(evaluation_id: int) -> None:
    # ast:* flags (the code's capabilities) inform; the run's audit trail (tampering:*, audit:*) blocks ranking
    flagged = sum(
        1 for flags in SnippetResult.objects.filter(evaluation_id=evaluation_id).exclude(flags=[]).values_list(
            "flags", flat=True
        ) if review_flags(flags)
    )
    # more flags than a reviewer saw undo the clearing: the new ones need a look of their own
    Evaluation.objects.filter(pk=evaluation_id, flagged_results__lt=flagged).update(
        flagged_results=flagged, flags_cleared_at=None, flags_cleared_by=""
    )
    Evaluation.objects.filter(pk=evaluation_id, flagged_results__gt=flagged).update(flagged_results=flagged)


def evaluation_results_write(
    *, evaluation: Evaluation | int, rows: Iterable[ResultRow], replace: bool = False, aggregates: bool = True,
    lock: bool = False, refresh_release: bool = True,
) -> Evaluation | None:
    """Store ``rows`` for the evaluation (an instance or its id), refresh its flag count and aggregates.

    ``replace``: the rows are the evaluation's whole result (others are deleted, one bulk insert);
    otherwise each row replaces the one of its (snippet, sample). ``aggregates``: recompute the
    stored figures on the given instance, or with ``lock`` (or an id) on a row locked for the update,
    so of writers on different papers the last one sees every paper's rows; that instance is
    returned. ``refresh_release`` is passed on to ``evaluation_aggregates_refresh``.
    """
    evaluation_id = evaluation if isinstance(evaluation, int) else evaluation.pk
    rows = list(rows)
    # a row replaces the stored one of its (snippet, sample); of one key given twice the last wins
    latest = {(r.snippet_id, r.sample): r for r in rows}
    objs = [SnippetResult(evaluation_id=evaluation_id, snippet_id=r.snippet_id, sample=r.sample, **r.values())
            for r in latest.values()]
    with transaction.atomic():
        if replace:
            SnippetResult.objects.filter(evaluation_id=evaluation_id).delete()
            SnippetResult.objects.bulk_create(objs, batch_size=2000)
        elif latest:  # one upsert
            SnippetResult.objects.bulk_create(
                objs, update_conflicts=True, unique_fields=["evaluation", "snippet", "sample"],
                update_fields=list(next(iter(latest.values())).values()), batch_size=2000,
            )
        # the count of flagged rows can only change when a row brings flags, when rows were replaced
        # wholesale, or when flagged rows were stored before (one of them may have been replaced)
        if replace or any(review_flags(r.flags) for r in rows) or Evaluation.objects.filter(
                pk=evaluation_id, flagged_results__gt=0).exists():
            _flags_refresh(evaluation_id)
        if not aggregates:
            return None
        if lock or isinstance(evaluation, int):
            evaluation = Evaluation.objects.select_for_update().get(pk=evaluation_id)
        else:
            # the caller's instance: the figures land on it (and with them what else it set)
            evaluation.refresh_from_db(fields=["flagged_results", "flags_cleared_at", "flags_cleared_by"])
        return evaluation_aggregates_refresh(evaluation=evaluation, refresh_release=refresh_release)
