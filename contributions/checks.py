"""The automatic checks of a contributed paper, run with the engine; no Django here.

``checks_run`` gets a one-paper problem set (papers.yaml + the paper folder) and ``run``, what runs
test tasks (on the site: ``scoring.evaluate.tasks_run`` in the one sandbox of scoring, so a
contribution is checked as its paper will be scored), and returns the report as plain JSON-able
data: one entry per check (``ok``, ``failed`` or ``skipped`` with its details) and one row per snippet.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from benchmark_core.masking import snippet_base_indent
from benchmark_core.problemset import Paper, validate_problemset
from benchmark_core.runner import Task, TestRun, reference_code

__all__ = ["CheckSettings", "TasksRun", "checks_run", "requirements_check", "requirements_parse", "CHECK_TITLES"]

OK, FAILED, SKIPPED = "ok", "failed", "skipped"
CHECK_TITLES = {
    "archive": "Archive unpacked safely",
    "tags": "Snippet tags are valid",
    "reference": "The reference code passes the test",
    "blanked": "Every snippet, blanked, fails the test",
    "repeatable": "Three reference runs agree",
    "runtime": "Runtime per snippet within budget",
    "requirements": "Requirements installable into the sandbox image",
}
REPEATS = 3


@dataclass(frozen=True)
class CheckSettings:
    runtime_budget: float = 30.0  # seconds one test run may take
    timeout: float = 60.0  # a run is killed after this
    python: str | None = None  # interpreter of the sandbox image (for the requirements check)
    backend: str = "local"
    pip_timeout: float = 300.0


#: runs test tasks: ``run(tasks, timeout=seconds, progress=callback)`` -> their runs, in task order
TasksRun = Callable[..., list[TestRun]]


def _check(key: str, status: str, summary: str, details: list[str] | None = None) -> dict[str, Any]:
    return {"key": key, "title": CHECK_TITLES[key], "status": status, "summary": summary, "details": details or []}


def _last_line(run: TestRun) -> str:
    lines = [ln for ln in run.output_tail.splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _rel(path: str, root: Path) -> str:
    try:
        return str(Path(path).relative_to(root))
    except ValueError:
        return path


def requirements_parse(lines: list[str]) -> tuple[list[str], list[str]]:
    """Keep plain named requirements; options, URLs and local paths are refused (they run or fetch code)."""
    good, problems = [], []
    for raw in lines:
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-"):
            problems.append(f"{line!r}: pip options are not accepted in requirements")
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            problems.append(f"{line!r}: not a valid requirement ({exc})")
            continue
        if req.url:
            problems.append(f"{line!r}: URL and path requirements are not accepted; name a package on PyPI")
            continue
        good.append(str(req))
    return good, problems


def requirements_check(requirements: list[str], *, settings: CheckSettings,
                       image_builder: Callable[[list[str]], str] | None = None) -> dict[str, Any]:
    """Check the requirements can be installed where the tests run; say how it was checked."""
    reqs, problems = requirements_parse(requirements)
    if problems:
        return _check("requirements", FAILED, "some requirement lines are refused", problems)
    if not reqs:
        return _check("requirements", OK, "no extra requirements: the sandbox image as it is")
    if image_builder is not None:
        try:
            image = image_builder(reqs)
        except Exception as exc:  # the builder's own error says what failed (pip output)
            return _check("requirements", FAILED, f"building the environment image failed: {exc}"[:2000], reqs)
        return _check("requirements", OK, f"environment image {image} built (docker backend)", reqs)
    python = settings.python or sys.executable
    with tempfile.TemporaryDirectory(prefix="rcb-reqs-") as tmp:
        req_file = Path(tmp) / "requirements.txt"
        req_file.write_text("\n".join(reqs) + "\n", encoding="utf-8")
        report = Path(tmp) / "report.json"
        # --only-binary: resolving must never build an sdist, which would run the contributor's setup.py
        argv = [python, "-m", "pip", "install", "--dry-run", "--quiet", "--only-binary=:all:",
                "--disable-pip-version-check", "--no-input", "--report", str(report), "-r", str(req_file)]
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "PIP_INDEX_URL", "HTTPS_PROXY", "https_proxy")}
        method = "pip install --dry-run --only-binary=:all: with the sandbox's interpreter"
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=settings.pip_timeout, env=env, cwd=tmp)
        except subprocess.TimeoutExpired:
            return _check("requirements", FAILED, f"resolving took longer than {settings.pip_timeout:.0f}s ({method})", reqs)
        except OSError as exc:
            return _check("requirements", FAILED, f"pip could not start: {exc}", reqs)
        if proc.returncode != 0:
            tail = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()][-15:]
            return _check("requirements", FAILED, f"pip cannot install them ({method})", tail)
        try:
            planned = json.loads(report.read_text(encoding="utf-8")).get("install", [])
            names = [f"{p['metadata']['name']}=={p['metadata']['version']}" for p in planned]
        except (OSError, ValueError, KeyError, TypeError):
            names = []
        if not names:
            return _check("requirements", OK, f"already installed in the sandbox's interpreter ({method})", reqs)
        # bwrap and local run the host's interpreter: what pip would add is not there until an operator adds it
        return _check("requirements", OK,
                      f"installable ({method}), but the sandbox's interpreter lacks {len(names)} package(s): "
                      "an operator must install them (the docker backend builds them into an image)",
                      reqs + [f"would install: {', '.join(names)}"])


def _blank_code(paper: Paper, snip) -> tuple[str, ...]:
    """A body of a single ``pass``: the code still parses, so only the test can notice it is gone."""
    return (snippet_base_indent(paper.files[snip.file].lines, snip) + "pass",)


def checks_run(
    pset_root: Path,
    paper_id: str,
    *,
    run: TasksRun,
    settings: CheckSettings,
    archive_check: dict[str, Any] | None = None,
    requirements: list[str] | None = None,
    image_builder: Callable[[list[str]], str] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Run every check on one paper of ``pset_root``; never raises for a bad paper.

    ``progress(done, total)`` is called after each test run.
    """
    started = time.monotonic()
    checks: list[dict[str, Any]] = [archive_check] if archive_check else []
    report: dict[str, Any] = {"paper": paper_id, "backend": settings.backend, "checks": checks, "snippets": []}
    paper, problems = _tags_check(pset_root, paper_id, report)
    if paper is not None and requirements is None:
        requirements = paper.requirements
    req_check = requirements_check(requirements or [], settings=settings, image_builder=image_builder)
    checks.append(req_check)
    if problems or paper is None or req_check["status"] != OK:
        # without valid tags there is nothing to run; without the requirements the runs prove nothing
        why = "needs valid tags first" if problems or paper is None else "needs installable requirements first"
        for key in ("reference", "repeatable", "blanked", "runtime"):
            checks.append(_check(key, SKIPPED, why))
        return _finish(report, started)
    _runs_check(paper, report, run=run, settings=settings, progress=progress)
    return _finish(report, started)


