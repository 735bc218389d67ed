"""Stored figures and every invalidation of what is cached from them.

Stored figures of an evaluation (from its SnippetResult rows, with benchmark_core.scoring), the
release's significance tiers, and the one place that says a release's data changed: its
``data_version`` (in every key of leaderboard.page_cache and leaderboard.selectors.caching.cached)
moves and this process's release memo is forgotten, from the services (bulk writes send no signals)
and from the signal handlers below (every save/delete of what a release shows; connected by
``CatalogConfig.ready``).
"""
from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import F
from django.db.models.signals import post_delete, post_save, pre_save
from django.dispatch import receiver
from django.utils import timezone

from benchmark_core import scoring
from benchmark_core.scoring import SnippetOutcome, summarize

from . import ranking
from .models import Evaluation, LLMModel, Paper, Release, Snippet, SnippetResult
from .visibility import release_memo_clear

__all__ = [
    "MISSING",
    "STORED_N_BOOT",
    "evaluation_aggregates_refresh",
    "evaluation_summary_store",
    "release_memo_forget",
    "release_tiers_refresh",
    "release_touch",
]

STORED_N_BOOT = scoring.N_BOOT  # the same resamples as the CLI, so their intervals agree
#: the category of a snippet without a prediction (benchmark_core.runner.missing_run)
MISSING = "missing"


def release_memo_forget() -> None:
    """Forget this process's memoized releases (other processes wait out its few seconds)."""
    release_memo_clear()


def release_touch(*, release_id: int) -> None:
    """Move the release's data_version: cached pages and responses of it become stale."""
    Release.objects.filter(pk=release_id).update(data_version=F("data_version") + 1)
    release_memo_forget()


def evaluation_summary_store(
    *, evaluation: Evaluation, summary: dict[str, Any], snippets_total: int, snippets_covered: int,
    paper_covered: dict[str, int] | None = None, save: bool = True
) -> Evaluation:
    """Copy a benchmark_core.scoring.summarize() result into the evaluation's stored aggregates;
    ``paper_covered`` (per paper, the snippets predicted in every sample) defaults to every snippet."""
    evaluation.scaled_pass_rate = summary["scaled_pass_rate"]
    evaluation.pass_rate = summary["pass_rate"]
    evaluation.scaled_ci_low, evaluation.scaled_ci_high = summary["scaled_pass_rate_ci95"]
    evaluation.scaled_std = summary["scaled_pass_rate_std"]
    evaluation.pass_std = summary["pass_rate_std"]
    evaluation.snippets_total = snippets_total
    evaluation.snippets_covered = snippets_covered
    evaluation.categories = summary["categories"]
    evaluation.per_paper = summary["papers"]
    evaluation.paper_totals = {
        p: [v["weight"] * v["scaled_pass_rate"] / 100, v["weight"], v["pass_rate"] * v["snippets"] / 100, v["snippets"]]
        for p, v in summary["papers"].items()
    }
    evaluation.paper_covered = (
        paper_covered if paper_covered is not None else {p: v["snippets"] for p, v in summary["papers"].items()}
    )
    evaluation.pass_at_k = summary["pass_at_k"]
    evaluation.samples = max(evaluation.samples, summary["samples"])
    evaluation.computed_at = timezone.now()
    if save:
        evaluation.save()
    return evaluation


