"""Writes of the leaderboard app. Aggregates are computed here, when results are written."""
from __future__ import annotations

import datetime as dt
import hashlib
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from django.utils.text import slugify

from benchmark_core import scoring
from benchmark_core.environments import environment_get
from benchmark_core.hashing import folder_hash, ignored, release_hash
from benchmark_core.problemset import Paper as CorePaper
from benchmark_core.problemset import ProblemSet, paper_entry, paper_entry_write, validate_problemset
from benchmark_core.scoring import SnippetOutcome, summarize

from .models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult

__all__ = [
    "ImportProblem",
    "PsetImportResult",
    "evaluation_aggregates_refresh",
    "evaluation_summary_store",
    "release_touch",
    "release_tiers_refresh",
    "release_set_default",
    "published_import",
    "pset_import",
    "paper_summary_text",
    "paper_copy_store",
]

PUBLISHED_RELEASE_NAME = "v1.0 (published)"
PUBLISHED_RELEASE_SLUG = "v1-0-published"
PUBLISHED_RELEASE_DATE = dt.date(2025, 6, 1)  # FORMAT.md: the public release of June 2025
PUBLISHED_HARNESS = "researchcodebench-db3d16d9"
#: the day of the published run (the upstream results folder is named after it)
PUBLISHED_RUN_DATE = dt.date(2025, 5, 12)
STORED_N_BOOT = scoring.N_BOOT  # the same resamples as the CLI, so their intervals agree
SUMMARY_MAX_CHARS = 50_000
#: the category of a snippet without a prediction (benchmark_core.runner.missing_run)
MISSING = "missing"


class ImportProblem(Exception):
    """An input that cannot be imported; the message says why (commands print it, no traceback)."""


# --------------------------------------------------------------------------- aggregates
def release_touch(*, release_id: int) -> None:
    """Move the release's data_version: cached pages and responses of it become stale."""
    from .selectors import release_memo_clear

    Release.objects.filter(pk=release_id).update(data_version=F("data_version") + 1)
    release_memo_clear()


