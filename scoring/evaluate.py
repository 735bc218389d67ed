"""Scoring a paper: the one operation every verdict of the site comes from.

A submission's paper (``submissions.scoring``), a release baseline (``contributions.release_services``),
the demo (``leaderboard.importers.demo``) all call ``paper_evaluate`` (or ``papers_evaluate`` for
several at once), and a contribution's checks run their own gate logic over ``tasks_run``: this is
the only module of the site that calls the engine's ``run_tasks``. For each (evaluation, paper):

1. the paper's files by content hash (``scoring.paper_store``) and its snippets' rows: the snippet
   map (a folder that does not match the release is an error, never a partial scoring);
2. the tasks: every snippet and sample with its answer's code (``answer_code``), the reference code
   or nothing (a baseline), or no code at all (no prediction: ``missing``); with ``resume`` the
   verdicts already stored are not made again;
3. the sandbox: ``scoring.sandbox.job_sandbox`` (the worker's warm pool, else one of its own), each
   paper in its environment's interpreter (RCB_ENVS_DIR, RCB_ENV_PYTHONS);
4. ``run_tasks`` with RCB_SCORING_THREADS parallel runs, RCB_RUN_TIMEOUT (or the paper's own
   timeout), this host's passing reference outcomes (``reference_store``);
5. each verdict written as it comes through ``scoring.results.evaluation_results_write``; in a job
   (``beat`` given) only while the job row is still this attempt's: a cancel stops the runs at once
   and nothing more is written;
6. the paper's environment: the engine's health gate runs its reference code first; what it found
   is recorded on the release paper (``scoring.health``); when it fails, no verdict of the paper is
   written and the outcome says why (``environment_error``): the model is never blamed.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping, Sequence

from django.conf import settings
from django.db import transaction

from benchmark_core.problemset import Paper as CorePaper
from benchmark_core.problemset import paper_folder_load
from benchmark_core.runner import (Task, TestRun, answer_code, reference_code, reference_forget,
                                   reference_known, run_tasks)
from benchmark_core.sandbox.base import Sandbox, threads_per_run
from benchmark_core.sandbox.pool import SandboxPool
from catalog.models import Evaluation, LLMModel, ReleasePaper, Snippet, SnippetResult

from .health import environment_alert, environment_record
from .jobs import Heartbeat, JobEnds, history_add
from .models import Job, JobStatus
from .paper_store import release_paper_folder
from .results import evaluation_results_write, result_row_from_run
from .sandbox import job_sandbox, reference_store

__all__ = ["PaperWork", "PaperOutcome", "paper_evaluate", "papers_evaluate", "environment_job_end", "paper_load",
           "tasks_run"]

#: what a baseline puts in place of each snippet, by its model's kind
BASELINES = (LLMModel.REFERENCE, LLMModel.EMPTY)


@dataclass(frozen=True)
class PaperWork:
    """One evaluation on one paper of its release: the answers to score, or a baseline.

    ``answers``: (snippet row id, sample) -> the completion as stored (a snippet without one is
    ``missing``); ``samples``: the samples to score; ``baseline``: LLMModel.REFERENCE (the paper's
    own code) or LLMModel.EMPTY (nothing) in place of every snippet, instead of answers.
    """

    evaluation: Evaluation
    release_paper: ReleasePaper
    answers: Mapping[tuple[int, int], str] = field(default_factory=dict)
    samples: Sequence[int] = (0,)
    baseline: str = ""


@dataclass
class PaperOutcome:
    """What scoring one evaluation on one paper came to."""

    evaluation_id: int
    paper_id: str
    release_paper_id: int
    sandbox: str = ""  # the backend that ran it, in its own words
    environment: str = ""  # the paper's environment by name, else the backend's own words
    environment_error: str = ""  # why its reference code cannot judge completions here ("" when it can)
    environment_newly_broken: bool = False  # this scoring found the breakage first: the staff are told once
    written: int = 0  # verdicts stored by this scoring
    lost: bool = False  # the job was no longer ours: the runs stopped, nothing more was written
    evaluation: Evaluation | None = None  # with its figures refreshed (``aggregates``)


def paper_load(release_paper: ReleasePaper) -> CorePaper:
    """The paper as stored with its papers.yaml entry, fetched by content hash into this host's cache."""
    return paper_folder_load(release_paper_folder(release_paper=release_paper))


