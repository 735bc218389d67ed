"""The one CSV writer of the site, and every CSV table's columns: the API's ``?format=csv`` and the
pages' downloads name the same columns alike (the API's names, documented in leaderboard.openapi).

``csv_text`` writes the rows with one cell rule (spreadsheet-safe text, ``yes``/``no``, 4 decimals);
``csv_response`` is the attachment response of such a text; the ``*_csv`` builders are the tables: the
API's (leaderboard, a paper's board, heatmap, error categories, ablation, contamination) and those
only the pages offer (releases, a release's papers, a model's per-paper figures, a paper's snippets,
a snippet's verdicts). An interval is two columns, ``ci95_low`` and ``ci95_high`` (the API's
``ci95`` pair).
"""
from __future__ import annotations

import csv
import io
from typing import Any, Iterable, Sequence

from django.http import HttpResponse

from .selectors.boards import AblationRow, ContaminationRow, ErrorCategories, Heatmap, LeaderboardRow
from .selectors.details import ModelDetail, SnippetNode
from .selectors.release_info import ReleaseInfo

__all__ = [
    "ABLATION_HEADER",
    "CONTAMINATION_HEADER",
    "LEADERBOARD_HEADER",
    "csv_text",
    "csv_response",
    "leaderboard_table_csv",
    "heatmap_csv",
    "error_categories_csv",
    "ablation_csv",
    "contamination_csv",
    "releases_csv",
    "release_papers_csv",
    "model_per_paper_csv",
    "paper_snippets_csv",
    "snippet_verdicts_csv",
]

LEADERBOARD_HEADER = [
    "tier", "model", "name", "organisation", "open_weights", "scaled_pass_rate", "ci95_low", "ci95_high",
    "pass_rate", "coverage", "snippets", "papers", "ranked", "knowledge_cutoff", "input_cost", "output_cost",
    "samples", "baseline", "verified", "source", "cost_per_snippet", "with_paper", "unranked_reason",
]
ABLATION_HEADER = ["model", "name", "with_paper", "without_paper", "diff", "ci95_low", "ci95_high"]
CONTAMINATION_HEADER = [
    "model", "name", "knowledge_cutoff", "papers_after_cutoff", "snippets", "scaled_pass_rate", "pass_rate",
    "overall_scaled_pass_rate", "papers",
]


def _cell(value: Any) -> Any:
    """Spreadsheet-safe cell: text that a spreadsheet would run as a formula is quoted."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4f}"
    text = str(value)
    if text[:1] in ("=", "+", "-", "@", "\t", "\r") and not _is_number(text):
        return "'" + text
    return text


def _is_number(text: str) -> bool:
    """A plain number ('-3.20', '+5'): a spreadsheet reads it as a number, not a formula."""
    try:
        float(text)
    except ValueError:
        return False
    return text.strip() == text


def csv_text(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for row in rows:
        writer.writerow([_cell(v) for v in row])
    return out.getvalue()


def csv_response(text: str, *, filename: str) -> HttpResponse:
    response = HttpResponse(text, content_type="text/csv; charset=utf-8")
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in filename)
    response["Content-Disposition"] = f'attachment; filename="{safe}"'
    return response


def leaderboard_table_csv(rows: Iterable[LeaderboardRow]) -> str:
    return csv_text(
        LEADERBOARD_HEADER,
        (
            [
                r.tier, r.model_key, r.name, r.organisation, r.open_weights, r.scaled_pass_rate, r.ci_low, r.ci_high,
                r.pass_rate, r.coverage, r.snippets, r.papers, r.ranked, r.knowledge_cutoff, r.input_cost,
                r.output_cost, r.samples, r.baseline, r.verified, r.source,
                # USD per snippet is often below the 4 decimals of other cells
                None if r.cost_per_snippet is None else f"{r.cost_per_snippet:.8f}",
                r.with_paper, r.unranked_reason,
            ]
            for r in rows
        ),
    )


def heatmap_csv(data: Heatmap) -> str:
    return csv_text(
        ["model", "name", *data.papers],
        ([key, name, *values] for (key, name), values in zip(data.models, data.values)),
    )


def error_categories_csv(data: ErrorCategories) -> str:
    return csv_text(
        ["model", "name", *data.categories, "failures", "runs"],
        ([r["model_key"], r["name"], *(r["counts"][c] for c in data.categories), r["failures"], r["runs"]] for r in data.rows),
    )


def ablation_csv(rows: Iterable[AblationRow]) -> str:
    return csv_text(
        ABLATION_HEADER,
        ([r.model_key, r.name, r.with_paper, r.without_paper, r.diff, r.ci_low, r.ci_high] for r in rows),
    )


def contamination_csv(rows: Iterable[ContaminationRow]) -> str:
    return csv_text(
        CONTAMINATION_HEADER,
        (
            [r.model_key, r.name, r.knowledge_cutoff, len(r.papers), r.snippets, r.scaled_pass_rate, r.pass_rate,
             r.overall_scaled_pass_rate, " ".join(r.papers)]
            for r in rows
        ),
    )


# --------------------------------------------------------------------------- tables only the pages offer
def releases_csv(items: Iterable[ReleaseInfo]) -> str:
    return csv_text(
        ["slug", "name", "status", "date", "content_hash", "papers", "snippets", "models"],
        ([r.slug, r.name, r.status, r.release_date, r.content_hash, r.papers, r.snippets, r.models] for r in items),
    )


def release_papers_csv(release_papers: Iterable[Any]) -> str:
    """A release's papers (ReleasePaper rows with their papers)."""
    return csv_text(
        ["paper", "title", "venue", "first_commit_date", "snippets", "total_weight", "content_hash"],
        ([rp.paper.paper_id, rp.paper.title, rp.paper.venue, rp.paper.first_commit_date, rp.snippet_count,
          rp.total_weight, rp.content_hash] for rp in release_papers),
    )


def model_per_paper_csv(detail: ModelDetail) -> str:
    """A model's figures on each paper, one row per (public evaluation, paper)."""
    return csv_text(
        ["evaluation", "release", "with_paper", "paper", "scaled_pass_rate", "pass_rate", "snippets"],
        ([card.id, card.release_slug, card.with_paper, paper, f.get("scaled_pass_rate"), f.get("pass_rate"),
          f.get("snippets")] for card in detail.evaluations for paper, f in sorted(card.per_paper.items())),
    )


def paper_snippets_csv(snippets: Sequence[SnippetNode]) -> str:
    """A paper's snippet tree in file order (the API's /papers/ID snippets; ``lines`` as two columns)."""
    names = {n.id: n.name for n in snippets}
    return csv_text(
        ["file", "name", "parent", "depth", "weight", "start_line", "end_line", "pass_rate", "runs"],
        ([n.file, n.name, names.get(n.parent_id), n.depth, n.weight, n.start_line, n.end_line, n.pass_rate, n.runs]
         for n in snippets),
    )


def snippet_verdicts_csv(results: Iterable[dict[str, Any]]) -> str:
    """Every model's verdicts on one snippet (selectors.details.snippet_verdicts), one row per sample."""
    return csv_text(
        ["model", "name", "baseline", "sample", "passed", "category"],
        ([r["key"], r["name"], r["baseline"], s["sample"], s["passed"], s["category"]]
         for r in results for s in r["samples"]),
    )
