"""An Inspect AI task for a problem set (or a site release's tasks): ``inspect eval benchmark_core/inspect_task.py``.

One sample per snippet, its input the prompt ``tasks`` writes (with or without the paper); the
solver is Inspect's ``generate()`` unless another is given (``--solver``, or ``solver=`` from
Python); the scorer runs each answer through this engine's sandbox, exactly as ``score`` does
(health gate, proof check, flags), and reports passed, category and weight per sample and the
scaled pass rate and the pass rate (percent) as metrics. A release's tasks come from a site
(``-T url=... -T release=SLUG``); they are not scored here (the site scores them once the log is
converted with ``python -m benchmark_core inspect-log`` and submitted).

Needs the optional ``inspect-ai`` package. Inspect loads this file by its path, not as part of the
``benchmark_core`` package, hence the absolute imports and the repository root put on ``sys.path``.
"""
from __future__ import annotations

import atexit
import sys
import threading
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
if __name__ != "benchmark_core.inspect_task" and str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

import anyio  # noqa: E402  (inspect-ai depends on it)
from inspect_ai import Task, task  # noqa: E402
from inspect_ai.dataset import MemoryDataset, Sample  # noqa: E402
from inspect_ai.scorer import Metric, SampleScore, Score, Scorer, Target, metric, scorer  # noqa: E402
from inspect_ai.solver import Solver, TaskState, generate  # noqa: E402

from benchmark_core.cli import DEFAULT_TIMEOUT, sandbox_open  # noqa: E402
from benchmark_core.generate import GenTask, problemset_hash, tasks_from_site  # noqa: E402
from benchmark_core.masking import PROMPT_VERSION, task_record  # noqa: E402
from benchmark_core.problemset import ProblemSet, load_problemset  # noqa: E402
from benchmark_core.runner import Task as RunTask  # noqa: E402
from benchmark_core.runner import TestRun, answer_code, run_tasks  # noqa: E402
from benchmark_core.sandbox.pool import SandboxPool  # noqa: E402

__all__ = ["research_code_bench", "sandbox_test", "scaled_pass_rate", "pass_rate", "sample_id", "TASK_NAME"]

TASK_NAME = "research_code_bench"
#: the problem set ``inspect eval`` scores when none is named: the repository's demo
DEMO = _ROOT / "demo"


def sample_id(paper: str, file: str, snippet: str) -> str:
    """A sample's id: the snippet's (paper, file, name)."""
    return f"{paper}/{file}/{snippet}"


def _pset_path(pset: str) -> Path:
    # Inspect runs the task function in this file's folder: a relative path is the repository root's
    path = Path(pset).expanduser()
    return path if path.is_absolute() else _ROOT / path


def _papers(papers: str | list[str] | None) -> list[str] | None:
    if papers is None or isinstance(papers, list):
        return papers
    return [p.strip() for p in str(papers).split(",") if p.strip()]


# --------------------------------------------------------------------------- metrics
def _weighted(scores: list[SampleScore], weighted: bool) -> float:
    """Percent of the weight (or of the samples) that passed; an epochs-reduced value counts as its mean."""
    total = passed = 0.0
    for item in scores:
        weight = float((item.score.metadata or {}).get("weight", 1)) if weighted else 1.0
        total += weight
        passed += weight * float(item.score.as_float())
    return 100.0 * passed / total if total else 0.0


@metric
def scaled_pass_rate() -> Metric:
    """The headline: passed snippets weighted by their code lines, in percent."""
    def compute(scores: list[SampleScore]) -> float:
        return _weighted(scores, True)
    return compute


@metric
def pass_rate() -> Metric:
    """Passed snippets, in percent."""
    def compute(scores: list[SampleScore]) -> float:
        return _weighted(scores, False)
    return compute