def tasks_run(tasks: list[Task], *, sandbox: Sandbox, timeout: float | None = None,
              progress: Callable[[TestRun], None] | None = None,
              stop: threading.Event | None = None) -> list[TestRun]:
    """The engine's ``run_tasks`` as the site runs it: RCB_SCORING_THREADS parallel runs on this worker's
    share of the host's cores, RCB_RUN_TIMEOUT
    unless given (a paper's own timeout wins), this host's passing reference outcomes.

    A process outlives its scorings (a worker): failed reference outcomes it believed are forgotten
    first, so a repaired environment is seen at once.
    """
    reference_forget()
    # the cores of this job: the host's shared by its RCB_WORKERS workers (each run's threads: those
    # shared by the job's runs in flight)
    return run_tasks(tasks, sandbox=sandbox, workers=settings.RCB_SCORING_THREADS,
                     timeout=timeout or settings.RCB_RUN_TIMEOUT, progress=progress, store=reference_store(),
                     stop=stop, cores=threads_per_run(settings.RCB_WORKERS))


def paper_evaluate(*, evaluation: Evaluation, release_paper: ReleasePaper, trust: str,
                   answers: Mapping[tuple[int, int], str] | None = None, samples: Sequence[int] = (0,),
                   baseline: str = "", beat: Heartbeat | None = None, resume: bool = False,
                   aggregates: bool = False) -> PaperOutcome:
    """Score one evaluation on one paper (see the module docstring); ``papers_evaluate`` says the options."""
    work = PaperWork(evaluation=evaluation, release_paper=release_paper, answers=answers or {},
                     samples=tuple(samples), baseline=baseline)
    return papers_evaluate([work], trust=trust, beat=beat, resume=resume, aggregates=aggregates)[0]


def papers_evaluate(works: Sequence[PaperWork], *, trust: str, beat: Heartbeat | None = None, resume: bool = False,
                    aggregates: bool = False, refresh_release: bool = True, backend: str | None = None,
                    warnings: list[str] | None = None, timeout: float | None = None) -> list[PaperOutcome]:
    """Score each (evaluation, paper) of ``works`` in one sandbox of ``trust`` level; outcomes in order.

    ``beat``: the job's heartbeat (a job scores one paper): verdicts are written only while the job
    is this attempt's. ``resume``: verdicts already stored are kept, not made again. ``aggregates``:
    each evaluation's stored figures are refreshed at the end (``refresh_release``: and its release's
    tiers). ``backend``/``warnings``: another backend than RCB_SANDBOX_BACKEND (the demo's command),
    and what a demo fallback says. Works of different papers run at once; works of the same paper
    one after the other, in a sandbox that keeps their sessions.
    """
    if beat is not None and len(works) != 1:
        raise ValueError("a job scores one paper: one work per heartbeat")
    scorings = [_Scoring(work, resume=resume) for work in works]
    with job_sandbox(trust=trust, backend=backend, warnings=warnings) as sandbox:
        rounds = _rounds(scorings)
        with _kept_sessions(sandbox, keep=len(rounds) > 1) as box:
            for scorings_of_round in rounds:
                _round_run(scorings_of_round, sandbox=box, beat=beat, timeout=timeout)
    for scoring in scorings:
        scoring.outcome.lost = beat is not None and beat.lost
        if not scoring.outcome.lost:
            scoring.environment_store()
    if aggregates and not (beat is not None and beat.lost):
        # (an evaluation whose papers all failed their environment got nothing new: its figures stand)
        for evaluation_id in dict.fromkeys(s.outcome.evaluation_id for s in scorings if s.broken is None):
            figures = evaluation_results_write(evaluation=evaluation_id, rows=[], lock=True,
                                               refresh_release=refresh_release)
            for scoring in scorings:
                if scoring.outcome.evaluation_id == evaluation_id:
                    scoring.outcome.evaluation = figures
    return [scoring.outcome for scoring in scorings]


