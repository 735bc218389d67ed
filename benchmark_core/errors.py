"""Classify a failed test run into one deterministic error category."""
from __future__ import annotations

import re
import signal as _signal

__all__ = ["CATEGORIES", "classify", "exception_names"]

#: every category, in the order reports list them
CATEGORIES: tuple[str, ...] = (
    "syntax",
    "name",
    "type",
    "attribute",
    "index",
    "import",
    "logic",
    "timeout",
    "crash",
    "other",
    "missing",
    # the paper's environment failed (its reference code does not pass there): never the completion's fault
    "environment",
    # the run tampered with the harness or its proof of run (benchmark_core/tamper.py, docs/sandboxes.md)
    "tampering",
    # the host could not read or judge the completion (nested past the parser's limits, not Unicode
    # text ...): it was not run (runner.invalid_run)
    "invalid",
)

_BY_EXCEPTION = {
    "SyntaxError": "syntax",
    "IndentationError": "syntax",
    "TabError": "syntax",
    "NameError": "name",
    "UnboundLocalError": "name",
    "TypeError": "type",
    "AttributeError": "attribute",
    "IndexError": "index",
    "KeyError": "index",
    "AxisError": "index",
    "ImportError": "import",
    "ModuleNotFoundError": "import",
    "AssertionError": "logic",
    "MemoryError": "crash",
    "OutOfMemoryError": "crash",
}

# when a run shows several exceptions (several failing tests, chained tracebacks), the most
# specific cause wins; a wrong number (logic) is what is left when nothing broke outright
_PRIORITY = ("syntax", "import", "name", "attribute", "type", "index", "crash", "other", "logic")

_TRACEBACK = "Traceback (most recent call last):"
_EXC_LINE = re.compile(r"^(?P<qual>(?:[A-Za-z_][\w]*\.)*(?P<name>[A-Za-z_]\w*))(?::|$)")
_NUL_SOURCE = re.compile(r"(?m)^(?:SyntaxError|ValueError): source code (?:string )?cannot contain null bytes")
_MISMATCH = re.compile(r"(?i)\b(failed|mismatch|not (?:all)?close|not equal|differs?|wrong)\b")


def exception_names(output: str) -> list[str]:
    """Exception class names, in order, that end each traceback found in ``output``."""
    names: list[str] = []
    lines = output.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != _TRACEBACK:
            i += 1
            continue
        i += 1
        # skip frames: indented lines, until the first unindented line that names an exception
        while i < len(lines):
            line = lines[i]
            if line and not line[0].isspace() and not line.startswith("Traceback"):
                match = _EXC_LINE.match(line)
                if match and (match["name"].endswith(("Error", "Exception", "Exit", "Interrupt", "Warning"))
                              or match["name"] in _BY_EXCEPTION or ":" in line):
                    names.append(match["name"])
                break
            i += 1
    return names


def _category_of(name: str) -> str:
    return _BY_EXCEPTION.get(name, "other")


def classify(
    *,
    exit_code: int | None,
    stdout: str,
    stderr: str,
    timed_out: bool = False,
    signal: int | None = None,
    oom: bool = False,
) -> str:
    """Return the category of a failed run: the same output always gives the same category."""
    if timed_out:
        return "timeout"
    if oom:
        return "crash"
    if signal is not None or (exit_code is not None and exit_code < 0):
        return "crash"
    if exit_code is not None and exit_code > 128 and exit_code - 128 in {s.value for s in _signal.Signals}:
        # a shell or container runtime reports death by signal N as 128+N
        if not exception_names(stderr + "\n" + stdout):
            return "crash"
    if _NUL_SOURCE.search(stderr + "\n" + stdout):
        # a NUL byte in source: SyntaxError in newer CPython 3.11 releases, ValueError in older ones
        return "syntax"
    names = exception_names(stderr) + exception_names(stdout)
    if names:
        cats = {_category_of(n) for n in names}
        for cat in _PRIORITY:
            if cat in cats:
                return cat
    text = stderr + "\n" + stdout
    for name, cat in _BY_EXCEPTION.items():
        if re.search(rf"(?m)^(?:\w+\.)*{name}\b", text):
            return cat
    if _MISMATCH.search(text):
        return "logic"
    return "other"
