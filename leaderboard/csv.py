"""The one CSV writer of the site: every download (the API's ``?format=csv`` and the pages') is written here.

``csv_text`` writes the rows with one cell rule (spreadsheet-safe text, ``yes``/``no``, 4 decimals);
``csv_download`` is the attachment response of a header and rows; the ``*_csv`` builders are the
API's tables. The pages build their rows in ``leaderboard.views`` and write them with ``csv_download``.
"""
from __future__ import annotations

import csv
import io
from typing import Any, Iterable, Sequence

from django.http import HttpResponse

from .selectors import AblationRow, ContaminationRow, ErrorCategories, Heatmap, LeaderboardRow

__all__ = [
    "csv_text",
    "csv_response",
    "csv_download",
    "leaderboard_table_csv",
    "heatmap_csv",
    "error_categories_csv",
    "ablation_csv",
    "contamination_csv",
]

LEADERBOARD_HEADER = [
    "tier", "model", "name", "organisation", "open_weights", "scaled_pass_rate", "ci95_low", "ci95_high",
    "pass_rate", "coverage", "snippets", "papers", "ranked", "knowledge_cutoff", "input_cost", "output_cost",
    "samples", "baseline", "verified", "source", "cost_per_snippet",
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


def csv_download(filename: str, header: Sequence[str], rows: Iterable[Sequence[Any]]) -> HttpResponse:
    """The attachment ``filename`` holding the header and the rows (``csv_text``)."""
    return csv_response(csv_text(header, rows), filename=filename)


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
        ["model", "name", "with_paper", "without_paper", "diff", "ci95_low", "ci95_high"],
        ([r.model_key, r.name, r.with_paper, r.without_paper, r.diff, r.ci_low, r.ci_high] for r in rows),
    )


def contamination_csv(rows: Iterable[ContaminationRow]) -> str:
    return csv_text(
        ["model", "name", "knowledge_cutoff", "papers_after_cutoff", "snippets", "scaled_pass_rate", "pass_rate",
         "overall_scaled_pass_rate", "papers"],
        (
            [r.model_key, r.name, r.knowledge_cutoff, len(r.papers), r.snippets, r.scaled_pass_rate, r.pass_rate,
             r.overall_scaled_pass_rate, " ".join(r.papers)]
            for r in rows
        ),
    )