def environment_job_end(outcome: PaperOutcome) -> None:
    """In a job: end its attempt as ``environment`` when the paper's reference code failed here (the job
    waits for ``environment_recheck``, the model is not blamed); the staff are told once the row says so
    (their e-mail counts the jobs that wait), when this scoring found the breakage first."""
    if not outcome.environment_error:
        return
    reason = f"environment {outcome.environment or '?'}: {outcome.environment_error}"[:2000]

    def alert() -> None:
        environment_alert(release_paper_id=outcome.release_paper_id, reason=reason)

    raise JobEnds(JobStatus.ENVIRONMENT, reason, after=alert if outcome.environment_newly_broken else None)


# --------------------------------------------------------------------------- the steps
class _Scoring:
    """A work being scored: its paper, snippet map, tasks, the verdicts written and what the gate said."""

    def __init__(self, work: PaperWork, *, resume: bool):
        if work.baseline and work.baseline not in BASELINES:
            raise ValueError(f"unknown baseline {work.baseline!r}")
        rp = work.release_paper
        self.work = work
        self.paper = paper_load(rp)
        self.outcome = PaperOutcome(evaluation_id=work.evaluation.pk, paper_id=self.paper.id, release_paper_id=rp.pk)
        rows = _snippet_map(rp, self.paper)
        done = set(SnippetResult.objects.filter(evaluation_id=work.evaluation.pk, snippet__paper_id=rp.paper_id)
                   .values_list("snippet_id", "sample")) if resume else set()
        self.tasks: list[Task] = []
        self.answers: dict[tuple[str, str, int], tuple[int, str]] = {}  # (file, snippet, sample) -> (row, completion)
        for sample in work.samples:
            for snip in self.paper.snippets:
                row_id = rows[(snip.file, snip.name)].pk
                if (row_id, sample) in done:  # a new attempt continues where the last one stopped
                    continue
                code, completion = self._code(snip, row_id, sample)
                self.tasks.append(Task(self.paper, snip, code, sample))
                self.answers[(snip.file, snip.name, sample)] = (row_id, completion)
        self.broken: tuple[str, str] | None = None  # (environment, reason) the engine's health gate gave
        self.reference: dict | None = None  # the paper's passing reference outcome, once known

    def _code(self, snip: Any, row_id: int, sample: int) -> tuple[tuple[str, ...] | None, str]:
        """The code in place of the snippet (None: no prediction) and the completion stored with its verdict."""
        if self.work.baseline == LLMModel.REFERENCE:
            code = reference_code(self.paper, snip)
            return code, "\n".join(code)
        if self.work.baseline == LLMModel.EMPTY:
            return (), ""
        answer = self.work.answers.get((row_id, sample))
        return (answer_code(self.paper, snip, answer) if answer is not None else None), answer or ""

    @property
    def runs(self) -> bool:
        """Whether any task runs code (a scoring of missing answers only runs nothing)."""
        return any(t.code is not None for t in self.tasks)

    def environment_store(self) -> None:
        """Record on the release paper what the scoring saw of its environment."""
        rp_id = self.work.release_paper.pk
        if self.broken is not None:
            environment, reason = self.broken
            self.outcome.environment = environment
            self.outcome.environment_error = reason
            self.outcome.environment_newly_broken = environment_record(
                release_paper_id=rp_id, environment=environment, ok=False, reason=reason[:2000])
        elif self.reference is not None:
            environment_record(release_paper_id=rp_id, environment=self.outcome.environment, ok=True,
                               seconds=self.reference.get("seconds"))


def _snippet_map(release_paper: ReleasePaper, paper: CorePaper) -> dict[tuple[str, str], Snippet]:
    """The release's snippet rows of the paper by (file, name); the folder must hold exactly them."""
    rows = {(s.file, s.name): s for s in Snippet.objects.filter(release_id=release_paper.release_id,
                                                               paper_id=release_paper.paper_id)}
    unknown = [f"{s.file}:{s.name}" for s in paper.snippets if (s.file, s.name) not in rows]
    if unknown or len(rows) != len(paper.snippets):
        raise RuntimeError(
            f"the paper folder on this worker does not match the release ({len(paper.snippets)} snippets in the "
            f"folder, {len(rows)} in the release; not in the release: {', '.join(unknown[:5]) or '-'})"
        )
    return rows