def evaluation_summary_store(
    *, evaluation: Evaluation, summary: dict[str, Any], snippets_total: int, snippets_covered: int, save: bool = True
) -> Evaluation:
    """Copy a benchmark_core.scoring.summarize() result into the evaluation's stored aggregates."""
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
    evaluation_summary_store(
        evaluation=evaluation, summary=summary, snippets_total=len(snippets),
        # covered: every sample of the snippet was predicted
        snippets_covered=sum(1 for n in predicted.values() if n == len(samples)),
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
    from . import selectors  # selectors import models only; no cycle at import time

    stored: dict[str, Any] = {}
    result = {}
    for with_paper in (True, False):
        evs = [
            ev
            for ev in selectors._latest_per_model(selectors._public_evaluations(release, with_paper=with_paper))
            if selectors._is_ranked(ev)
        ]
        if not evs:
            continue
        tiers = scoring.significance_tiers({ev.model.key: selectors._totals(ev) for ev in evs}, n_boot=n_boot)
        stored[selectors.tiers_key(with_paper)] = {"fingerprint": selectors.tiers_fingerprint(evs), "tiers": tiers}
        result[selectors.tiers_key(with_paper)] = tiers
    # update(), not save(): a concurrent writer's bump must not be overwritten
    Release.objects.filter(pk=release.pk).update(tiers=stored, data_version=F("data_version") + 1)
    release.tiers = stored
    selectors.release_memo_clear()
    return result


def release_set_default(*, release: Release) -> None:
    """Make this the release shown when none is asked for."""
    with transaction.atomic():
        Release.objects.exclude(pk=release.pk).filter(is_default=True).update(is_default=False)
        Release.objects.filter(pk=release.pk).update(is_default=True)
    release.is_default = True
    from .selectors import release_memo_clear

    release_memo_clear()


# --------------------------------------------------------------------------- published results
def _date(value: Any) -> dt.date | None:
    if value in (None, "", "null"):
        return None
    try:
        return dt.date.fromisoformat(str(value).strip())
    except ValueError:
        return None


def _paper_fields(meta: dict[str, Any]) -> dict[str, Any]:
    """Paper model fields from a papers.yaml / paper_metadata entry (dates may be strings or dates)."""

    def as_date(key: str) -> dt.date | None:
        value = meta.get(key)
        return value if isinstance(value, dt.date) else _date(value)

    def as_str(key: str, limit: int) -> str:
        value = meta.get(key)
        return "" if value in (None, "null") else str(value).strip()[:limit]

    return {
        "title": as_str("title", 500) or str(meta.get("id")),
        "venue": as_str("venue", 100),
        "arxiv_abs": as_str("arxiv_abs", 500),
        "arxiv_date": as_date("arxiv_date"),
        "arxiv_v1_date": as_date("arxiv_v1_date"),
        "github_url": as_str("github_url", 500),
        "first_commit_date": as_date("first_commit_date"),
        "last_commit_date": as_date("last_commit_date"),
        "metadata": {k: (v.isoformat() if isinstance(v, dt.date) else v) for k, v in meta.items()},
    }


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
    if papers_yaml is None and (path.parent / "papers.yaml").is_file():
        papers_yaml = path.parent / "papers.yaml"
    paper_entries = _load_papers_yaml(Path(papers_yaml)) if papers_yaml else {}
    notes = [f"paper metadata from {papers_yaml}"] if papers_yaml else []
    with transaction.atomic():
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
        # papers and snippets, in the file's order
        snippet_ids: dict[tuple[str, str], int] = {}
        existing = {(s.paper.paper_id, s.name): s for s in Snippet.objects.filter(release=release).select_related("paper")}
        for paper_id, entry in data["results"].items():
            meta = dict(entry.get("paper_metadata") or {"id": paper_id})
            if paper_id in paper_entries:
                meta.update(paper_entries[paper_id])
            meta["id"] = paper_id
            paper, _ = Paper.objects.update_or_create(paper_id=paper_id, defaults=_paper_fields(meta))
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
        # models and their evaluations
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
                SnippetResult.objects.filter(evaluation=ev).delete()
                rows = []
                for paper_id, entry in data["results"].items():
                    for name, samples in entry["results"].get(key, {}).get("results", {}).items():
                        for s in samples:
                            rows.append(
                                SnippetResult(
                                    evaluation=ev,
                                    snippet_id=snippet_ids[(paper_id, name)],
                                    sample=int(s.get("completion_idx", 0)),
                                    passed=bool(s["passed"]),
                                    exit_code=s.get("exit_code") if isinstance(s.get("exit_code"), int) else None,
                                    # the published file has verdicts only: failures are not classified
                                    category="" if s["passed"] else "unknown",
                                )
                            )
                SnippetResult.objects.bulk_create(rows, batch_size=2000)
                ev.input_hash = content_hash
                evaluation_aggregates_refresh(evaluation=ev, refresh_release=False)
            if ev.verified or ev.run_date != run_date:
                # imported, not re-run here (no completions): never "verified"; dated by the published run
                ev.verified, ev.run_date = False, run_date
                ev.save(update_fields=["verified", "run_date"])
            evaluations.append(ev)
        release_tiers_refresh(release=release)
        if make_default:
            release_set_default(release=release)
    mismatches = []
    by_key = {ev.model.key: ev for ev in evaluations}
    for key, scores in data["overall_scores"].items():
        ev = by_key.get(key)
        for field_name, entry in (("scaled_pass_rate", "line_rates"), ("pass_rate", "task_rates")):
            expected = ((scores or {}).get(entry) or {}).get("mean")
            got = getattr(ev, field_name) if ev else None
            if expected is not None and (got is None or abs(got - expected) > 0.005):
                mismatches.append(f"{key}: {field_name} {got} != published {expected}")
    return PublishedImportResult(
        release=release,
        papers=len(data["results"]),
        snippets=len(snippet_ids),
        models=len(evaluations),
        mismatches=mismatches,
        notes=notes,
    )


# --------------------------------------------------------------------------- problem sets
def paper_summary_text(*, paper: CorePaper) -> str:
    """The summary shown on a paper's page: its Markdown paper text (the demo's, a contribution's
    paper2code_paper.md), else ''. A .tex file is the paper itself and is not shown as a summary."""
    if not (paper.paper_text_file and paper.paper_text_file.endswith(".md")):
        return ""
    text = paper.paper_text()
    return text if len(text) <= SUMMARY_MAX_CHARS else ""


@dataclass
class PsetImportResult:
    release: Release
    attached: bool  # the folder was attached to an existing published release
    papers: int
    snippets: int
    warnings: list[str] = field(default_factory=list)


def _pset_load(path: Path) -> ProblemSet:
    pset, problems = validate_problemset(path)
    if problems:
        raise ImportProblem("\n".join(str(p) for p in problems) + f"\n{len(problems)} problem(s): nothing was imported")
    if not pset.papers:
        raise ImportProblem(f"{path}: no paper found")
    return pset


def _pset_names(pset: ProblemSet) -> set[tuple[str, str]]:
    return {(paper.id, snip.name) for paper, snip in pset.snippets}


def _matching_published(pset: ProblemSet) -> Release | None:
    """The published release that has every paper of the folder with exactly the folder's snippet
    names, if any: the folder may hold only some of the release's papers (the others then stay
    without code, so not scorable here)."""
    names = _pset_names(pset)
    paper_ids = {paper.id for paper in pset.papers}
    for release in Release.objects.filter(status=Release.PUBLISHED).order_by("-created_at"):
        have = set(
            Snippet.objects.filter(release=release, paper__paper_id__in=paper_ids).values_list("paper__paper_id", "name")
        )
        if have == names:
            return release
    return None


def _environment_known(name: Any) -> dict[str, Any]:
    """ReleasePaper fields for an environment known to be unavailable here (its papers cannot be
    scored, whatever a job would find); {} otherwise: the first scoring job checks it."""
    env = environment_get(str(name)) if name else None
    if env is None or not env.unavailable:
        return {}
    return {"environment_ok": False, "environment_error": f"environment {env.name!r} is unavailable: {env.unavailable}",
            "environment_checked_at": timezone.now()}


def _copy_ignore(src: Path):
    """shutil.copytree's ignore callable for the one rule of what is not part of a paper."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        base = Path(directory).relative_to(src)
        return {name for name in names if ignored(base / name)}

    return ignore


def paper_copy_store(*, paper: CorePaper, root: Path, entry: dict[str, Any] | None = None) -> Path:
    """Copy a paper's folder to ROOT/<id>/ and its papers.yaml entry into ROOT/papers.yaml; return the copy.

    The entry keeps what decides the paper's scoring (annotated files, context files, timeout,
    fresh_process, environment): the copy loads as the original did (benchmark_core.problemset.
    paper_folder_load), and a tagged ``*_ref.py`` beside the annotated file is never a snippet.
    """
    dst = Path(root) / paper.id
    if dst.exists():
        shutil.rmtree(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(paper.folder, dst, ignore=_copy_ignore(Path(paper.folder)))
    paper_entry_write(root, entry or paper_entry(paper))
    return dst


def pset_import(*, path: str | Path, release_name: str | None = None, status: str | None = None) -> PsetImportResult:
    """Load a problem-set folder into a release; idempotent.

    Attaches code, files, lines and the folder to the snippets of the published release that has
    every paper of the folder with exactly its snippet names (so new submissions are scored on the
    release the published models are ranked on; a folder with some of its papers makes those
    scorable); otherwise loads a draft release named ``release_name`` (default: the folder's
    name). Paper folders are copied under settings.RCB_PSET_ROOT/<slug>/ with their papers.yaml
    entries (paper_copy_store).
    Raises ImportProblem with every validation problem (nothing is written then).
    """
    src = Path(path).resolve()
    pset = _pset_load(src)
    warnings: list[str] = []
    target = Release.objects.filter(name=release_name).first() if release_name else None
    published = _matching_published(pset)
    if target is not None and target.frozen and target != published:
        raise ImportProblem(
            f"release {target.name!r} is published (frozen) and its snippets are not this folder's; "
            "choose another --release name"
        )
    attached = published is not None and (target is None or target == published)
    with transaction.atomic():
        if attached:
            release = published
        else:
            name = release_name or src.name
            release, _ = Release.objects.get_or_create(
                name=name[:100], defaults={"slug": _unique_slug(name), "status": Release.DRAFT}
            )
            if status:
                release.status = status
                if status == Release.PUBLISHED and release.published_at is None:
                    release.published_at = timezone.now()
                    release.release_date = timezone.now().date()
                release.save()
        root = Path(settings.RCB_PSET_ROOT) / release.slug
        existing = {
            (s.paper.paper_id, s.file, s.name): s for s in Snippet.objects.filter(release=release).select_related("paper")
        }
        by_name = {(pid, name): s for (pid, _f, name), s in existing.items()}
        seen: set[int] = set()
        paper_hashes = []
        for paper in pset.papers:
            meta = dict(paper.metadata or {"id": paper.id})
            meta.setdefault("id", paper.id)
            fields = _paper_fields(meta)
            summary = str(meta["summary"]) if meta.get("summary") else paper_summary_text(paper=paper)
            if summary:
                fields["summary"] = summary
            db_paper = Paper.objects.filter(paper_id=paper.id).first()
            if db_paper is None:
                db_paper = Paper.objects.create(paper_id=paper.id, **fields)
            else:
                # keep published metadata; fill what the folder adds
                changed = [k for k, v in fields.items() if v not in (None, "", {}) and getattr(db_paper, k) in (None, "", {})]
                for k in changed:
                    setattr(db_paper, k, fields[k])
                if changed:
                    db_paper.save(update_fields=changed)
            entry = paper_entry(paper)
            dst = paper_copy_store(paper=paper, root=root, entry=entry)
            digest = folder_hash(dst)
            paper_hashes.append((paper.id, digest))
            snippets = paper.snippets
            created: dict[tuple[str, str], Snippet] = {}
            for position, core in enumerate(snippets):
                snip = by_name.get((paper.id, core.name)) if attached else existing.get((paper.id, core.file, core.name))
                values = {
                    "file": core.file,
                    "depth": core.depth,
                    "position": position,
                    "start_line": core.start_line,
                    "end_line": core.end_line,
                    "code": core.code,
                }
                if snip is None:
                    snip = Snippet.objects.create(release=release, paper=db_paper, name=core.name, weight=core.weight, **values)
                else:
                    if attached and snip.weight != core.weight:
                        warnings.append(
                            f"{paper.id}/{core.name}: weight {core.weight} in the folder, {snip.weight} in the "
                            "published release (kept: the published figures use it)"
                        )
                    elif not attached:
                        values["weight"] = core.weight
                    for k, v in values.items():
                        setattr(snip, k, v)
                    snip.save()
                created[(core.file, core.name)] = snip
                seen.add(snip.id)
            for core in snippets:  # parents once every snippet of the paper exists
                snip = created[(core.file, core.name)]
                parent = created.get((core.file, core.parent)) if core.parent else None
                if snip.parent_id != (parent.id if parent else None):
                    snip.parent = parent
                    snip.save(update_fields=["parent"])
            ReleasePaper.objects.update_or_create(
                release=release,
                paper=db_paper,
                defaults={
                    "folder": str(dst),
                    "content_hash": digest,
                    "snippet_count": len(snippets),
                    "total_weight": sum(created[(c.file, c.name)].weight for c in snippets),
                    "entry": json.loads(json.dumps(entry, default=str)),
                    "environment": str(entry.get("environment") or ""),
                    **_environment_known(entry.get("environment")),
                },
            )
        if not attached:
            # a draft follows its folder: what the folder no longer has goes
            stale = Snippet.objects.filter(release=release).exclude(id__in=seen)
            stale.delete()
            ReleasePaper.objects.filter(release=release).exclude(paper__paper_id__in=[p.id for p in pset.papers]).delete()
            release.content_hash = release_hash(paper_hashes)
            release.save(update_fields=["content_hash"])
        release_touch(release_id=release.id)
    return PsetImportResult(
        release=release, attached=attached, papers=len(pset.papers), snippets=len(pset.snippets), warnings=warnings
    )


def _unique_slug(name: str) -> str:
    base = slugify(name)[:90] or "release"
    slug, n = base, 2
    while Release.objects.filter(slug=slug).exists():
        slug, n = f"{base}-{n}", n + 1
    return slug


def results_store(
    *, evaluation: Evaluation, runs: Iterable[Any], completions: dict[tuple[str, str, str, int], str] | None = None
) -> Evaluation:
    """Replace an evaluation's SnippetResult rows by benchmark_core TestRuns and refresh its aggregates."""
    snippet_ids = {
        (pid, f, n): i
        for i, pid, f, n in Snippet.objects.filter(release_id=evaluation.release_id).values_list(
            "id", "paper__paper_id", "file", "name"
        )
    }
    completions = completions or {}
    rows = []
    for run in runs:
        sid = snippet_ids.get((run.paper, run.file, run.snippet))
        if sid is None:
            continue
        rows.append(
            SnippetResult(
                evaluation=evaluation,
                snippet_id=sid,
                sample=run.sample,
                passed=run.passed,
                category=run.category or "",
                exit_code=run.exit_code,
                seconds=run.seconds,
                output_tail=run.output_tail,
                completion=completions.get((run.paper, run.file, run.snippet, run.sample), ""),
            )
        )
    with transaction.atomic():
        SnippetResult.objects.filter(evaluation=evaluation).delete()
        SnippetResult.objects.bulk_create(rows, batch_size=2000)
        evaluation_aggregates_refresh(evaluation=evaluation, refresh_release=False)
    return evaluation