def _tags_check(pset_root: Path, paper_id: str, report: dict[str, Any]) -> tuple[Paper | None, list]:
    """The tags' check, and the snippets' rows of the report; the paper when it loads."""
    pset, problems = validate_problemset(pset_root)
    paper = next((p for p in pset.papers if p.id == paper_id), None)
    if problems or paper is None:
        details = [f"{_rel(p.path, pset_root / paper_id)}:{p.line}: {p.message}" for p in problems]
        report["checks"].append(_check("tags", FAILED, f"{len(problems)} problem(s) in the tags or files", details))
        return paper, problems
    depth = max((s.depth for s in paper.snippets), default=0) + 1
    report["checks"].append(_check("tags", OK, f"{len(paper.snippets)} snippets in {len(paper.annotated_files)} "
                                               f"file(s), {paper.total_weight} code lines, nesting up to {depth} levels"))
    report["snippets"] = [
        {"file": s.file, "name": s.name, "parent": s.parent, "depth": s.depth, "weight": s.weight,
         "start_line": s.start_line, "end_line": s.end_line}
        for s in paper.snippets
    ]
    return paper, problems


def _runs_check(paper: Paper, report: dict[str, Any], *, run: TasksRun, settings: CheckSettings,
                progress: Callable[[int, int], None] | None) -> None:
    """The checks that run the paper's test: reference, repeatable, blanked, runtime."""
    checks = report["checks"]
    first = paper.snippets[0]
    ref_tasks = [Task(paper, first, reference_code(paper, first), sample=i) for i in range(REPEATS)]
    blank_tasks = [Task(paper, s, _blank_code(paper, s)) for s in paper.snippets]
    total, done = len(ref_tasks) + len(blank_tasks), 0

    def tick(_run: TestRun) -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    ref_runs = run(ref_tasks, timeout=settings.timeout, progress=tick)
    ref_ok = ref_runs[0].passed
    checks.extend(_reference_checks(ref_runs))
    slowest = max(r.seconds for r in ref_runs)
    blank_runs: list[TestRun] = []
    if not ref_ok:
        checks.append(_check("blanked", SKIPPED, "needs a passing reference first"))
    else:
        blank_runs = run(blank_tasks, timeout=settings.timeout, progress=tick)
        for row, blank in zip(report["snippets"], blank_runs):
            row["blanked_passed"] = blank.passed
            row["blanked_category"] = blank.category
            row["seconds"] = round(blank.seconds, 3)
        checks.append(_blanked_check(blank_runs))
    # the budget is about the reference: a blanked body may legitimately loop until the timeout
    notes = [f"{r.file}: {r.snippet}, blanked, ran into the {settings.timeout:.0f}s timeout" for r in blank_runs if r.timed_out]
    if slowest > settings.runtime_budget or any(r.timed_out for r in ref_runs):
        checks.append(_check("runtime", FAILED, f"the reference run takes {slowest:.2f}s; the budget is "
                                                f"{settings.runtime_budget:g}s per run", notes))
    else:
        checks.append(_check("runtime", OK, f"reference runs take up to {slowest:.2f}s (budget {settings.runtime_budget:g}s)",
                             notes))


