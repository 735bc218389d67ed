"""Automatic checks on uploaded completions, shown to reviewers: nothing here rejects a submission.

A completion that ends the process, touches signals or patches the test machinery can make a
test script report success without computing anything; a completion identical to the reference
code suggests the public repository was copied (the benchmark cannot tell it from knowledge).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable

from benchmark_core.completions import completion_lines
from benchmark_core.tamper import parser_gives_up

__all__ = ["FLAG_KINDS", "CompletionInput", "completion_flags", "normalized_code", "submission_flags_compute"]

#: kind -> (label, patterns); patterns are matched on the extracted code, one hit is enough
FLAG_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "exits": (
        "ends the process",
        (r"\bos\s*\.\s*_exit\b", r"\bsys\s*\.\s*exit\b", r"(?<![\w.])exit\s*\(", r"(?<![\w.])quit\s*\(",
         r"\bSystemExit\b", r"\bos\s*\.\s*abort\b", r"\bos\s*\.\s*kill\b"),
    ),
    "signals": (
        "touches signals",
        (r"\bimport\s+signal\b", r"\bfrom\s+signal\s+import\b", r"\bsignal\s*\.\s*(signal|alarm|setitimer|SIG\w*)",
         r"\batexit\b", r"\bfaulthandler\b"),
    ),
    "monkeypatch": (
        "patches test machinery",
        (r"\bunittest\b", r"\bbuiltins\b", r"__builtins__", r"\bsys\s*\.\s*modules\b", r"\bsys\s*\.\s*settrace\b",
         r"\bsys\s*\.\s*(stdout|stderr)\s*=", r"\bsys\s*\.\s*excepthook\b", r"\bassert\w*\s*=(?!=)",
         r"\.\s*assert\w*\s*=(?!=)", r"\bsetattr\s*\(\s*(np|numpy|torch|unittest|builtins|sys)\b",
         r"\bTestCase\b", r"\binspect\s*\.\s*(stack|currentframe)\b", r"\bsys\s*\.\s*_getframe\b"),
    ),
    # not a pattern: the interpreter's parser gives up on it (tamper.parser_gives_up); its run is not
    # made (category invalid), and it costs the completions beside it nothing
    "unreadable": ("nested too deeply for the parser", ()),
}
_COMPILED = {kind: [re.compile(p) for p in patterns] for kind, (_, patterns) in FLAG_KINDS.items()}


@dataclass(frozen=True)
class CompletionInput:
    paper: str
    snippet: str
    sample: int
    completion: str
    reference: str


def normalized_code(text: str) -> str:
    """Code with every run of whitespace made one space: layout changes do not hide a copy."""
    return " ".join(text.split())


def completion_flags(code: str) -> list[str]:
    """The flag kinds whose patterns occur in ``code``, and ``unreadable`` when the parser gives up on it."""
    kinds = [kind for kind, patterns in _COMPILED.items() if any(p.search(code) for p in patterns)]
    return kinds + ["unreadable"] if parser_gives_up(code) else kinds


def submission_flags_compute(items: Iterable[CompletionInput]) -> dict:
    """Flags of a whole submission: flagged completions by kind and the share copied from the reference."""
    flagged: dict[str, list[dict]] = {kind: [] for kind in FLAG_KINDS}
    total = identical = 0
    for item in items:
        total += 1
        code = "\n".join(completion_lines(item.completion))
        for kind in completion_flags(code):
            flagged[kind].append({"paper": item.paper, "snippet": item.snippet, "sample": item.sample})
        if item.reference.strip() and normalized_code(code) == normalized_code(item.reference):
            identical += 1
    return {
        "checked": total,
        "identical_to_reference": identical,
        "identical_share": round(100.0 * identical / total, 2) if total else 0.0,
        **flagged,
    }
