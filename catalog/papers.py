"""What the catalog keeps of a paper's own files: the summary its page shows."""
from __future__ import annotations

from benchmark_core.problemset import Paper as CorePaper

__all__ = ["SUMMARY_MAX_CHARS", "paper_summary_text"]

#: a longer Markdown paper text is the paper itself, not a summary: it is not shown
SUMMARY_MAX_CHARS = 50_000


def paper_summary_text(*, paper: CorePaper) -> str:
    """The summary shown on a paper's page: its Markdown paper text (the demo's, a contribution's
    paper2code_paper.md), else ''. A .tex file is the paper itself and is not shown as a summary."""
    if not (paper.paper_text_file and paper.paper_text_file.endswith(".md")):
        return ""
    text = paper.paper_text()
    return text if len(text) <= SUMMARY_MAX_CHARS else ""
