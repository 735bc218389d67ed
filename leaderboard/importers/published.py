"""Import the published results (overall_stats.json) as release "v1.0 (published)"."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from benchmark_core import scoring
from scoring.results import ResultRow, evaluation_results_write
from catalog.aggregates import release_tiers_refresh
from catalog.models import IMPORTED_FAILURE, Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet
from catalog.releases import release_set_default
from .common import ImportProblem, paper_fields

__all__ = ["PUBLISHED_RELEASE_SLUG", "PUBLISHED_RUN_DATE", "PublishedImportResult", "published_import"]

PUBLISHED_RELEASE_NAME = "v1.0 (published)"
PUBLISHED_RELEASE_SLUG = "v1-0-published"
PUBLISHED_RELEASE_DATE = dt.date(2025, 6, 1)  # FORMAT.md: the public release of June 2025
PUBLISHED_HARNESS = "researchcodebench-db3d16d9"
#: the day of the published run (the upstream results folder is named after it)
PUBLISHED_RUN_DATE = dt.date(2025, 5, 12)


def _load_published(path: Path) -> tuple[dict[str, Any], str]:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ImportProblem(f"{path}: cannot read: {exc.strerror or exc}") from None
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ImportProblem(f"{path}: not valid JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict) or not isinstance(
        data.get("overall_scores"), dict
    ):
        raise ImportProblem(f"{path}: not an overall_stats.json (needs 'results' and 'overall_scores' objects)")
    problems = []
    for paper_id, paper in data["results"].items():
        if not isinstance(paper, dict) or not isinstance(paper.get("results"), dict):
            problems.append(f"{path}: results[{paper_id!r}] has no 'results' object")
            continue
        for model, entry in paper["results"].items():
            for snippet, samples in (entry or {}).get("results", {}).items():
                for s in samples if isinstance(samples, list) else [None]:
                    if not isinstance(s, dict) or "passed" not in s or "snippet_code_line_count" not in s:
                        problems.append(f"{path}: {paper_id}/{model}/{snippet}: needs 'passed' and 'snippet_code_line_count'")
    if problems:
        raise ImportProblem("\n".join(problems[:20]) + (f"\n... and {len(problems) - 20} more" if len(problems) > 20 else ""))
    return data, hashlib.sha256(raw).hexdigest()


def _model_fields(key: str, cfg: dict[str, Any]) -> dict[str, Any]:
    cutoff = str(cfg.get("knowledge_cutoff_date") or "").strip()
    try:
        cutoff_date = scoring.parse_cutoff(cutoff) if cutoff else None
    except ValueError:
        cutoff_date = None

    def cost(name: str) -> float | None:
        try:
            return float(cfg[name]) if cfg.get(name) is not None else None
        except (TypeError, ValueError):
            return None

    company = str(cfg.get("company") or "")
    developer = str(cfg.get("developer") or "")
    return {
        "display_name": str(cfg.get("pretty_name") or key)[:200],
        # 'developer' is the lab that made the model; 'company' is sometimes the API provider
        "organisation": (developer or company.title())[:200],
        "developer": developer[:200],
        "open_weights": bool(cfg.get("is_open", False)),
        "knowledge_cutoff": cutoff[:20],
        "knowledge_cutoff_date": cutoff_date,
        "input_cost": cost("input_cost"),
        "output_cost": cost("output_cost"),
        "metadata": {k: v for k, v in cfg.items() if k != "client_kwargs"},
    }


@dataclass
class PublishedImportResult:
    release: Release
    papers: int
    snippets: int
    models: int
    mismatches: list[str] = field(default_factory=list)  # figures that differ from overall_scores
    notes: list[str] = field(default_factory=list)


def _load_papers_yaml(path: Path) -> dict[str, dict[str, Any]]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ImportProblem(f"{path}: cannot read papers.yaml: {exc}") from None
    if isinstance(data, dict) and isinstance(data.get("papers"), list):
        data = data["papers"]
    if not isinstance(data, list):
        raise ImportProblem(f"{path}: papers.yaml must be a list of paper entries")
    return {str(e["id"]): e for e in data if isinstance(e, dict) and e.get("id")}


def _paper_entries(path: Path, papers_yaml: str | Path | None) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The papers.yaml entries by paper id (the one given, else the one beside the file, else none)
    and the note saying where the metadata came from."""
    if papers_yaml is None and (path.parent / "papers.yaml").is_file():
        papers_yaml = path.parent / "papers.yaml"
    paper_entries = _load_papers_yaml(Path(papers_yaml)) if papers_yaml else {}
    return paper_entries, [f"paper metadata from {papers_yaml}"] if papers_yaml else []


