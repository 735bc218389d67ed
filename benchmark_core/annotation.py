"""Parse and validate paper2code snippet tags.

A snippet opens with ``# <paper2code name="NAME">`` and closes with
``# </paper2code name="NAME">`` at the same indentation. Snippets nest; the
tree they form runs from whole functions down to single lines.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = [
    "TAG_RE",
    "Problem",
    "Snippet",
    "FileAnnotations",
    "parse_annotations",
    "is_code_line",
    "count_code_lines",
]

TAG_RE = re.compile(
    r"""^(?P<indent>[ \t]*)\#\s*<(?P<close>/?)\s*paper2code\s+name\s*=\s*(?P<q>["'])(?P<name>.*?)(?P=q)\s*/?>\s*$"""
)


@dataclass(frozen=True)
class Problem:
    """One validation problem, printed as ``path:line: message``."""

    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


@dataclass
class Snippet:
    """A tagged snippet: lines are 1-based and point at the tag lines themselves."""

    name: str
    file: str
    start_line: int
    end_line: int
    indent: str
    parent: str | None = None
    depth: int = 0
    weight: int = 0
    code: str = ""
    children: list[str] = field(default_factory=list)

    @property
    def body_range(self) -> tuple[int, int]:
        """0-based half-open range of the lines between the two tags."""
        return self.start_line, self.end_line - 1


@dataclass
class FileAnnotations:
    path: str
    lines: list[str]
    snippets: list[Snippet]
    problems: list[Problem]

    def snippet(self, name: str) -> Snippet:
        for snip in self.snippets:
            if snip.name == name:
                return snip
        raise KeyError(name)


def is_code_line(line: str) -> bool:
    """A code line is neither blank nor comment-only (tag lines are comments)."""
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def count_code_lines(lines: list[str]) -> int:
    return sum(1 for line in lines if is_code_line(line))


@dataclass
class _Open:
    name: str
    line: int  # 1-based
    indent: str


def _later_closes(tags: list[tuple[int, bool, str, str]]) -> dict[str, list[int]]:
    closes: dict[str, list[int]] = {}
    for lineno, is_close, name, _indent in tags:
        if is_close:
            closes.setdefault(name, []).append(lineno)
    return closes


def parse_annotations(text: str, path: str) -> FileAnnotations:
    """Parse every tag of one file; report every problem instead of stopping at the first."""
    lines = text.splitlines()
    tags: list[tuple[int, bool, str, str]] = []
    for idx, line in enumerate(lines, start=1):
        match = TAG_RE.match(line)
        if match:
            tags.append((idx, bool(match["close"]), match["name"], match["indent"]))
    pairing = _Pairing(path, tags)
    for lineno, is_close, name, indent in tags:
        if not name.strip():
            pairing.problem(lineno, "tag has an empty name")
        elif is_close:
            pairing.close(lineno, name, indent)
        else:
            pairing.open(lineno, name, indent)
    problems = pairing.problems
    for leftover in pairing.stack:
        problems.append(Problem(path, leftover.line, f'tag "{leftover.name}" is never closed'))

    snippets = _build_tree(lines, path, pairing.spans)
    for snip in snippets:
        if snip.weight == 0:
            problems.append(Problem(path, snip.start_line, f'snippet "{snip.name}" is empty (no code lines)'))
    problems.sort(key=lambda p: (p.line, p.message))
    return FileAnnotations(path=path, lines=lines, snippets=snippets, problems=problems)


class _Pairing:
    """Opening tags matched with their closing tags, in file order: the well-formed pairs (``spans``),
    the tags still open (``stack``) and every problem met; a tag that goes wrong is read as the
    likeliest mistake (a misspelt close, a forgotten one, tags that cross), so the rest still pair."""

    def __init__(self, path: str, tags: list[tuple[int, bool, str, str]]):
        self.path = path
        self.closes = _later_closes(tags)
        self.opens_at: dict[str, list[int]] = {}
        for lineno, is_close, name, _ in tags:
            if not is_close:
                self.opens_at.setdefault(name, []).append(lineno)
        self.problems: list[Problem] = []
        self.stack: list[_Open] = []
        self.spans: list[tuple[_Open, int]] = []  # (open, close line) of well-formed pairs
        self.seen_names: dict[str, int] = {}

    def closes_after(self, name: str, lineno: int) -> bool:
        return any(c > lineno for c in self.closes.get(name, ()))

    def opens_after(self, name: str, lineno: int) -> bool:
        return any(o > lineno for o in self.opens_at.get(name, ()))

    def problem(self, lineno: int, message: str) -> None:
        self.problems.append(Problem(self.path, lineno, message))

    def open(self, lineno: int, name: str, indent: str) -> None:
        if name in self.seen_names:
            self.problem(lineno, f'duplicate snippet name "{name}" (first opened at line {self.seen_names[name]})')
        else:
            self.seen_names[name] = lineno
        self.stack.append(_Open(name, lineno, indent))

    def close(self, lineno: int, name: str, indent: str) -> None:
        stack = self.stack
        if not stack or all(o.name != name for o in stack):
            if not stack or self.opens_after(name, lineno):
                self.problem(lineno, f'closing tag "{name}" has no matching opening tag')
                return
            top = stack[-1]
            self.problem(lineno, f'closing tag "{name}" does not match the innermost open tag "{top.name}" '
                                 f"(line {top.line})")
            if not self.closes_after(top.name, lineno):
                stack.pop()  # most likely a misspelt close of the innermost snippet
            return
        while stack[-1].name != name:
            inner = stack[-1]
            if self.closes_after(inner.name, lineno):
                self.problem(lineno, f'tags cross: "{name}" closes while "{inner.name}" (opened at line '
                                     f"{inner.line}) is still open")
                break  # the inner snippet stays open: it closes later
            self.problem(lineno, f'closing tag "{name}" does not match the innermost open tag "{inner.name}" '
                                 f"(line {inner.line}), which is never closed")
            stack.pop()
        opened = next(o for o in reversed(stack) if o.name == name)
        stack.remove(opened)
        if opened.indent != indent:
            self.problem(lineno, f'closing tag "{name}" is indented differently from its opening tag '
                                 f"(line {opened.line})")
        self.spans.append((opened, lineno))


def _build_tree(lines: list[str], path: str, spans: list[tuple[_Open, int]]) -> list[Snippet]:
    spans = sorted(spans, key=lambda s: (s[0].line, -s[1]))
    tag_lines = {o.line for o, _ in spans} | {end for _, end in spans}
    snippets: list[Snippet] = []
    for opened, end in spans:
        body = [
            lines[i - 1]
            for i in range(opened.line + 1, end)
            if i not in tag_lines and not TAG_RE.match(lines[i - 1])
        ]
        snippets.append(
            Snippet(
                name=opened.name,
                file=path,
                start_line=opened.line,
                end_line=end,
                indent=opened.indent,
                weight=count_code_lines(body),
                code="\n".join(body),
            )
        )
    # parent = the innermost span that strictly contains this one
    for snip in snippets:
        containers = [
            other
            for other in snippets
            if other is not snip and other.start_line < snip.start_line and other.end_line > snip.end_line
        ]
        if containers:
            parent = max(containers, key=lambda o: o.start_line)
            snip.parent = parent.name
            parent.children.append(snip.name)
            snip.depth = len(containers)
    return snippets
