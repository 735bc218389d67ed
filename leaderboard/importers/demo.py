"""Import our demo problem set as the published release "demo" and score its predictions and baselines.

``demo_load`` is what ``manage.py load_demo`` runs: the folder goes in through ``pset_import``, each
demo/predictions/*.jsonl and the two baselines become a public evaluation, and what was not scored
with the same input is scored as every paper of the site is, through ``scoring.evaluate`` (the
demo's trust level: ``scoring.sandbox.sandbox_for(trust=DEMO)``), each verdict stored by the one
writer of results, ``scoring.results.evaluation_results_write``.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmark_core import scoring
from benchmark_core.masking import PROMPT_VERSION
from benchmark_core.predictions import parse_predictions
from benchmark_core.problemset import ProblemSet, load_problemset
from benchmark_core.runner import HARNESS_VERSION
from catalog.aggregates import release_tiers_refresh
from catalog.models import Evaluation, LLMModel, Release, ReleasePaper, Snippet
from catalog.releases import release_set_default
from scoring.evaluate import PaperWork, papers_evaluate
from scoring.results import evaluation_results_write
from scoring.sandbox import DEMO

from .common import ImportProblem
from .pset import pset_import

__all__ = [
    "BASELINES",
    "DEMO_RELEASE_NAME",
    "DEMO_WITHOUT_PAPER_SUFFIX",
    "DemoLoadResult",
    "demo_load",
]

DEMO_RELEASE_NAME = "demo"
BASELINES = {
    LLMModel.REFERENCE: ("baseline-reference", "Reference code (baseline)"),
    LLMModel.EMPTY: ("baseline-empty", "Empty completion (baseline)"),
}
#: demo/predictions/<model>.without-paper.jsonl: the model's answers to prompts without the paper
DEMO_WITHOUT_PAPER_SUFFIX = ".without-paper"


@dataclass
class DemoLoadResult:
    release: Release
    backend: str
    scored: list[str] = field(default_factory=list)  # model keys scored in this run
    skipped: list[str] = field(default_factory=list)  # already scored with the same input
    warnings: list[str] = field(default_factory=list)


@dataclass
class _DemoJob:
    """One evaluation the demo scores: a predictions file or a baseline."""

    name: str  # the file's stem, or the baseline's model key
    key: str  # the model's key
    with_paper: bool
    info: dict[str, Any]  # models.yaml's entry, or {"baseline": kind}
    completions: dict[tuple[str, str, str, int], str]  # (paper, file, snippet, sample) -> the answer
    samples: tuple[int, ...]
    digest: str  # the input hash: predictions (or baseline kind), release content, harness
    baseline: str = ""  # LLMModel.REFERENCE / EMPTY: the baseline in place of answers


def _demo_models(path: Path) -> dict[str, dict[str, Any]]:
    """models.yaml: each model key's metadata ({} when the file is missing); ImportProblem if it is not YAML."""
    import yaml

    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ImportProblem(f"{path}: not valid YAML: {exc}") from None
    return {str(k): v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def _demo_release(demo_dir: Path) -> tuple[Release, ProblemSet, list[str]]:
    """Import the folder as the published release "demo" (the default one when there is none yet);
    return it, the problem set the predictions are read against, and the import's warnings."""
    imported = pset_import(path=demo_dir, release_name=DEMO_RELEASE_NAME, status=Release.PUBLISHED)
    release = imported.release
    if not Release.objects.filter(is_default=True).exists():
        release_set_default(release=release)
    return release, load_problemset(demo_dir), list(imported.warnings)


def _demo_prediction_jobs(demo_dir: Path, pset: ProblemSet, base_hash: str, warnings: list[str]) -> list[_DemoJob]:
    """A job per demo/predictions/*.jsonl, in name order: its answers by snippet and sample (a snippet
    without one is scored as missing), its samples and the input hash; parse problems go to warnings."""
    jobs = []
    meta = _demo_models(demo_dir / "predictions" / "models.yaml")
    for path in sorted((demo_dir / "predictions").glob("*.jsonl")):
        raw = path.read_bytes()
        predictions, problems = parse_predictions(raw, pset)
        if problems:
            warnings.extend(f"{path.name}:{p.line}: {p.message}" for p in problems)
        completions = {(p.paper, p.file, p.snippet, p.sample): p.completion for p in predictions}
        samples = tuple(sorted({p.sample for p in predictions}) or [0])
        digest = hashlib.sha256(raw + base_hash.encode()).hexdigest()
        key, with_paper = path.stem, True
        if key.endswith(DEMO_WITHOUT_PAPER_SUFFIX):
            key, with_paper = key[: -len(DEMO_WITHOUT_PAPER_SUFFIX)], False
        jobs.append(_DemoJob(path.stem, key, with_paper, meta.get(key, {}), completions, samples, digest))
    return jobs


def _demo_baseline_jobs(base_hash: str) -> list[_DemoJob]:
    """A job per baseline: the reference code, and the empty completion, for every snippet."""
    return [_DemoJob(key, key, True, {"baseline": kind}, {}, (0,),
                     hashlib.sha256(f"{kind}:{base_hash}".encode()).hexdigest(), baseline=kind)
            for kind, (key, _name) in BASELINES.items()]


def _demo_evaluations(
    jobs: list[_DemoJob], *, release: Release, result: DemoLoadResult
) -> tuple[dict[str, Evaluation], list[_DemoJob]]:
    """Each job's model and public evaluation, made when missing; return them by job name, and the
    jobs to score (the others were scored with the same input: listed in ``result.skipped``)."""
    evaluations: dict[str, Evaluation] = {}
    todo = []
    for job in jobs:
        model = _demo_model_upsert(job.key, job.info)
        note = "synthetic demo answers" + ("" if job.with_paper else ", prompted without the paper")
        ev, _ = Evaluation.objects.get_or_create(
            model=model,
            release=release,
            with_paper=job.with_paper,
            source=Evaluation.BASELINE if model.baseline else Evaluation.DEMO,
            defaults={
                "is_public": True,
                "decoding": {"note": note} if not model.baseline else {},
                "prompt_version": PROMPT_VERSION,
                "harness_version": HARNESS_VERSION,
            },
        )
        evaluations[job.name] = ev
        if ev.input_hash == job.digest and ev.computed_at is not None:
            result.skipped.append(job.name)
        else:
            todo.append(job)
    return evaluations, todo


def _demo_score(
    todo: list[_DemoJob], evaluations: dict[str, Evaluation], *, release: Release, result: DemoLoadResult,
    backend: str | None, timeout: float,
) -> None:
    """Score every job on every paper through ``scoring.evaluate`` at the demo's trust level (our own
    code: ``local`` is an acceptable fallback), each job's verdicts replacing its last input's; store
    its input hash (listed in ``result.scored``), and warn when the reference baseline does not pass fully."""
    snippet_ids = {(pid, f, n): i for i, pid, f, n in
                   Snippet.objects.filter(release=release).values_list("id", "paper__paper_id", "file", "name")}
    papers = list(ReleasePaper.objects.filter(release=release).exclude(folder="").select_related("paper"))
    works = []
    for job in todo:
        ev = evaluations[job.name]
        evaluation_results_write(evaluation=ev, rows=[], replace=True, aggregates=False)  # a new input: anew
        answers = {(snippet_ids[key[:3]], key[3]): text for key, text in job.completions.items() if key[:3] in snippet_ids}
        works += [PaperWork(evaluation=ev, release_paper=rp, answers=answers, samples=job.samples, baseline=job.baseline)
                  for rp in papers]
    outcomes = papers_evaluate(works, trust=DEMO, backend=backend, warnings=result.warnings, timeout=timeout,
                               aggregates=True, refresh_release=False)
    result.backend = outcomes[0].sandbox if outcomes else ""
    for outcome in outcomes:
        if outcome.environment_error:
            result.warnings.append(f"{outcome.paper_id}: not scored, its environment fails here: "
                                   f"{outcome.environment_error}")
    for job in todo:
        ev = evaluations[job.name]
        ev.input_hash = job.digest
        ev.save(update_fields=["input_hash"])
        result.scored.append(job.name)
    ref = evaluations[BASELINES[LLMModel.REFERENCE][0]]
    ref.refresh_from_db()
    if ref.scaled_pass_rate is not None and ref.scaled_pass_rate < 100.0:
        result.warnings.append(
            f"the reference code passes only {ref.scaled_pass_rate:.1f} % with backend {result.backend!r}: "
            "that sandbox does not run the demo faithfully"
        )


def demo_load(*, demo_dir: str | Path, backend: str | None = None, timeout: float = 20.0) -> DemoLoadResult:
    """Load our demo problem set as the published release "demo" and score its predictions; idempotent.

    Every demo/predictions/*.jsonl becomes a public evaluation of the model named by the file (its
    metadata from models.yaml; ``<model>.without-paper.jsonl`` is that model's evaluation without
    the paper in the prompt, for the paper-ablation page), plus the reference and empty-completion
    baselines. Inputs that were
    already scored (same predictions, same release content, same harness) are skipped.
    """
    demo_dir = Path(demo_dir).resolve()
    release, pset, warnings = _demo_release(demo_dir)
    base_hash = f"{release.content_hash}:{HARNESS_VERSION}"
    jobs = _demo_prediction_jobs(demo_dir, pset, base_hash, warnings) + _demo_baseline_jobs(base_hash)
    result = DemoLoadResult(release=release, backend="", warnings=warnings)
    evaluations, todo = _demo_evaluations(jobs, release=release, result=result)
    if todo:
        _demo_score(todo, evaluations, release=release, result=result, backend=backend, timeout=timeout)
    release_tiers_refresh(release=release)
    return result


def _demo_model_upsert(key: str, info: dict[str, Any]) -> LLMModel:
    """The demo model (or baseline) of this key, made or brought up to date with models.yaml's metadata."""
    baseline = info.get("baseline", "")
    if baseline:
        name = BASELINES[baseline][1]
        fields = {"display_name": name, "organisation": "", "open_weights": True, "baseline": baseline,
                  "knowledge_cutoff": "", "knowledge_cutoff_date": None}
    else:
        cutoff = str(info.get("knowledge_cutoff") or "").strip()
        try:
            cutoff_date = scoring.parse_cutoff(cutoff) if cutoff else None
        except ValueError:
            cutoff_date = None
        fields = {
            "display_name": str(info.get("display_name") or key)[:200],
            "organisation": str(info.get("organisation") or "")[:200],
            "open_weights": bool(info.get("open_weights", False)),
            "knowledge_cutoff": cutoff[:20],
            "knowledge_cutoff_date": cutoff_date,
            "metadata": {k: v for k, v in info.items() if isinstance(v, (str, int, float, bool))},
        }
    model, created = LLMModel.objects.get_or_create(key=key, defaults=fields)
    if not created and any(getattr(model, k) != v for k, v in fields.items()):
        for k, v in fields.items():
            setattr(model, k, v)
        model.save()
    return model