# --------------------------------------------------------------------------- scorer
class _Runner:
    """One sandbox (a pool of warm sessions) for every sample of an evaluation, opened on first use."""

    def __init__(self, pset: ProblemSet, options: dict[str, Any], workers: int):
        self.pset, self.options = pset, options
        self.limiter = anyio.CapacityLimiter(max(1, workers))
        self.lock = threading.Lock()
        self.pool: SandboxPool | None = None

    def _sandbox(self) -> SandboxPool:
        with self.lock:
            if self.pool is None:
                self.pool = SandboxPool(sandbox_open(**self.options))
                atexit.register(self.pool.close)
            return self.pool

    def run(self, paper_id: str, file: str, snippet: str, answer: str, sample: int) -> TestRun:
        paper = self.pset.paper(paper_id)
        snip = paper.snippet(snippet, file)
        task = RunTask(paper, snip, answer_code(paper, snip, answer), sample)
        return run_tasks([task], sandbox=self._sandbox(), workers=1, timeout=DEFAULT_TIMEOUT)[0]


@scorer(metrics=[scaled_pass_rate(), pass_rate()])
def sandbox_test(pset: str = str(DEMO), papers: str | list[str] | None = None, backend: str | None = None,
                 python: str | None = None, envs_dir: str | None = None, workers: int = 2) -> Scorer:
    """Run the answer in the paper's test, in this engine's sandbox: 1 passed, 0 failed."""
    runner = _Runner(load_problemset(_pset_path(pset), papers=_papers(papers)),
                     {"backend": backend, "python": python, "envs_dir": envs_dir}, workers)

    async def score(state: TaskState, target: Target) -> Score:
        meta = state.metadata
        answer = state.output.completion if state.output else ""
        run = await anyio.to_thread.run_sync(
            runner.run, meta["paper"], meta["file"], meta["snippet"], answer, state.epoch - 1,
            limiter=runner.limiter)
        return Score(
            value=1.0 if run.passed else 0.0,
            answer=answer,
            explanation=run.output_tail[-2000:] or None,
            metadata={"passed": run.passed, "category": run.category, "weight": run.weight, "paper": run.paper,
                      "file": run.file, "snippet": run.snippet, "seconds": round(run.seconds, 3),
                      "flags": run.flags},
        )

    return score


# --------------------------------------------------------------------------- task
def _sample(row: GenTask, *, weight: int | None, with_paper: bool) -> Sample:
    return Sample(
        id=sample_id(row.paper, row.file, row.snippet),
        input=row.prompt,
        metadata={"paper": row.paper, "file": row.file, "snippet": row.snippet, "weight": weight,
                  "with_paper": with_paper, "prompt_version": row.prompt_version},
    )


@task
def research_code_bench(pset: str = str(DEMO), without_paper: bool = False, papers: str | None = None,
                        backend: str | None = None, python: str | None = None, envs_dir: str | None = None,
                        workers: int = 2, url: str | None = None, release: str | None = None,
                        solver: Solver | None = None) -> Task:
    """ResearchCodeBench: one sample per snippet of a problem set (default: the demo), scored in the sandbox.

    ``pset`` is a problem-set folder (relative: from the repository root); with ``url`` and
    ``release`` the samples are that site release's tasks instead, and nothing is scored here.
    ``backend``/``python``/``envs_dir`` are ``score``'s options; ``workers`` test runs at a time.
    """
    with_paper = not without_paper
    selected = _papers(papers)
    if url or release:
        if not (url and release):
            raise ValueError("a site release needs both url and release")
        rows, source = tasks_from_site(url=url, release=release, with_paper=with_paper, papers=selected)
        samples = [_sample(row, weight=None, with_paper=with_paper) for row in rows]
        scoring: Scorer | None = None
    else:
        problem_set = load_problemset(_pset_path(pset), papers=selected)
        source = {"kind": "problem_set", "hash": problemset_hash(problem_set)}
        samples = []
        for paper, snip in problem_set.snippets:
            record = task_record(paper, snip, with_paper=with_paper)
            samples.append(_sample(GenTask(record["paper"], record["file"], record["snippet"], record["prompt"]),
                                   weight=snip.weight, with_paper=with_paper))
        scoring = sandbox_test(pset=str(_pset_path(pset)), papers=selected, backend=backend, python=python,
                               envs_dir=envs_dir, workers=workers)
    return Task(
        dataset=MemoryDataset(samples, name=release or _pset_path(pset).name),
        solver=solver or generate(),
        scorer=scoring,
        name=TASK_NAME,
        metadata={"benchmark": "ResearchCodeBench", "prompt_version": PROMPT_VERSION, "with_paper": with_paper,
                  "source": source},
    )
