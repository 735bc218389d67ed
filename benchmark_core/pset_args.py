"""The CLI's reading of a problem set named on the command line: the --papers list and the loader that reports."""
from __future__ import annotations

from typing import TextIO

from .problemset import ProblemSet, ProblemSetError, load_problemset

__all__ = ["_load", "_papers_arg"]


def _papers_arg(value: str | None) -> list[str] | None:
    return [p.strip() for p in value.split(",") if p.strip()] if value else None


def _load(pset_dir: str, papers: list[str] | None, err: TextIO) -> ProblemSet | None:
    try:
        return load_problemset(pset_dir, papers=papers)
    except ProblemSetError as exc:
        for problem in exc.problems:
            print(problem, file=err)
        print(f"{len(exc.problems)} problem(s) in {pset_dir}; nothing was done", file=err)
        return None
