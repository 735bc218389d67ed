"""Masked files and prompts for one snippet, following the published harness's structure."""
from __future__ import annotations

from .annotation import TAG_RE, Snippet, is_code_line
from .problemset import Paper

__all__ = ["masked_file", "masked_parts", "snippet_from_edited_file", "text_lines", "OutsideSnippetEdit",
           "build_prompt", "snippet_base_indent", "task_record", "PROMPT_VERSION"]

PROMPT_VERSION = "rcbhub-prompt-1"


def snippet_base_indent(lines: list[str], snippet: Snippet) -> str:
    """The indentation of the snippet's least-indented code line (the tag's if it has none)."""
    body = [lines[i] for i in range(snippet.start_line, snippet.end_line - 1) if is_code_line(lines[i])]
    body = [line for line in body if not TAG_RE.match(line)]
    if not body:
        return snippet.indent
    return min((line[: len(line) - len(line.lstrip())] for line in body), key=len)


def masked_parts(lines: list[str], snippet: Snippet) -> tuple[list[str], list[str], list[str]]:
    """The masked file's lines in three parts: before the snippet, the two TODO lines, after it."""
    indent = snippet_base_indent(lines, snippet)
    noun = "line" if snippet.weight == 1 else "lines"
    todo = [f'{indent}# TODO: Implement block "{snippet.name}"', f"{indent}# Approximately {snippet.weight} {noun} of code."]
    before: list[str] = []
    after: list[str] = []
    for number, line in enumerate(lines, start=1):
        if snippet.start_line <= number <= snippet.end_line or TAG_RE.match(line):
            continue
        (before if number < snippet.start_line else after).append(line)
    return before, todo, after


def masked_file(lines: list[str], snippet: Snippet) -> str:
    """Replace the snippet's body by the two TODO lines and drop every other tag line."""
    before, todo, after = masked_parts(lines, snippet)
    return "\n".join(before + todo + after) + "\n"


def text_lines(text: str) -> list[str]:
    """A file's lines with CRLF/CR line endings and a final newline (present or not) normalised away."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


class OutsideSnippetEdit(ValueError):
    """An edited file that differs from the masked file outside the snippet: the first such line."""

    def __init__(self, line: int, expected: str | None, found: str | None):
        self.line, self.expected, self.found = line, expected, found
        if found is None:
            what = f"the file ends before line {line}, which the masked file has: {_shown(expected)}"
        elif expected is None:
            what = f"line {line} is not in the masked file: {_shown(found)}"
        else:
            what = f"line {line} is {_shown(found)} where the masked file has {_shown(expected)}"
        super().__init__(f"the file differs from the masked file outside the snippet: {what}; "
                         "only the snippet's lines (the TODO block) may change")


def _shown(line: str | None) -> str:
    text = repr(line)
    return text if len(text) <= 120 else text[:117] + "..."


def snippet_from_edited_file(lines: list[str], snippet: Snippet, edited: str) -> list[str]:
    """The snippet's lines of a whole edited masked file; OutsideSnippetEdit when anything else changed.

    ``lines`` are the annotated file's; the edited file must equal its masked file everywhere but in
    place of the two TODO lines (line endings and the final newline normalised).
    """
    before, _, after = masked_parts(lines, snippet)
    got = text_lines(edited)
    for index, expected in enumerate(before):
        if index >= len(got):
            raise OutsideSnippetEdit(index + 1, expected, None)
        if got[index] != expected:
            raise OutsideSnippetEdit(index + 1, expected, got[index])
    # the part after the snippet is matched from the file's end, so an edit there is named exactly
    for back, expected in enumerate(reversed(after), start=1):
        index = len(got) - back
        if index < len(before):  # the file is shorter than what surrounds the snippet
            raise OutsideSnippetEdit(len(got) + 1, after[len(after) - back], None)
        if got[index] != expected:
            raise OutsideSnippetEdit(index + 1, expected, got[index])
    return got[len(before): len(got) - len(after)]


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