# --------------------------------------------------------------------------- the demo
DEMO_RELEASE_NAME = "demo"
BASELINES = {
    LLMModel.REFERENCE: ("baseline-reference", "Reference code (baseline)"),
    LLMModel.EMPTY: ("baseline-empty", "Empty completion (baseline)"),
}


@dataclass
class DemoLoadResult:
    release: Release
    backend: str
    scored: list[str] = field(default_factory=list)  # model keys scored in this run
    skipped: list[str] = field(default_factory=list)  # already scored with the same input
    warnings: list[str] = field(default_factory=list)


def _demo_sandbox(backend: str, warnings: list[str]):
    """The configured backend; the demo is our own trusted code, so local is an acceptable fallback."""
    from benchmark_core.sandbox.base import SandboxUnavailable, get_sandbox

    python = getattr(settings, "RCB_PYTHON", "") or None
    if backend and backend != "local":
        try:
            return get_sandbox(backend, python=python)
        except SandboxUnavailable as exc:
            warnings.append(f"sandbox {backend!r} unavailable ({exc}); the demo (trusted code) runs with 'local'")
    return get_sandbox("local", python=python)


def _demo_models(path: Path) -> dict[str, dict[str, Any]]:
    import yaml

    if not path.is_file():
        return {}
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ImportProblem(f"{path}: not valid YAML: {exc}") from None
    return {str(k): v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


#: demo/predictions/<model>.without-paper.jsonl: the model's answers to prompts without the paper
DEMO_WITHOUT_PAPER_SUFFIX = ".without-paper"


def demo_load(
    *, demo_dir: str | Path, backend: str | None = None, timeout: float = 20.0, workers: int | None = None
) -> DemoLoadResult:
    """Load our demo problem set as the published release "demo" and score its predictions; idempotent.

    Every demo/predictions/*.jsonl becomes a public evaluation of the model named by the file (its
    metadata from models.yaml; ``<model>.without-paper.jsonl`` is that model's evaluation without
    the paper in the prompt, for the paper-ablation page), plus the reference and empty-completion
    baselines. Inputs that were
    already scored (same predictions, same release content, same harness) are skipped.
    """
    from benchmark_core.predictions import parse_predictions
    from benchmark_core.problemset import load_problemset
    from benchmark_core.runner import HARNESS_VERSION, Task, answer_code, reference_code, run_tasks
    from benchmark_core.masking import PROMPT_VERSION

    demo_dir = Path(demo_dir).resolve()
    imported = pset_import(path=demo_dir, release_name=DEMO_RELEASE_NAME, status=Release.PUBLISHED)
    release = imported.release
    if not Release.objects.filter(is_default=True).exists():
        release_set_default(release=release)
    warnings = list(imported.warnings)
    pset = load_problemset(demo_dir)
    folders = dict(ReleasePaper.objects.filter(release=release).values_list("paper__paper_id", "folder"))
    for paper in pset.papers:  # score the release's copy, which is what the release stands for
        paper.folder = Path(folders[paper.id])
    base_hash = f"{release.content_hash}:{HARNESS_VERSION}"

    # what to score: (job name, model key, with paper, metadata, tasks, completions, input hash)
    jobs: list[tuple[str, str, bool, dict[str, Any], list[Task], dict, str]] = []
    meta = _demo_models(demo_dir / "predictions" / "models.yaml")
    for path in sorted((demo_dir / "predictions").glob("*.jsonl")):
        raw = path.read_bytes()
        predictions, problems = parse_predictions(raw, pset)
        if problems:
            warnings.extend(f"{path.name}:{p.line}: {p.message}" for p in problems)
        index = {(p.paper, p.file, p.snippet, p.sample): p for p in predictions}
        samples = sorted({p.sample for p in predictions}) or [0]
        tasks, completions = [], {}
        for sample in samples:
            for paper, snip in pset.snippets:
                pred = index.get((paper.id, snip.file, snip.name, sample))
                code = answer_code(paper, snip, pred.completion) if pred else None
                tasks.append(Task(paper, snip, code, sample))
                if pred:
                    completions[(paper.id, snip.file, snip.name, sample)] = pred.completion
        digest = hashlib.sha256(raw + base_hash.encode()).hexdigest()
        key, with_paper = path.stem, True
        if key.endswith(DEMO_WITHOUT_PAPER_SUFFIX):
            key, with_paper = key[: -len(DEMO_WITHOUT_PAPER_SUFFIX)], False
        jobs.append((path.stem, key, with_paper, meta.get(key, {}), tasks, completions, digest))
    for kind, (key, _name) in BASELINES.items():
        tasks = [
            Task(paper, snip, reference_code(paper, snip) if kind == LLMModel.REFERENCE else ())
            for paper, snip in pset.snippets
        ]
        completions = {
            (paper.id, snip.file, snip.name, 0): "\n".join(reference_code(paper, snip)) if kind == LLMModel.REFERENCE else ""
            for paper, snip in pset.snippets
        }
        jobs.append((key, key, True, {"baseline": kind}, tasks, completions,
                     hashlib.sha256(f"{kind}:{base_hash}".encode()).hexdigest()))

    result = DemoLoadResult(release=release, backend="", warnings=warnings)
    evaluations: dict[str, Evaluation] = {}
    todo = []
    for name, key, with_paper, info, tasks, completions, digest in jobs:
        model = _demo_model_upsert(key, info)
        note = "synthetic demo answers" + ("" if with_paper else ", prompted without the paper")
        ev, _ = Evaluation.objects.get_or_create(
            model=model,
            release=release,
            with_paper=with_paper,
            source=Evaluation.BASELINE if model.baseline else Evaluation.DEMO,
            defaults={
                "is_public": True,
                "decoding": {"note": note} if not model.baseline else {},
                "prompt_version": PROMPT_VERSION,
                "harness_version": HARNESS_VERSION,
            },
        )
        evaluations[name] = ev
        if ev.input_hash == digest and ev.computed_at is not None:
            result.skipped.append(name)
        else:
            todo.append((name, tasks, completions, digest))
    if todo:
        sandbox = _demo_sandbox(backend if backend is not None else getattr(settings, "RCB_SANDBOX_BACKEND", "local"), warnings)
        result.backend = sandbox.describe()
        try:
            all_tasks = [t for _, tasks, _, _ in todo for t in tasks]
            runs = run_tasks(all_tasks, sandbox=sandbox, workers=workers, timeout=timeout)
        finally:
            sandbox.close()
        start = 0
        for key, tasks, completions, digest in todo:
            ev = evaluations[key]
            results_store(evaluation=ev, runs=runs[start : start + len(tasks)], completions=completions)
            start += len(tasks)
            ev.input_hash = digest
            ev.save(update_fields=["input_hash"])
            result.scored.append(key)
        ref = evaluations[BASELINES[LLMModel.REFERENCE][0]]
        ref.refresh_from_db()
        if ref.scaled_pass_rate is not None and ref.scaled_pass_rate < 100.0:
            warnings.append(
                f"the reference code passes only {ref.scaled_pass_rate:.1f} % with backend {result.backend!r}: "
                "that sandbox does not run the demo faithfully"
            )
    release_tiers_refresh(release=release)
    return result


def _demo_model_upsert(key: str, info: dict[str, Any]) -> LLMModel:
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


# --------------------------------------------------------------------------- synthetic data (benchmarks)
SYNTHETIC_RELEASE = "synthetic"


def synthetic_generate(
    *, models: int = 100, snippets: int = 2000, samples: int = 5, papers: int = 50, seed: int = 0,
    release_name: str = SYNTHETIC_RELEASE, log=None,
) -> Release:
    """Replace the release ``release_name`` by random data at scale (bulk writes), for bench/.

    Aggregates are computed with the same benchmark_core.scoring.summarize as real results, from
    the generated outcomes in memory, so the stored figures match the stored rows.
    """
    import random
    import time

    rng = random.Random(seed)
    say = log or (lambda msg: None)
    started = time.monotonic()
    old = Release.objects.filter(name=release_name).first()
    if old is not None:
        SnippetResult.objects.filter(evaluation__release=old).delete()  # one DELETE: no cascades, no signals
        Evaluation.objects.filter(release=old).delete()
        Snippet.objects.filter(release=old).update(parent=None)
        Snippet.objects.filter(release=old).delete()
        old.delete()
    LLMModel.objects.filter(key__startswith="syn-model-").delete()
    with transaction.atomic():
        release = Release.objects.create(
            name=release_name, slug=_unique_slug(release_name), status=Release.PUBLISHED,
            release_date=timezone.now().date(), published_at=timezone.now(),
            description=f"Synthetic data: {models} models x {snippets} snippets x {samples} samples",
        )
        paper_rows = []
        for p in range(papers):
            paper, _ = Paper.objects.update_or_create(
                paper_id=f"syn-paper-{p:03d}",
                defaults={"title": f"Synthetic paper {p}",
                          "first_commit_date": dt.date(2023, 1, 1) + dt.timedelta(days=rng.randint(0, 900))},
            )
            paper_rows.append(paper)
        snippet_objs = [
            Snippet(release=release, paper=paper_rows[i % papers], name=f"snippet-{i:05d}", file="code.py",
                    weight=rng.randint(1, 15), position=i)
            for i in range(snippets)
        ]
        snippet_objs = Snippet.objects.bulk_create(snippet_objs, batch_size=2000)
        by_paper: dict[int, list[Snippet]] = {}
        for s in snippet_objs:
            by_paper.setdefault(s.paper_id, []).append(s)
        ReleasePaper.objects.bulk_create(
            ReleasePaper(release=release, paper=p, snippet_count=len(by_paper.get(p.id, [])),
                         total_weight=sum(s.weight for s in by_paper.get(p.id, [])))
            for p in paper_rows
        )
        difficulty = [rng.random() for _ in snippet_objs]
        say(f"{papers} papers, {snippets} snippets ({time.monotonic() - started:.1f}s)")
        orgs = ["Alpha Labs", "Beta AI", "Gamma Research", "Delta", "Epsilon Open"]
        categories = ["syntax", "name", "type", "attribute", "index", "import", "logic", "timeout", "crash", "other"]
        for m in range(models):
            cutoff = dt.date(2023, 1, 1) + dt.timedelta(days=rng.randint(0, 700))
            model = LLMModel.objects.create(
                key=f"syn-model-{m:03d}", display_name=f"Synthetic Model {m:03d}", organisation=orgs[m % len(orgs)],
                open_weights=m % 3 == 0, knowledge_cutoff=cutoff.isoformat(), knowledge_cutoff_date=cutoff,
                input_cost=round(rng.uniform(0.05, 15), 2), output_cost=round(rng.uniform(0.2, 60), 2),
            )
            ev = Evaluation(model=model, release=release, is_public=True, source=Evaluation.DEMO, samples=samples,
                            decoding={"temperature": 0.8, "samples": samples}, prompt_version="synthetic",
                            harness_version="synthetic")
            skill = rng.uniform(0.05, 0.95)
            rows, outcomes = [], []
            for sample in range(samples):
                for s, diff in zip(snippet_objs, difficulty):
                    passed = rng.random() < skill * (1.2 - diff)
                    category = "" if passed else categories[rng.randrange(len(categories))]
                    rows.append(SnippetResult(evaluation=ev, snippet=s, sample=sample, passed=passed, category=category,
                                              exit_code=0 if passed else 1, seconds=round(rng.uniform(0.05, 3), 2)))
                    outcomes.append(SnippetOutcome(paper=paper_rows[s.position % papers].paper_id, file=s.file,
                                                   snippet=s.name, sample=sample, weight=s.weight, passed=passed,
                                                   category=category or None))
            evaluation_summary_store(evaluation=ev, summary=summarize(outcomes, n_boot=200),
                                     snippets_total=len(snippet_objs), snippets_covered=len(snippet_objs))
            SnippetResult.objects.bulk_create(rows, batch_size=5000)
            if (m + 1) % 10 == 0:
                say(f"{m + 1}/{models} models ({time.monotonic() - started:.1f}s)")
    release_tiers_refresh(release=release, n_boot=200)
    say(f"done in {time.monotonic() - started:.1f}s")
    return release