@transaction.atomic
def evaluation_aggregates_refresh(
    *, evaluation: Evaluation, n_boot: int = STORED_N_BOOT, refresh_release: bool = True
) -> Evaluation:
    """Recompute an evaluation's stored figures from its SnippetResult rows.

    Snippets of the release without a result, or whose result says no prediction was sent
    (category 'missing'), count as failed and as not covered, so a partial evaluation never
    looks better than it is and is not ranked; coverage tells how much was predicted. With
    ``refresh_release`` the release's significance tiers are recomputed too (batch writers pass
    False and call release_tiers_refresh once at the end).
    """
    snippets = list(
        Snippet.objects.filter(release_id=evaluation.release_id).values("id", "paper__paper_id", "file", "name", "weight")
    )
    rows = SnippetResult.objects.filter(evaluation=evaluation).values("snippet_id", "sample", "passed", "category")
    by_key = {(r["snippet_id"], r["sample"]): r for r in rows}
    samples = sorted({s for _, s in by_key}) or [0]
    outcomes = []
    predicted: dict[int, int] = {}  # snippet id -> samples with a prediction
    for sample in samples:
        for snip in snippets:
            row = by_key.get((snip["id"], sample))
            if row is not None and row["category"] != MISSING:
                predicted[snip["id"]] = predicted.get(snip["id"], 0) + 1
            outcomes.append(
                SnippetOutcome(
                    paper=snip["paper__paper_id"],
                    file=snip["file"],
                    snippet=snip["name"],
                    sample=sample,
                    weight=snip["weight"],
                    passed=bool(row and row["passed"]),
                    category=(row["category"] or None) if row else MISSING,
                )
            )
    summary = summarize(outcomes, n_boot=n_boot)
    # covered: every sample of the snippet was predicted
    covered = {snip["id"] for snip in snippets if predicted.get(snip["id"]) == len(samples)}
    paper_covered = {snip["paper__paper_id"]: 0 for snip in snippets}
    for snip in snippets:
        paper_covered[snip["paper__paper_id"]] += snip["id"] in covered
    evaluation_summary_store(
        evaluation=evaluation, summary=summary, snippets_total=len(snippets), snippets_covered=len(covered),
        paper_covered=paper_covered,
    )
    if refresh_release:
        release_tiers_refresh(release=evaluation.release)
    return evaluation


def release_tiers_refresh(*, release: Release, n_boot: int = STORED_N_BOOT) -> dict[str, dict[str, int]]:
    """Compute and store the significance tiers of the release's ranked models, per prompt variant.

    Stored with a fingerprint of the evaluations they come from; selectors ignore stored tiers
    whose fingerprint no longer matches (an evaluation was added, hidden or re-scored since) and
    compute them at request time instead.
    """
    stored: dict[str, Any] = {}
    result = {}
    for with_paper in (True, False):
        evs = [
            ev
            for ev in ranking.latest_per_model(ranking.public_evaluations(release, with_paper=with_paper))
            if ranking.evaluation_ranked(ev)
        ]
        if not evs:
            continue
        tiers = scoring.significance_tiers({ev.model.key: ranking.evaluation_totals(ev) for ev in evs}, n_boot=n_boot)
        stored[ranking.tiers_key(with_paper)] = {"fingerprint": ranking.tiers_fingerprint(evs), "tiers": tiers}
        result[ranking.tiers_key(with_paper)] = tiers
    # update(), not save(): a concurrent writer's bump must not be overwritten
    Release.objects.filter(pk=release.pk).update(tiers=stored, data_version=F("data_version") + 1)
    release.tiers = stored
    release_memo_forget()
    return result


# Any write that changes what a release shows moves its data_version, which every cached page and
# API response has in its key. bulk_create/update do not send signals: the services that use them
# call release_touch themselves.
@receiver([post_save, post_delete], sender=Evaluation, dispatch_uid="rcb_evaluation_touch")
def _evaluation_changed(sender, instance: Evaluation, **kwargs) -> None:
    Release.objects.filter(pk=instance.release_id).update(data_version=F("data_version") + 1)
    release_memo_forget()


@receiver([post_save, post_delete], sender=LLMModel, dispatch_uid="rcb_model_touch")
@receiver([post_save, post_delete], sender=Paper, dispatch_uid="rcb_paper_touch")
def _shown_everywhere_changed(sender, instance, **kwargs) -> None:
    Release.objects.update(data_version=F("data_version") + 1)
    release_memo_forget()


@receiver(pre_save, sender=Release, dispatch_uid="rcb_release_version_keep")
def _release_saving(sender, instance: Release, raw: bool = False, **kwargs) -> None:
    # an instance read before another writer's bump must not write the older number back: a version
    # that comes again could bring back pages cached under it (leaderboard.page_cache)
    if instance.pk is not None and not raw:
        current = Release.objects.filter(pk=instance.pk).values_list("data_version", flat=True).first()
        instance.data_version = max(instance.data_version, current or 0)


@receiver([post_save, post_delete], sender=Release, dispatch_uid="rcb_release_touch")
def _release_changed(sender, instance, created: bool = False, raw: bool = False, **kwargs) -> None:
    # its name, description, dates and hash are on its pages: a saved release moves its own version
    if kwargs.get("signal") is post_save and not created and not raw:
        Release.objects.filter(pk=instance.pk).update(data_version=F("data_version") + 1)
        instance.data_version += 1
    release_memo_forget()
