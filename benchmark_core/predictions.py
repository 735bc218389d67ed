"""Read a predictions file (JSON lines) and list every bad line at once.

A line answers with ``completion`` (the model's raw answer), or, as agents answer, with the whole
edited masked file (``file_content``) or a unified diff against it (``patch``): those are accepted
only when nothing outside the snippet changed, and become the completion of the snippet's lines.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Callable

from .completions import completion_lines
from .masking import masked_file, snippet_from_edited_file
from .patches import apply_unified_diff
from .problemset import Paper, ProblemSet

__all__ = ["Prediction", "LineProblem", "parse_predictions", "PredictionsError", "MAX_DEPTH", "MAX_SAMPLE",
           "MAX_FILE_CHARS", "ANSWER_FIELDS", "text_problem", "edited_file_completion"]

#: deepest nesting of arrays/objects a line may have: a prediction is one flat object, a little
#: metadata beside it is fine; deeper input is refused before the parser's recursion can fail on it
MAX_DEPTH = 16
#: highest sample index (stored in 32-bit columns; pass@k needs a few samples, not millions)
MAX_SAMPLE = 9999
#: longest whole file or patch a line may give (characters); annotated files are a few thousand lines at most
MAX_FILE_CHARS = 2_000_000
#: the ways a line may answer, exactly one per line
ANSWER_FIELDS = ("completion", "file_content", "patch")
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


def edited_file_completion(paper: Paper, name: str, file: str, *, file_content: str | None = None,
                           patch: str | None = None) -> str:
    """The completion of a snippet answered by its whole edited masked file or a diff against it.

    ValueError (OutsideSnippetEdit, PatchError) names the first line changed outside the snippet.
    The completion is the snippet's lines as bare code, fenced when the code holds a fence itself,
    so that scoring it as any completion gives back exactly those lines.
    """
    snippet = paper.snippet(name, file or None)
    lines = paper.files[snippet.file].lines
    if patch is not None:
        file_content = apply_unified_diff(masked_file(lines, snippet), patch, file=snippet.file)
    body = snippet_from_edited_file(lines, snippet, file_content or "")
    while body and not body[0].strip():
        body.pop(0)
    while body and not body[-1].strip():
        body.pop()
    for completion in ("\n".join(body), "```python\n" + "\n".join(body) + "\n```"):
        if completion_lines(completion) == body:
            return completion
    raise ValueError("the snippet's code holds a ``` fence line that no completion can carry; give it as 'completion'")


def _paper_with_files(papers: dict[str, Any] | None, paper_id: str,
                      paper_files: Callable[[str], Paper | None] | None) -> Paper | None:
    """The paper with its files, for a line answering with a file or a patch (None: none to be had)."""
    if papers is None:
        return None
    if isinstance(papers[paper_id], Paper):
        return papers[paper_id]
    return paper_files(paper_id) if paper_files is not None else None


class _Refused(Exception):
    """Why one line is left out (its problem, reported with its number)."""


def parse_predictions(data: bytes, pset: ProblemSet | None = None, *,
                      paper_files: Callable[[str], Paper | None] | None = None) -> tuple[list[Prediction], list[LineProblem]]:
    """Parse JSON lines; check ids against ``pset`` when given. Returns the valid lines and every problem.

    ``file_content``/``patch`` answers need the papers' files: ``pset``'s when it holds them, else
    ``paper_files(paper_id)`` (called only for such lines).
    """
    predictions: list[Prediction] = []
    problems: list[LineProblem] = []
    seen: dict[tuple[str, str, str, int], int] = {}
    papers = {p.id: p for p in pset.papers} if pset is not None else None
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            obj = _line_object(raw)
            answer_field, sample = _line_fields(obj)
            prediction = _line_prediction(obj, answer_field, sample, number, papers, paper_files)
            key = (prediction.paper, prediction.file, prediction.snippet, sample)
            if key in seen:
                raise _Refused(f"duplicate prediction for {prediction.paper}/{prediction.snippet} sample {sample} "
                               f"(first on line {seen[key]})")
        except _Refused as exc:
            problems.append(LineProblem(number, str(exc)))
            continue
        seen[key] = number
        predictions.append(prediction)
    return predictions, problems


def _line_object(raw: bytes) -> dict:
    """The JSON object of one line (_Refused: not UTF-8, nested too deep, not JSON, not an object)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _Refused(f"not UTF-8 (byte {exc.start}: {raw[exc.start:exc.start + 1]!r})") from None
    if text.count("[") + text.count("{") > MAX_DEPTH and _nesting_depth(text) > MAX_DEPTH:
        raise _Refused(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        obj = json.loads(text, parse_float=_finite_float, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise _Refused(f"malformed JSON: {exc.msg} (column {exc.colno})") from None
    except _BadNumber as exc:
        raise _Refused(str(exc)) from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer longer than Python converts
        raise _Refused(f"cannot read this JSON: {str(exc).split(';')[0][:200]}") from None
    if not isinstance(obj, dict):
        raise _Refused("each line must be a JSON object")
    return obj


def _line_fields(obj: dict) -> tuple[str, int]:
    """The line's answer field and sample, once its fields are there, of their types, storable text
    and within bounds (_Refused otherwise)."""
    missing = [k for k in ("paper", "snippet") if k not in obj]
    given = [k for k in ANSWER_FIELDS if k in obj]
    if not given:
        missing.append("completion (or file_content, or patch)")
    if missing:
        raise _Refused(f"missing field(s): {', '.join(missing)}")
    if len(given) > 1:
        raise _Refused(f"give one of completion, file_content, patch, not {' and '.join(given)}")
    answer_field = given[0]
    bad = [k for k in ("paper", "snippet", answer_field) if not isinstance(obj[k], str)]
    if obj.get("file") is not None and not isinstance(obj.get("file"), str):
        bad.append("file")
    if bad:
        raise _Refused(f"field(s) must be strings: {', '.join(bad)}")
    text_problems = [
        why for k in ("paper", "snippet", "file", answer_field)
        if isinstance(obj.get(k), str) and (why := text_problem(k, obj[k]))
    ]
    if text_problems:
        raise _Refused("; ".join(text_problems))
    if answer_field != "completion" and len(obj[answer_field]) > MAX_FILE_CHARS:
        raise _Refused(f"'{answer_field}' has {len(obj[answer_field])} characters; at most {MAX_FILE_CHARS} are read")
    sample = obj.get("sample", 0)
    if not isinstance(sample, int) or isinstance(sample, bool) or not 0 <= sample <= MAX_SAMPLE:
        shown = repr(sample) if len(repr(sample)) <= 40 else repr(sample)[:40] + "..."
        raise _Refused(f"'sample' must be an integer from 0 to {MAX_SAMPLE}, got {shown}")
    return answer_field, sample


def _line_prediction(obj: dict, answer_field: str, sample: int, number: int, papers: dict[str, Any] | None,
                     paper_files: Callable[[str], Paper | None] | None) -> Prediction:
    """The prediction of a well-formed line: its paper and snippet known to ``papers`` (when given), a
    file or patch answer turned into the snippet's completion (_Refused otherwise)."""
    paper_id, name, file = obj["paper"], obj["snippet"], obj.get("file") or ""
    completion = obj[answer_field]
    if papers is not None:
        paper = papers.get(paper_id)
        if paper is None:
            raise _Refused(f"unknown paper {paper_id!r}")
        try:
            file = paper.snippet(name, file or None).file
        except KeyError as exc:
            raise _Refused(f"unknown snippet: {exc.args[0]}") from None
    if answer_field != "completion":
        source = _paper_with_files(papers, paper_id, paper_files)
        if source is None:
            raise _Refused(f"'{answer_field}' answers need the paper's files to be read")
        try:
            completion = edited_file_completion(source, name, file, **{answer_field: completion})
        except (ValueError, KeyError) as exc:
            raise _Refused(f"{answer_field}: {exc}") from None
    return Prediction(paper_id, file, name, sample, completion, number)
