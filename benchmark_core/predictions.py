"""Read a predictions file (JSON lines) and list every bad line at once."""
from __future__ import annotations

import json
from dataclasses import dataclass

from .problemset import ProblemSet

__all__ = ["Prediction", "LineProblem", "parse_predictions", "PredictionsError"]


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
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            problems.append(LineProblem(number, f"malformed JSON: {exc.msg} (column {exc.colno})"))
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
        sample = obj.get("sample", 0)
        if not isinstance(sample, int) or isinstance(sample, bool) or sample < 0:
            problems.append(LineProblem(number, f"'sample' must be a non-negative integer, got {sample!r}"))
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