def _published_release(content_hash: str) -> Release:
    """The release "v1.0 (published)", made or brought up to date (published, dated, the file's hash)."""
    release, _ = Release.objects.update_or_create(
        slug=PUBLISHED_RELEASE_SLUG,
        defaults={
            "name": PUBLISHED_RELEASE_NAME,
            "status": Release.PUBLISHED,
            "content_hash": content_hash,
            "release_date": PUBLISHED_RELEASE_DATE,
            "published_at": dt.datetime(2025, 6, 1, tzinfo=dt.timezone.utc),
            "description": "The results published with the ResearchCodeBench paper (20 papers, 212 snippets, "
            "greedy decoding, one sample per snippet).",
        },
    )
    return release


def _published_papers_store(
    *, release: Release, data: dict[str, Any], paper_entries: dict[str, dict[str, Any]]
) -> dict[tuple[str, str], int]:
    """The file's papers (metadata: the file's, then papers.yaml's), their snippets (name, weight
    from the line count, the file's order; code given by import_pset kept) and ReleasePaper rows;
    return the snippet ids by (paper id, snippet name)."""
    snippet_ids: dict[tuple[str, str], int] = {}
    existing = {(s.paper.paper_id, s.name): s for s in Snippet.objects.filter(release=release).select_related("paper")}
    for paper_id, entry in data["results"].items():
        meta = dict(entry.get("paper_metadata") or {"id": paper_id})
        if paper_id in paper_entries:
            meta.update(paper_entries[paper_id])
        meta["id"] = paper_id
        paper, _ = Paper.objects.update_or_create(paper_id=paper_id, defaults=paper_fields(meta))
        weights: dict[str, int] = {}
        for model_entry in entry["results"].values():
            for name, samples in model_entry.get("results", {}).items():
                if samples:
                    weights.setdefault(name, int(samples[0]["snippet_code_line_count"]))
        for position, (name, weight) in enumerate(weights.items()):
            snip = existing.get((paper_id, name))
            if snip is None:
                snip = Snippet.objects.create(release=release, paper=paper, name=name, weight=weight, position=position)
            elif snip.weight != weight:
                snip.weight = weight
                snip.save(update_fields=["weight"])
            snippet_ids[(paper_id, name)] = snip.id
        ReleasePaper.objects.update_or_create(
            release=release,
            paper=paper,
            defaults={"snippet_count": len(weights), "total_weight": sum(weights.values())},
        )
    return snippet_ids


def _published_rows(data: dict[str, Any], key: str, snippet_ids: dict[tuple[str, str], int]) -> list[ResultRow]:
    """A model's published verdicts as result rows (no completions; failures not classified)."""
    rows = []
    for paper_id, entry in data["results"].items():
        for name, samples in entry["results"].get(key, {}).get("results", {}).items():
            for s in samples:
                rows.append(
                    ResultRow(
                        snippet_id=snippet_ids[(paper_id, name)],
                        sample=int(s.get("completion_idx", 0)),
                        passed=bool(s["passed"]),
                        exit_code=s.get("exit_code") if isinstance(s.get("exit_code"), int) else None,
                        # the published file has verdicts only: failures are not classified
                        category="" if s["passed"] else IMPORTED_FAILURE,
                    )
                )
    return rows


