"""Insert a completion, run the paper's test in a sandbox, and judge it by the published rule."""
from __future__ import annotations

import os
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import Callable, Iterable

from .annotation import Snippet
from .completions import completion_lines, insert_completion
from .errors import classify
from .masking import snippet_base_indent
from .problemset import Paper, ProblemSet
from .sandbox.base import PaperSpec, RunResult, Sandbox, SandboxSession

__all__ = [
    "FAIL_MARKERS",
    "Task",
    "TestRun",
    "published_verdict",
    "build_file",
    "run_task",
    "run_tasks",
    "HARNESS_VERSION",
]

HARNESS_VERSION = "rcbhub-harness-1"
#: the published harness fails a run whose output holds any of these
FAIL_MARKERS = ("Error:", "Exception:", "Traceback", "failed")
OUTPUT_TAIL_CHARS = 4000


@dataclass(frozen=True)
class Task:
    """One test run to make: a snippet of a paper with the code that replaces its body."""

    paper: Paper
    snippet: Snippet
    code: tuple[str, ...] | None  # None: the snippet has no prediction (missing)
    sample: int = 0


@dataclass
class TestRun:
    paper: str
    file: str
    snippet: str
    sample: int
    weight: int
    passed: bool
    category: str | None
    exit_code: int | None
    seconds: float
    timed_out: bool = False
    stdout: str = ""
    stderr: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def output_tail(self) -> str:
        text = (self.stdout.rstrip() + "\n" + self.stderr.rstrip()).strip()
        return text[-OUTPUT_TAIL_CHARS:]

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("stdout")
        data.pop("stderr")
        data["output_tail"] = self.output_tail
        data["seconds"] = round(self.seconds, 3)
        return data


def published_verdict(exit_code: int | None, stdout: str, stderr: str) -> bool:
    """Pass when the exit code is 0 and the output holds none of the failure markers."""
    if exit_code != 0:
        return False
    output = stdout + stderr
    return not any(marker in output for marker in FAIL_MARKERS)


def build_file(paper: Paper, snippet: Snippet, code: Iterable[str]) -> str:
    """The annotated file with the snippet's body replaced by ``code``."""
    lines = paper.files[snippet.file].lines
    return insert_completion(lines, snippet.start_line, snippet.end_line, list(code))


def reference_code(paper: Paper, snippet: Snippet) -> tuple[str, ...]:
    lines = paper.files[snippet.file].lines
    return tuple(lines[snippet.start_line : snippet.end_line - 1])


def answer_code(paper: Paper, snippet: Snippet, answer: str, *, reindent: bool = False) -> tuple[str, ...]:
    """Code lines of a raw answer; with ``reindent`` (a deviation from the published rule) re-based."""
    indent = snippet_base_indent(paper.files[snippet.file].lines, snippet) if reindent else None
    return tuple(completion_lines(answer, reindent=indent))


def judge(task: Task, result: RunResult) -> TestRun:
    passed = not result.timed_out and published_verdict(result.exit_code, result.stdout, result.stderr)
    if passed and result.extra.get("proof") is False:
        # the backend saw the test end early or run fewer cases than the reference did
        passed = False
    category = None
    if not passed:
        category = classify(
            exit_code=result.exit_code,
            stdout=result.stdout,
            stderr=result.stderr,
            timed_out=result.timed_out,
            signal=result.signal,
            oom=result.oom,
        )
        if result.extra.get("proof") is False and category == "other":
            category = result.extra.get("proof_category", "other")
    return TestRun(
        paper=task.paper.id,
        file=task.snippet.file,
        snippet=task.snippet.name,
        sample=task.sample,
        weight=task.snippet.weight,
        passed=passed,
        category=category,
        exit_code=result.exit_code,
        seconds=result.seconds,
        timed_out=result.timed_out,
        stdout=result.stdout,
        stderr=result.stderr,
        extra={k: v for k, v in result.extra.items() if isinstance(v, (str, int, float, bool, type(None)))},
    )


def missing_run(task: Task) -> TestRun:
    return TestRun(
        paper=task.paper.id, file=task.snippet.file, snippet=task.snippet.name, sample=task.sample,
        weight=task.snippet.weight, passed=False, category="missing", exit_code=None, seconds=0.0,
        stdout="", stderr="no prediction for this snippet",
    )


def run_task(session: SandboxSession, task: Task, *, timeout: float) -> TestRun:
    """Run one task in an open session of its paper."""
    if task.code is None:
        return missing_run(task)
    text = build_file(task.paper, task.snippet, task.code)
    result = session.run({task.snippet.file: text}, timeout=timeout)
    return judge(task, result)


class _Sessions:
    """One session per paper, opened on first use, closed when its last task is done."""

    def __init__(self, sandbox: Sandbox, counts: dict[str, int]):
        self.sandbox = sandbox
        self.left = dict(counts)
        self.sessions: dict[str, SandboxSession] = {}
        self.lock = threading.Lock()
        self.paper_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)

    def get(self, paper: Paper) -> SandboxSession:
        with self.paper_locks[paper.id]:
            if paper.id not in self.sessions:
                self.sessions[paper.id] = self.sandbox.open(PaperSpec.from_paper(paper))
            return self.sessions[paper.id]

    def done(self, paper_id: str) -> None:
        with self.lock:
            self.left[paper_id] -= 1
            finished = self.left[paper_id] == 0
        if finished:
            session = self.sessions.pop(paper_id, None)
            if session is not None:
                session.close()

    def close_all(self) -> None:
        for session in list(self.sessions.values()):
            session.close()
        self.sessions.clear()


def run_tasks(
    tasks: list[Task],
    *,
    sandbox: Sandbox,
    workers: int | None = None,
    timeout: float = 60.0,
    progress: Callable[[TestRun], None] | None = None,
) -> list[TestRun]:
    """Run tasks in parallel (one session per paper); results come back in task order."""
    workers = max(1, workers or os.cpu_count() or 1)
    counts: dict[str, int] = defaultdict(int)
    for task in tasks:
        counts[task.paper.id] += 1
    sessions = _Sessions(sandbox, counts)
    results: list[TestRun | None] = [None] * len(tasks)

    def work(index: int) -> tuple[int, TestRun]:
        task = tasks[index]
        try:
            if task.code is None:
                return index, missing_run(task)
            paper_timeout = task.paper.timeout or timeout
            return index, run_task(sessions.get(task.paper), task, timeout=paper_timeout)
        finally:
            sessions.done(task.paper.id)

    try:
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(work, i) for i in range(len(tasks))]
            for future in as_completed(futures):
                index, run = future.result()
                results[index] = run
                if progress is not None:
                    progress(run)
    finally:
        sessions.close_all()
    return [r for r in results if r is not None]
