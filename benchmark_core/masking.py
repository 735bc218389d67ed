"""Masked files and prompts for one snippet, following the published harness's structure."""
from __future__ import annotations

from .annotation import TAG_RE, Snippet, is_code_line
from .problemset import Paper

__all__ = ["masked_file", "build_prompt", "snippet_base_indent", "task_record", "PROMPT_VERSION"]

PROMPT_VERSION = "rcbhub-prompt-1"


def snippet_base_indent(lines: list[str], snippet: Snippet) -> str:
    """The indentation of the snippet's least-indented code line (the tag's if it has none)."""
    body = [lines[i] for i in range(snippet.start_line, snippet.end_line - 1) if is_code_line(lines[i])]
    body = [line for line in body if not TAG_RE.match(line)]
    if not body:
        return snippet.indent
    return min((line[: len(line) - len(line.lstrip())] for line in body), key=len)


def masked_file(lines: list[str], snippet: Snippet) -> str:
    """Replace the snippet's body by the two TODO lines and drop every other tag line."""
    indent = snippet_base_indent(lines, snippet)
    noun = "line" if snippet.weight == 1 else "lines"
    out: list[str] = []
    for number, line in enumerate(lines, start=1):
        if number == snippet.start_line:
            out.append(f'{indent}# TODO: Implement block "{snippet.name}"')
            out.append(f"{indent}# Approximately {snippet.weight} {noun} of code.")
            continue
        if snippet.start_line < number <= snippet.end_line:
            continue
        if TAG_RE.match(line):
            continue
        out.append(line)
    return "\n".join(out) + "\n"


def _strip_tags(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not TAG_RE.match(line)) + "\n"


def build_prompt(paper: Paper, snippet: Snippet, *, with_paper: bool = True) -> str:
    """Build the model's prompt: paper text (optional), context files, the masked file, instructions."""
    lines = paper.files[snippet.file].lines
    parts: list[str] = [
        "You are implementing one block of the official code of a machine-learning research paper.",
    ]
    if with_paper and paper.paper_text_file:
        parts.append(f"## Paper\n<paper>\n{paper.paper_text().strip()}\n</paper>")
    for rel in paper.context_files:
        parts.append(f"## Context file: {rel}\n<context_file path=\"{rel}\">\n{_strip_tags(paper.read(rel)).rstrip()}\n</context_file>")
    parts.append(
        f"## File to complete: {snippet.file}\n<masked_file path=\"{snippet.file}\">\n"
        f"{masked_file(lines, snippet).rstrip()}\n</masked_file>"
    )
    parts.append(
        "## Task\n"
        f'Write the code that replaces the TODO block "{snippet.name}" in {snippet.file} '
        f"(about {snippet.weight} line(s) of code). Answer with only that code in a single fenced "
        "```python block. Keep the exact indentation the code has in the file: your lines are "
        "inserted as given, without re-indenting. Do not repeat the surrounding code or the function signature."
    )
    return "\n\n".join(parts) + "\n"


def task_record(paper: Paper, snippet: Snippet, *, with_paper: bool = True) -> dict:
    """One task as the ``tasks`` command writes it (a JSON-lines row): ids, prompt and masked file."""
    return {
        "paper": paper.id,
        "file": snippet.file,
        "snippet": snippet.name,
        "parent": snippet.parent,
        "depth": snippet.depth,
        "weight": snippet.weight,
        "with_paper": with_paper,
        "prompt_version": PROMPT_VERSION,
        "prompt": build_prompt(paper, snippet, with_paper=with_paper),
        "masked_file": masked_file(paper.files[snippet.file].lines, snippet),
    }