def _published_evaluations_store(
    *, release: Release, data: dict[str, Any], snippet_ids: dict[tuple[str, str], int], content_hash: str,
    run_date: dt.date,
) -> list[Evaluation]:
    """Each model of the file (llm_cfg) and its public evaluation; its verdicts written again when
    the file changed, never verified, dated by the published run. Returns the evaluations."""
    cfgs = {k: (v or {}).get("llm_cfg", {}) for k, v in data["overall_scores"].items()}
    outcomes_by_model = scoring.published_outcomes(data)
    model_keys = list(dict.fromkeys([*cfgs, *outcomes_by_model]))
    evaluations = []
    for key in model_keys:
        model, _ = LLMModel.objects.update_or_create(key=key, defaults=_model_fields(key, cfgs.get(key, {})))
        ev, _ = Evaluation.objects.get_or_create(
            model=model,
            release=release,
            source=Evaluation.PUBLISHED,
            with_paper=True,
            defaults={
                "is_public": True,
                "samples": 1,
                "decoding": {"strategy": "greedy", "samples": 1},
                "prompt_version": "published",
                "harness_version": PUBLISHED_HARNESS,
            },
        )
        if ev.input_hash != content_hash:
            rows = _published_rows(data, key, snippet_ids)
            ev.input_hash = content_hash
            evaluation_results_write(evaluation=ev, rows=rows, replace=True, refresh_release=False)
        if ev.verified or ev.run_date != run_date:
            # imported, not re-run here (no completions): never "verified"; dated by the published run
            ev.verified, ev.run_date = False, run_date
            ev.save(update_fields=["verified", "run_date"])
        evaluations.append(ev)
    return evaluations


def _published_mismatches(data: dict[str, Any], evaluations: list[Evaluation]) -> list[str]:
    """The figures (scaled pass rate, pass rate) that differ from the file's overall_scores by more than 0.005."""
    mismatches = []
    by_key = {ev.model.key: ev for ev in evaluations}
    for key, scores in data["overall_scores"].items():
        ev = by_key.get(key)
        for field_name, entry in (("scaled_pass_rate", "line_rates"), ("pass_rate", "task_rates")):
            expected = ((scores or {}).get(entry) or {}).get("mean")
            got = getattr(ev, field_name) if ev else None
            if expected is not None and (got is None or abs(got - expected) > 0.005):
                mismatches.append(f"{key}: {field_name} {got} != published {expected}")
    return mismatches


def published_import(
    *, path: str | Path, papers_yaml: str | Path | None = None, make_default: bool = True,
    run_date: dt.date = PUBLISHED_RUN_DATE,
) -> PublishedImportResult:
    """Import a published overall_stats.json as release "v1.0 (published)"; idempotent.

    Paper metadata comes from the published papers.yaml when given or found beside the file (the
    copy inside overall_stats.json is older for some papers, e.g. minp's first commit date), else
    from the file's paper_metadata.

    Papers (with metadata), snippets (name, weight; no code), models (from llm_cfg), one public
    evaluation per model with its per-snippet verdicts (no completions) and stored aggregates.
    Snippets that import_pset already gave code to keep it. Returns the figures that do not match
    the file's own overall_scores (empty when everything is reproduced).
    """
    path = Path(path)
    data, content_hash = _load_published(path)
    paper_entries, notes = _paper_entries(path, papers_yaml)
    with transaction.atomic():
        release = _published_release(content_hash)
        snippet_ids = _published_papers_store(release=release, data=data, paper_entries=paper_entries)
        evaluations = _published_evaluations_store(release=release, data=data, snippet_ids=snippet_ids,
                                                   content_hash=content_hash, run_date=run_date)
        release_tiers_refresh(release=release)
        if make_default:
            release_set_default(release=release)
    return PublishedImportResult(
        release=release,
        papers=len(data["results"]),
        snippets=len(snippet_ids),
        models=len(evaluations),
        mismatches=_published_mismatches(data, evaluations),
        notes=notes,
    )
