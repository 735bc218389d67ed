"""Turn a raw model answer into the code lines that replace a snippet's body."""
from __future__ import annotations

import re
import textwrap

__all__ = ["extract_code", "completion_lines", "insert_completion"]

_OPEN_RE = re.compile(r"[ \t]*```[ \t]*(?P<lang>[\w+-]*)")
_CLOSE_RE = re.compile(r"[ \t]*```[ \t]*")
_PYTHON_TAGS = {"python", "py", "python3", "py3", ""}


def extract_code(answer: str) -> str:
    """Return the last fenced python block of an answer, or the answer itself when it has none.

    A block opens on a line starting with three backticks (an optional language tag after them)
    and ends at the next line holding only three backticks; read line by line, in linear time
    whatever the answer holds (an answer of opening fences alone costs no more than its length)."""
    lines = answer.split("\n")
    closings = [i for i, line in enumerate(lines) if _CLOSE_RE.fullmatch(line)]
    blocks: list[tuple[str, str]] = []
    after = 0  # index into ``closings``: the first closing line past the current line
    i = 0
    while i < len(lines) - 1:  # an opening line needs the line break after it
        opening = _OPEN_RE.match(lines[i])
        if opening is None:
            i += 1
            continue
        while after < len(closings) and closings[after] <= i:
            after += 1
        if after == len(closings):
            break  # no closing line after this one: none after any later opening either
        end = closings[after]
        blocks.append((opening["lang"], "".join(line + "\n" for line in lines[i + 1:end])))
        i = end + 1
    python = [body for lang, body in blocks if lang.lower() in _PYTHON_TAGS]
    return python[-1] if python else answer


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