def _rounds(scorings: list[_Scoring]) -> list[list[_Scoring]]:
    """Scorings grouped so that no two of a round score the same paper (a verdict names its paper, not
    its evaluation); the i-th scoring of each paper in round i."""
    rounds: list[list[_Scoring]] = []
    seen: dict[str, int] = {}
    for scoring in scorings:
        n = seen.get(scoring.paper.id, 0)
        seen[scoring.paper.id] = n + 1
        if n == len(rounds):
            rounds.append([])
        rounds[n].append(scoring)
    return rounds


@contextmanager
def _kept_sessions(sandbox: Sandbox, *, keep: bool) -> Iterator[Sandbox]:
    """``sandbox``, keeping its sessions between rounds when there are several (unless it is a pool)."""
    if not keep or isinstance(sandbox, SandboxPool):
        yield sandbox
        return
    pool = SandboxPool(sandbox, max_sessions=settings.RCB_SANDBOX_POOL_SESSIONS,
                       idle_seconds=settings.RCB_SANDBOX_POOL_IDLE_SECONDS, reaper=False)
    try:
        yield pool
    finally:
        pool.close()  # (the sandbox itself is closed by its owner: closing twice is harmless)


def _round_run(scorings: list[_Scoring], *, sandbox: Sandbox, beat: Heartbeat | None,
               timeout: float | None) -> None:
    """One ``run_tasks`` over the round's tasks, each verdict written as it comes."""
    by_paper = {s.paper.id: s for s in scorings}
    store = reference_store()
    backend = getattr(sandbox, "inner", sandbox).describe()  # the backend's own words, not the pool's
    for scoring in scorings:
        scoring.outcome.sandbox = backend
        # the paper's environment by name, else the backend's
        scoring.outcome.environment = str(getattr(scoring.paper, "environment", None) or "") or backend
    known = {s.paper.id: s.runs and reference_known(sandbox, s.paper, store=store) is not None for s in scorings}
    opened = getattr(sandbox, "opened", None)  # a pool counts the sessions it had to open
    stop = threading.Event()
    if beat is not None:
        beat.on_lost = stop.set  # a cancel stops the running test within a heartbeat
        if beat.lost:
            stop.set()
    tasks = [task for scoring in scorings for task in scoring.tasks]
    tasks_run(tasks, sandbox=sandbox, timeout=timeout, stop=stop,
              progress=lambda run: _verdict_write(by_paper[run.paper], run, beat=beat, stop=stop))
    kept = opened is not None and getattr(sandbox, "opened", None) == opened
    for scoring in scorings:
        if scoring.runs and scoring.broken is None:
            scoring.reference = reference_known(sandbox, scoring.paper, store=store)
        if beat is not None and scoring.runs and not beat.lost:  # what the job found ready (the warm pool)
            history_add(beat.job_id, f"sandbox: {'warm, kept from an earlier job' if kept else 'opened'}; "
                                     f"reference outcome: {'known, not run again' if known[scoring.paper.id] else 'run'}")


def _verdict_write(scoring: _Scoring, run: TestRun, *, beat: Heartbeat | None, stop: threading.Event) -> None:
    """Store one verdict (a job's only while the job row is this attempt's); note an environment error."""
    if beat is not None and beat.lost:
        stop.set()
        return
    if run.category == "environment":  # the reference code fails here: no completion of the paper is judged
        if scoring.broken is None:
            scoring.broken = (scoring.outcome.environment, str(run.extra.get("environment_error")
                                                                or run.output_tail[-500:] or "environment error"))
        if beat is not None:
            stop.set()  # a job scores this one paper: nothing more to run
        return
    if scoring.broken is not None:
        return
    snippet_id, completion = scoring.answers[(run.file, run.snippet, run.sample)]
    rows = [result_row_from_run(snippet_id=snippet_id, run=run, completion=completion)]
    if beat is None:
        evaluation_results_write(evaluation=scoring.work.evaluation.pk, aggregates=False, rows=rows)
    else:
        with transaction.atomic():
            # the job row locked: a cancel (or a watchdog re-assignment) either came before, and nothing
            # is written, or waits for this write
            if not Job.objects.select_for_update().filter(
                    pk=beat.job_id, rq_job_id=beat.rq_job_id, status=JobStatus.RUNNING).exists():
                beat.lost = True
                stop.set()
                return
            evaluation_results_write(evaluation=scoring.work.evaluation.pk, aggregates=False, rows=rows)
    scoring.outcome.written += 1
