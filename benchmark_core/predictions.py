"""Read a predictions file (JSON lines) and list every bad line at once."""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from .problemset import ProblemSet

__all__ = ["Prediction", "LineProblem", "parse_predictions", "PredictionsError", "MAX_DEPTH", "MAX_SAMPLE", "text_problem"]

#: deepest nesting of arrays/objects a line may have: a prediction is one flat object, a little
#: metadata beside it is fine; deeper input is refused before the parser's recursion can fail on it
MAX_DEPTH = 16
#: highest sample index (stored in 32-bit columns; pass@k needs a few samples, not millions)
MAX_SAMPLE = 9999
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")


@dataclass(frozen=True)
class Prediction:
    paper: str
    file: str
    snippet: str
    sample: int
    completion: str
    line: int = 0


@dataclass(frozen=True)
class LineProblem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class PredictionsError(ValueError):
    def __init__(self, problems: list[LineProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class _BadNumber(ValueError):
    """A number JSON allows but a prediction must not hold (NaN, Infinity, an overflowing float)."""


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _BadNumber(f"the number {text[:40]} is not finite")
    return value


def _no_constant(name: str) -> Any:
    raise _BadNumber(f"{name} is not a number JSON allows here (non-finite numbers are refused)")


def _nesting_depth(text: str) -> int:
    """The deepest bracket nesting of a JSON text, brackets inside strings not counted; no recursion."""
    brackets = _NOT_BRACKET.sub("", _STRING.sub("", text))
    depth = deepest = 0
    for char in brackets:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def text_problem(field: str, value: str) -> str | None:
    """Why a string cannot be stored as text (NUL bytes, lone surrogates), or None."""
    if "\x00" in value:
        return f"'{field}' holds a NUL byte (\\u0000), which cannot be stored"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"'{field}' holds a lone surrogate (\\u{ord(value[exc.start]):04x}), which is not valid Unicode text"
    return None


def parse_predictions(data: bytes, pset: ProblemSet | None = None) -> tuple[list[Prediction], list[LineProblem]]:
    """Parse JSON lines; check ids against ``pset`` when given. Returns the valid lines and every problem."""
    predictions: list[Prediction] = []
    problems: list[LineProblem] = []
    seen: dict[tuple[str, str, str, int], int] = {}
    papers = {p.id: p for p in pset.papers} if pset is not None else None
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(LineProblem(number, f"not UTF-8 (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})"))
            continue
        if text.count("[") + text.count("{") > MAX_DEPTH and _nesting_depth(text) > MAX_DEPTH:
            problems.append(LineProblem(number, f"JSON nested deeper than {MAX_DEPTH} levels"))
            continue
        try:
            obj = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
        except json.JSONDecodeError as exc:
            problems.append(LineProblem(number, f"malformed JSON: {exc.msg} (column {exc.colno})"))
            continue
        except _BadNumber as exc:
            problems.append(LineProblem(number, str(exc)))
            continue
        except (ValueError, RecursionError) as exc:  # e.g. an integer longer than Python converts
            problems.append(LineProblem(number, f"cannot read this JSON: {str(exc).split(';')[0][:200]}"))
            continue
        if not isinstance(obj, dict):
            problems.append(LineProblem(number, "each line must be a JSON object"))
            continue
        missing = [k for k in ("paper", "snippet", "completion") if k not in obj]
        if missing:
            problems.append(LineProblem(number, f"missing field(s): {', '.join(missing)}"))
            continue
        bad = [k for k in ("paper", "snippet", "completion") if not isinstance(obj[k], str)]
        if obj.get("file") is not None and not isinstance(obj.get("file"), str):
            bad.append("file")
        if bad:
            problems.append(LineProblem(number, f"field(s) must be strings: {', '.join(bad)}"))
            continue
        text_problems = [
            why for k in ("paper", "snippet", "file", "completion")
            if isinstance(obj.get(k), str) and (why := text_problem(k, obj[k]))
        ]
        if text_problems:
            problems.append(LineProblem(number, "; ".join(text_problems)))
            continue
        sample = obj.get("sample", 0)
        if not isinstance(sample, int) or isinstance(sample, bool) or not 0 <= sample <= MAX_SAMPLE:
            shown = repr(sample) if len(repr(sample)) <= 40 else repr(sample)[:40] + "..."
            problems.append(LineProblem(number, f"'sample' must be an integer from 0 to {MAX_SAMPLE}, got {shown}"))
            continue
        paper_id, name, file = obj["paper"], obj["snippet"], obj.get("file") or ""
        if papers is not None:
            paper = papers.get(paper_id)
            if paper is None:
                problems.append(LineProblem(number, f"unknown paper {paper_id!r}"))
                continue
            try:
                file = paper.snippet(name, file or None).file
            except KeyError as exc:
                problems.append(LineProblem(number, f"unknown snippet: {exc.args[0]}"))
                continue
        key = (paper_id, file, name, sample)
        if key in seen:
            problems.append(
                LineProblem(number, f"duplicate prediction for {paper_id}/{name} sample {sample} (first on line {seen[key]})")
            )
            continue
        seen[key] = number
        predictions.append(Prediction(paper_id, file, name, sample, obj["completion"], number))
    return predictions, problems
