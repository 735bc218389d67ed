"""Turn a raw model answer into the code lines that replace a snippet's body."""
from __future__ import annotations

import re
import textwrap

__all__ = ["extract_code", "completion_lines", "insert_completion"]

_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*(?P<lang>[\w+-]*)[^\n]*\n(?P<body>.*?)^[ \t]*```[ \t]*$", re.S | re.M)
_PYTHON_TAGS = {"python", "py", "python3", "py3", ""}


def extract_code(answer: str) -> str:
    """Return the last fenced python block of an answer, or the answer itself when it has none."""
    blocks = [m for m in _FENCE_RE.finditer(answer) if m["lang"].lower() in _PYTHON_TAGS]
    if blocks:
        return blocks[-1]["body"]
    return answer


def completion_lines(answer: str, *, reindent: str | None = None) -> list[str]:
    """Code lines of an answer; ``reindent`` (opt-in, not the published rule) re-bases indentation."""
    code = extract_code(answer).replace("\r\n", "\n").replace("\r", "\n")
    lines = code.split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if reindent is not None and lines:
        dedented = textwrap.dedent("\n".join(lines).expandtabs(4)).split("\n")
        lines = [(reindent + line) if line.strip() else "" for line in dedented]
    return lines


def insert_completion(lines: list[str], start_line: int, end_line: int, code: list[str]) -> str:
    """Replace the lines strictly between the tag lines (1-based) by ``code``; keep the tags."""
    out = lines[:start_line] + code + lines[end_line - 1 :]
    return "\n".join(out) + "\n"
