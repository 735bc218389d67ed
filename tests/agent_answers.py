"""Prediction lines as agents write them (whole edited masked files, git-style diffs), from the reference code."""
from __future__ import annotations

import difflib
import json
from pathlib import Path

from benchmark_core.masking import masked_file, masked_parts
from benchmark_core.runner import reference_code


def edited_file(paper, snip) -> str:
    """The masked file with the reference body in place of the TODO lines, as an agent would leave it."""
    before, _, after = masked_parts(paper.files[snip.file].lines, snip)
    return "\n".join(before + list(reference_code(paper, snip)) + after) + "\n"


def agent_lines(pset, kind: str) -> list[dict]:
    """One prediction line per snippet of ``pset`` answering with a whole file or a git-style diff."""
    rows = []
    for paper, snip in pset.snippets:
        row = {"paper": paper.id, "file": snip.file, "snippet": snip.name}
        if kind == "file_content":
            row["file_content"] = edited_file(paper, snip)
        else:
            masked = masked_file(paper.files[snip.file].lines, snip)
            row["patch"] = "".join(difflib.unified_diff(
                masked.splitlines(keepends=True), edited_file(paper, snip).splitlines(keepends=True),
                f"a/{snip.file}", f"b/{snip.file}"))
        rows.append(row)
    return rows


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def outside_edit(pset) -> tuple[list[dict], int, str]:
    """Whole-file lines where one answer also changed one line after its snippet: (rows, line number, that line)."""
    rows = agent_lines(pset, "file_content")
    target = rows[7]
    paper = pset.paper(target["paper"])
    snip = paper.snippet(target["snippet"], target["file"])
    lines = target["file_content"].split("\n")
    before, _, after = masked_parts(paper.files[snip.file].lines, snip)
    body = len(reference_code(paper, snip))
    changed = next(i for i in range(len(before) + body, len(lines)) if lines[i].strip())
    lines[changed] = lines[changed] + "  # tuned"
    target["file_content"] = "\n".join(lines)
    return rows, changed + 1, lines[changed]