def _reference_checks(ref_runs: list[TestRun]) -> list[dict[str, Any]]:
    """The reference check (the unchanged paper passes) and the repeatable one (its runs agree)."""
    run = ref_runs[0]
    if run.passed:
        reference = _check("reference", OK, f"passed in {run.seconds:.2f}s")
    else:
        reference = _check("reference", FAILED, f"the unchanged paper fails its test ({run.category}, exit {run.exit_code})",
                           run.output_tail.splitlines()[-30:])
    verdicts = [(r.passed, r.exit_code, r.timed_out) for r in ref_runs]
    if len(set(verdicts)) == 1:
        return [reference, _check("repeatable", OK, f"{REPEATS} runs: all {'passed' if run.passed else 'failed the same way'}")]
    return [reference, _check(
        "repeatable", FAILED, "the reference runs disagree: the test is not deterministic",
        [f"run {i + 1}: {'passed' if r.passed else 'failed'} (exit {r.exit_code}) — {_last_line(r)}"
         for i, r in enumerate(ref_runs)])]


def _blanked_check(blank_runs: list[TestRun]) -> dict[str, Any]:
    weak = [r for r in blank_runs if r.passed]
    if weak:
        return _check(
            "blanked", FAILED,
            f"{len(weak)} weak snippet(s): the test still passes when they are replaced by 'pass': "
            + ", ".join(f"{r.snippet}" for r in weak),
            [f"{r.file}: {r.snippet}" for r in weak],
        )
    return _check("blanked", OK, f"all {len(blank_runs)} snippets fail when replaced by 'pass'")


_ORDER = list(CHECK_TITLES)


def _finish(report: dict[str, Any], started: float) -> dict[str, Any]:
    report["checks"].sort(key=lambda c: _ORDER.index(c["key"]))
    report["passed"] = all(c["status"] == OK for c in report["checks"])
    report["seconds"] = round(time.monotonic() - started, 2)
    return report

