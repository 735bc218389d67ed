"""The detail pages' reads: a model with its evaluation cards, a paper's snippet tree, a snippet's
verdicts (every model's, and one model's drill-down with diffs), an evaluation's raw outputs, and
who may see a model or an evaluation.
"""
from __future__ import annotations

import datetime as dt
import difflib
from dataclasses import dataclass, field
from typing import Any, Iterable

from django.db.models import Count, IntegerField, Sum
from django.db.models.functions import Cast

from catalog.models import Evaluation, LLMModel, Paper, Release, Snippet, SnippetResult
from catalog.ranking import HEAVY, evaluation_coverage, latest_per_model, rate

from .caching import cached, release_version
from .release_info import release_paper

__all__ = [
    "EvaluationCard",
    "ModelDetail",
    "PaperDetail",
    "SnippetDrilldown",
    "SnippetNode",
    "evaluation_card",
    "evaluation_outputs",
    "evaluation_visible",
    "model_detail",
    "model_visible",
    "paper_detail",
    "snippet_drilldown",
    "snippet_get",
    "snippet_verdicts",
]


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
    run_here: bool = False  # the Hub asked the model's endpoint itself (submissions.runs)


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


def evaluation_card(ev: Evaluation) -> EvaluationCard:
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
        run_here=ev.run_here,
        scaled_pass_rate=ev.scaled_pass_rate,
        pass_rate=ev.pass_rate,
        ci_low=ev.scaled_ci_low,
        ci_high=ev.scaled_ci_high,
        scaled_std=ev.scaled_std,
        pass_std=ev.pass_std,
        coverage=evaluation_coverage(ev),
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
    them is public on a published release belongs to its uploaders (and staff), one seen only on
    drafts to staff; every other model is public."""
    if Evaluation.objects.filter(model=model, is_public=True, release__status=Release.PUBLISHED).exists():
        return True
    owners = set(model.submissions.values_list("user_id", flat=True))
    if not owners and not Evaluation.objects.filter(model=model, release__status=Release.DRAFT).exists():
        return True  # loaded by the site itself (published results, baselines, demo), not only on a draft
    return bool(viewer is not None and viewer.is_authenticated and (viewer.is_staff or viewer.pk in owners))


def model_detail(*, key: str, release: Release | None = None, viewer: Any = None) -> ModelDetail:
    """A model and its public evaluations (those of ``release`` first). Raises LLMModel.DoesNotExist,
    also for a private model ``viewer`` may not see (its key must not tell that it exists)."""
    model = LLMModel.objects.get(key=key)
    if not model_visible(model=model, viewer=viewer):
        raise LLMModel.DoesNotExist(f"no model {key!r}")
    evs = list(
        # a draft release's evaluations show on the draft's pages only (staff)
        Evaluation.objects.filter(model=model, is_public=True, hidden=False, release__status=Release.PUBLISHED)
        .select_related("release")
        .order_by("-created_at", "-id")
    )
    if release is not None:
        evs.sort(key=lambda ev: ev.release_id != release.id)
    return ModelDetail(model=model, evaluations=[evaluation_card(ev) for ev in evs])


def paper_detail(*, release: Release, paper_id: str) -> PaperDetail:
    """A paper of a release: metadata, snippet tree with each snippet's pass rate across public
    model evaluations (baselines excluded). Raises Paper.DoesNotExist. Queries: 3 (2 when cached)."""
    rp = release_paper(release, paper_id)
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
                pass_rate=rate(st["passed"] or 0, st["runs"]) if st else None,
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


def snippet_get(release: Release, paper_id: str, snippet: str, file: str | None) -> Snippet:
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
    snip = snippet_get(release, paper_id, snippet, file)
    if evaluation is not None:
        if evaluation.release_id != release.pk:
            raise Evaluation.DoesNotExist(f"evaluation {evaluation.pk} is not on {release.name}")
        model, evs = evaluation.model, [evaluation]
    else:
        model = LLMModel.objects.get(key=model_key)
        evs = latest_per_model(
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


def snippet_verdicts(snippet: Snippet, *, with_paper: bool) -> list[dict[str, Any]]:
    """Every public model evaluation's verdicts on one snippet (its latest evaluation per model), one
    dict per model: key, name, baseline, samples [{sample, passed, category}], passed, imported (a
    published import's verdicts: no completion or output); baselines last,
    then the most passed samples first. One query, whatever the number of models."""
    rows = (
        SnippetResult.objects.filter(
            snippet=snippet, evaluation__is_public=True, evaluation__hidden=False, evaluation__with_paper=with_paper
        )
        .select_related("evaluation__model")
        .order_by("evaluation__model__display_name", "evaluation__created_at", "sample")
        .only("passed", "category", "sample", "seconds", "evaluation__id", "evaluation__created_at", "evaluation__source",
              "evaluation__model__key", "evaluation__model__display_name", "evaluation__model__baseline")
    )
    latest: dict[str, int] = {}
    for r in rows:
        latest[r.evaluation.model.key] = max(latest.get(r.evaluation.model.key, 0), r.evaluation.id)
    by_model: dict[str, dict[str, Any]] = {}
    for r in rows:
        model = r.evaluation.model
        if r.evaluation.id != latest[model.key]:
            continue
        entry = by_model.setdefault(model.key, {"key": model.key, "name": model.display_name, "baseline": model.baseline,
                                                "samples": [], "passed": 0,
                                                # imported: verdicts only, nothing to drill down to
                                                "imported": r.evaluation.source == Evaluation.PUBLISHED})
        entry["samples"].append({"sample": r.sample, "passed": r.passed, "category": r.category})
        entry["passed"] += 1 if r.passed else 0
    return sorted(by_model.values(), key=lambda e: (bool(e["baseline"]), -e["passed"] / max(len(e["samples"]), 1), e["name"].lower()))


def evaluation_visible(*, evaluation_id: int, user: Any = None) -> Evaluation:
    """A public, not hidden evaluation of a published release, or one of ``user``'s own (staff: any).
    Raises Evaluation.DoesNotExist."""
    ev = Evaluation.objects.select_related("model", "release").defer(*HEAVY).get(pk=evaluation_id)
    # a held-out release's completions are close to its hidden reference: their owner's and staff's only
    if ev.is_public and not ev.hidden and ev.release.frozen and not ev.release.held_out:
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
