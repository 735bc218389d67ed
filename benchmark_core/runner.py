"""Insert a completion, run the paper's test in a sandbox, and judge it by the published rule."""
from __future__ import annotations

import functools
import json
import os
import threading
import time
import weakref
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Protocol

from .annotation import Snippet
from .completions import completion_lines, insert_completion
from .errors import classify
from .masking import snippet_base_indent
from .problemset import Paper, ProblemSet
from .environments import DEFAULT_ENVIRONMENT
from .sandbox.base import PaperSpec, RunResult, Sandbox, SandboxSession, run_threads, threads_per_run
from .sandbox.warm import AST_LOCK
from .sandbox.warm_client import runner_options

if TYPE_CHECKING:
    from .cache import VerdictCache
    from .tamper import StaticReading

__all__ = [
    "FAIL_MARKERS",
    "Task",
    "longest_runs_first",
    "TestRun",
    "published_verdict",
    "build_file",
    "run_task",
    "run_tasks",
    "reference_run",
    "reference_known",
    "reference_forget",
    "environment_run",
    "HARNESS_VERSION",
]

HARNESS_VERSION = "rcbhub-harness-2"  # 2: authenticated proof, audit trail compared with the reference
#: the published harness fails a run whose output holds any of these
FAIL_MARKERS = ("Error:", "Exception:", "Traceback", "failed")
OUTPUT_TAIL_CHARS = 4000


@functools.lru_cache(maxsize=1)
def engine_digest() -> str:
    """The hash of this engine's own files (benchmark_core): the runner that writes a run's audit
    trail and the host code that judges it. Cached verdicts and kept reference runs are keyed on
    it: a reference trail written by an earlier runner lacks what a later one watches (a module of
    the paper written by the test itself), and a run compared with it would be flagged for it."""
    from .hashing import folder_hash  # noqa: PLC0415

    return folder_hash(Path(__file__).resolve().parent)[:16]


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
    #: ``tampering:*`` (the run failed for it), ``audit:*`` and ``ast:*`` slugs (benchmark_core/tamper.py)
    flags: list[str] = field(default_factory=list)

    @property
    def output_tail(self) -> str:
        """The end of the run's output, as text every store can hold (a NUL byte, which PostgreSQL
        text cannot, is shown as U+FFFD: what a completion prints must not cost the job its writes)."""
        text = (self.stdout.rstrip() + "\n" + self.stderr.rstrip()).strip()
        return text[-OUTPUT_TAIL_CHARS:].replace("\x00", "\ufffd")

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
    flags = [str(f) for f in result.extra.get("flags") or []]
    tampered = any(f.startswith("tampering:") for f in flags)
    category = None
    if tampered:
        passed, category = False, "tampering"
    elif not passed:
        category = classify(
            exit_code=result.exit_code,
            stdout=result.stdout,
            stderr=result.stderr,
            timed_out=result.timed_out,
            signal=result.signal,
            oom=result.oom,
        )
        if result.extra.get("proof") is False and (
                category == "other" or result.extra.get("proof_category") == "environment"):
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
        flags=sorted(set(flags)),
    )


def missing_run(task: Task) -> TestRun:
    return TestRun(
        paper=task.paper.id, file=task.snippet.file, snippet=task.snippet.name, sample=task.sample,
        weight=task.snippet.weight, passed=False, category="missing", exit_code=None, seconds=0.0,
        stdout="", stderr="no prediction for this snippet",
    )


# ---------------------------------------------------------------------------- proof that the test ran
# Backends that run the warm runner report, per run, whether the test script ran to completion and
# how many unittest cases it started. A run passes only when it completed and started at least as
# many cases as the paper's reference code did in the same environment (run once, then cached).

_REFERENCE: dict[tuple[str, str], dict] = {}
#: a failed reference outcome is believed this long (about one scoring), then made again: a worker that
#: lives for days must notice an environment repaired meanwhile
FAILED_REFERENCE_SECONDS = 120.0
_REFERENCE_LOCK = threading.Lock()
_PAPER_LOCKS: dict[tuple[str, str], threading.Lock] = defaultdict(threading.Lock)


_HASHES: dict[int, tuple["weakref.ref[Paper]", str]] = {}
_MODULES: dict[int, tuple] = {}  # id(paper) -> (weakref to it, its modules' names)


def _content_hash(paper: Paper) -> str:
    """The paper folder's content hash, computed once per loaded paper (folders may hold big data files)."""
    from .cache import paper_content_hash

    return _per_paper(_HASHES, paper, lambda: paper_content_hash(paper.folder))


def paper_modules(paper: Paper) -> tuple[str, ...]:
    """The modules a paper's folder holds, as its test imports them (``tamper.module_of_file``),
    listed once per loaded paper."""
    from .hashing import ignored  # noqa: PLC0415
    from .tamper import module_of_file  # noqa: PLC0415

    root = Path(paper.folder)
    return _per_paper(_MODULES, paper, lambda: tuple(sorted(
        module_of_file(p.relative_to(root).as_posix()) for p in root.rglob("*.py")
        if not ignored(p.relative_to(root)))))


def _per_paper(store: dict, paper: Paper, make: Callable):
    """``make()`` once per loaded paper, kept in ``store`` while the paper lives."""
    known = store.get(id(paper))
    if known is None or known[0]() is not paper:
        key = id(paper)
        ref = weakref.ref(paper, lambda _ref: store.pop(key, None))
        known = (ref, make())
        store[key] = known
    return known[1]


def environment_id(sandbox: Sandbox, paper: PaperSpec | None = None) -> str:
    """What decides a run's environment: the backend's id, per paper when papers name environments
    (and the runner's options that change its audit trail: a reference run's trail is compared
    only with runs of the same runner)."""
    return _environment_id(sandbox, paper) + "".join(f":{o}" for o in runner_options(getattr(sandbox, "options", {}) or {}))


def _environment_id(sandbox: Sandbox, paper: PaperSpec | None) -> str:
    base = str(getattr(sandbox, "environment_id", None) or sandbox.describe())
    if paper is None or not paper.environment:
        return base
    per_paper = getattr(sandbox, "environment_id_for", None)
    if per_paper is not None:
        try:
            return str(per_paper(paper))
        except Exception:  # noqa: BLE001 - an environment that cannot be had: its name still tells it apart
            pass
    return f"{base}:{paper.environment}"


def environment_name(paper: Paper | PaperSpec) -> str:
    return getattr(paper, "environment", None) or DEFAULT_ENVIRONMENT


def reference_outcome(result: RunResult) -> dict:
    """What must repeat for a paper's reference run to count as deterministic."""
    return {
        "passed": not result.timed_out and published_verdict(result.exit_code, result.stdout, result.stderr),
        "exit_code": result.exit_code,
        "timed_out": result.timed_out,
        "completed": result.extra.get("completed"),
        "tests_run": result.extra.get("tests_run"),
    }


class ReferenceStore(Protocol):
    """Where reference outcomes outlive the process (``cache.VerdictCache`` is one)."""

    def reference_get(self, key: str, *, failed_seconds: float) -> tuple[dict, float] | None: ...

    def reference_put(self, key: str, info: dict, *, passed: bool) -> None: ...


def _reference_known(key: tuple[str, str], store: ReferenceStore | None) -> dict | None:
    """The outcome remembered in this process, else the one ``store`` holds (then remembered here)."""
    with _REFERENCE_LOCK:
        known = _REFERENCE.get(key)
    if known is not None and ("at" not in known or time.monotonic() - known["at"] < FAILED_REFERENCE_SECONDS):
        return known
    if store is None:
        return None
    try:
        found = store.reference_get(_reference_store_key(key), failed_seconds=FAILED_REFERENCE_SECONDS)
    except Exception:  # noqa: BLE001 - an unreadable store is an empty one: the run is made again
        return None
    if found is None:
        return None
    info, age = found
    info = dict(info)
    if info.pop("failed", False):
        info["at"] = time.monotonic() - age  # its belief ends when it would have in the process that made it
    with _REFERENCE_LOCK:
        _REFERENCE[key] = info
    return info


def reference_known(sandbox: Sandbox, paper: Paper, *, store: ReferenceStore | None = None) -> dict | None:
    """The paper's reference outcome in ``sandbox``'s environment if this process or ``store`` knows it
    (what ``reference_run`` would answer without running anything), else None."""
    key = (environment_id(sandbox, PaperSpec.from_paper(paper)), _content_hash(paper))
    return _reference_known(key, store)


def reference_forget(*, passed: bool = False) -> int:
    """Forget the failed reference outcomes this process believes (a long-lived worker starting a job
    that must see a repaired environment); with ``passed``, the passing ones too (the next scoring of
    each paper runs its reference again, as a new process's first scoring does: bench/score_speed.py
    times every round so). Outcomes a ``store`` keeps are not touched. Returns how many were dropped."""
    with _REFERENCE_LOCK:
        dropped = [key for key, info in _REFERENCE.items() if passed or "at" in info]
        for key in dropped:
            del _REFERENCE[key]
    return len(dropped)


def _reference_store_key(key: tuple[str, str]) -> str:
    from .cache import verdict_key  # noqa: PLC0415

    return verdict_key("reference", HARNESS_VERSION, engine_digest(), *key)


def reference_run(session: SandboxSession, paper: Paper, *, timeout: float, runs: int = 1,
                  store: ReferenceStore | None = None) -> dict:
    """Run the paper's original code ``runs`` times in ``session`` (cached per environment and content:
    in this process, and in ``store`` across processes and sessions).

    Returns ``{"completed", "tests_run", "deterministic"}``; ``deterministic`` is None until two runs
    were compared. A failed outcome is believed ``FAILED_REFERENCE_SECONDS``, one the sandbox caused never.
    """
    key = (environment_id(session.sandbox, session.paper), _content_hash(paper))
    with _PAPER_LOCKS[key]:
        known = _reference_known(key, store)
        if known is not None and (runs < 2 or known["deterministic"] is not None):
            _reference_teach(session, known)
            return known
        results = [session.run({}, timeout=timeout) for _ in range(runs)]
        outcomes = [reference_outcome(r) for r in results]
        first = outcomes[0]
        info = {
            "completed": first["completed"],
            "tests_run": first["tests_run"],
            "deterministic": all(o == first for o in outcomes) if runs >= 2 else None,
            "passed": first["passed"],
            # what the reference code did that a completion's run may do too (apply_proof)
            "audit": results[0].extra.get("audit"),
            "seconds": round(results[0].seconds, 3),
            # what it imported: a session that believes this outcome learns it (``_reference_teach``)
            "modules": list(results[0].extra.get("modules") or [])[:4096],
        }
        lost = next((r.extra["sandbox_error"] for r in results if r.extra.get("sandbox_error")), None)
        if lost:
            # the sandbox, not the code, failed (its runner died mid-run): not an outcome to remember
            info["sandbox_error"] = str(lost)
            return info
        failed = not first["passed"] or (first["completed"] is False)
        if failed:
            info["reason"] = _reference_failure(results[0])
            info["at"] = time.monotonic()
        with _REFERENCE_LOCK:
            _REFERENCE[key] = info
        if store is not None:
            kept = {k: v for k, v in info.items() if k != "at"}
            try:
                store.reference_put(_reference_store_key(key), {**kept, "failed": failed}, passed=not failed)
            except Exception:  # noqa: BLE001 - not remembered across processes: made again there
                pass
        return info


def _reference_teach(session: SandboxSession, known: dict) -> None:
    """A session that will not run the reference (its outcome is known) is told what the reference
    run imported, when its backend learns imports (the warm runner: ``WarmSession.learn``)."""
    learn = getattr(session, "learn", None)
    modules = known.get("modules")
    if callable(learn) and isinstance(modules, list) and modules and known.get("passed"):
        try:
            learn(modules)
        except Exception:  # noqa: BLE001 - a lesson lost costs time, never a verdict
            pass


def _reference_failure(result: RunResult) -> str:
    """Why the reference code did not pass: its timeout, its exception line, or its exit code."""
    if result.timed_out:
        return f"the reference code timed out after {result.seconds:.0f}s"
    lines = [ln.strip() for ln in (result.stdout + "\n" + result.stderr).splitlines() if ln.strip()]
    import re  # noqa: PLC0415

    for line in reversed(lines):
        if re.match(r"^(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Exit)\b", line):
            return f"the reference code fails: {line[:300]}"
    if published_verdict(result.exit_code, result.stdout, result.stderr):
        return "the reference code does not run to completion (its proof of completion is missing)"
    tail = lines[-1][:300] if lines else "no output"
    return f"the reference code fails (exit code {result.exit_code}): {tail}"


def environment_run(task: Task, *, environment: str, reason: str) -> TestRun:
    """A run that could not count: the paper's environment is broken (never the completion's fault)."""
    return TestRun(
        paper=task.paper.id, file=task.snippet.file, snippet=task.snippet.name, sample=task.sample,
        weight=task.snippet.weight, passed=False, category="environment", exit_code=None, seconds=0.0,
        stderr=f"environment error ({environment}): {reason}",
        extra={"environment": environment, "environment_error": reason},
    )


def apply_proof(result: RunResult, reference: dict | None, own: str | None = None) -> None:
    """Set ``result.extra["proof"]`` and ``["flags"]`` from the run's authenticated proof and audit
    trail against the reference run's (benchmark_core/tamper.py).

    Fail closed: a backend that reports a proof (the warm runner) with no completed reference run
    to compare it with never passes (its paper is an environment error, see ``_Sessions.problem``).
    """
    from .tamper import audit_verdict  # noqa: PLC0415

    if "completed" not in result.extra or "proof" in result.extra:
        return
    audit = result.extra.get("audit")
    passed_rule = not result.timed_out and published_verdict(result.exit_code, result.stdout, result.stderr)
    reason = None
    if reference is None or reference.get("completed") is not True:
        result.extra["proof"] = False
        result.extra["proof_category"] = "environment"
        reason = "the paper's reference run did not complete here, so no run of it can be proven"
    tampering, flags, why = (audit_verdict(audit, (reference or {}).get("audit"), own)
                             if audit is not None else ([], [], {}))
    if audit is not None and passed_rule and not audit.get("authentic"):
        # passed by its output, yet no authenticated final line: the run left the harness early
        tampering.append("tampering:no-proof")
        why["tampering:no-proof"] = ["the output says OK but the proof of completion is missing"]
    result.extra["flags"] = sorted(set(result.extra.get("flags") or []) | set(tampering) | set(flags))
    if flags:
        # what each review flag saw, for the reviewer (a passing run's too): run_task puts it with the
        # static reading's notes, in the results and at the end of the run's output
        result.extra["audit_notes"] = {f: "; ".join(why.get(f) or []) or "seen in the run's audit trail"
                                       for f in flags}
    if tampering:
        result.extra["proof"] = False
        result.extra["proof_category"] = "tampering"
        result.extra["tampering"] = "; ".join(f"{f} ({', '.join(why.get(f, []))})" for f in sorted(set(tampering)))
        reason = f"tampering: {result.extra['tampering']}"
    if reason is None:
        expected = int(reference.get("tests_run") or 0)  # type: ignore[union-attr]
        completed = result.extra.get("completed") is True
        ran = int(result.extra.get("tests_run") or 0)
        result.extra["expected_tests"] = expected
        if not completed:
            result.extra["proof"] = False
            result.extra["proof_category"] = "crash"
            reason = "the test script did not run to completion (it exited early or was cut short)"
        elif ran < expected:
            result.extra["proof"] = False
            result.extra["proof_category"] = "other"
            reason = f"the test ran {ran} test case(s), the reference code runs {expected}"
        else:
            result.extra["proof"] = True
            return
    result.extra["proof_reason"] = reason
    if passed_rule or tampering:
        result.stderr = (result.stderr.rstrip("\n") + f"\n[harness] not passed: {reason}\n").lstrip("\n")


def task_read(task: Task) -> "tuple[str, StaticReading]":
    """A task's inserted file and the host's static reading of it (``static_reading_of``): what the
    host reads of a completion before its run, made by ``run_task`` or ahead (``_ReadingsAhead``)."""
    text = build_file(task.paper, task.snippet, task.code)
    return text, static_reading_of(task, text)


def run_task(session: SandboxSession, task: Task, *, timeout: float, store: ReferenceStore | None = None,
             last: bool = False, read: "tuple[str, StaticReading] | None" = None) -> TestRun:
    """Run one task in an open session of its paper (``store``: where reference outcomes are kept;
    ``last``: no other run of the paper is queued behind it, ``SandboxSession.run``'s hint;
    ``read``: the task's ``task_read``, when it was made ahead).

    The host's own work for the completion (building and reading its file before the run, judging
    the answer after it) cannot end more than this task: whatever it raises becomes the task's
    verdict, category ``invalid`` (``invalid_run``). The sandbox's failures are not the completion's
    and are raised as before."""
    if task.code is None:
        return missing_run(task)
    try:
        text, reading = read if read is not None else task_read(task)
    except Exception as exc:  # noqa: BLE001 - a completion the host cannot read is that completion's verdict
        return invalid_run(task, exc, "reading it")
    result = session.run({task.snippet.file: text}, timeout=timeout, last=last)
    try:
        result.extra["flags"] = reading.flags
        # the backend reported its proof and audit trail (the warm runner does): every run is compared
        # with the paper's reference run (a failing one too: tampering is named whatever the outcome)
        if "completed" in result.extra:
            try:
                reference = reference_run(session, task.paper, timeout=timeout, store=store)
            except Exception:  # noqa: BLE001 - no reference outcome: fail closed
                reference = None
            if reference is not None and reference.get("sandbox_error"):
                reference = None
            apply_proof(result, reference, task.snippet.file)  # the completion's own file
        run = judge(task, result)
    except Exception as exc:  # noqa: BLE001 - e.g. an answer the host cannot decode
        return invalid_run(task, exc, "judging its run")
    notes = {**dict(result.extra.get("audit_notes") or {}), **dict(reading.notes)}
    if not reading.parsed and run.passed:
        # the host's parser could not read the file, yet it ran (another interpreter's syntax?):
        # nothing of its code was checked
        notes["ast:scope"] = "the host could not parse the inserted file, so none of its code was read"
    if notes:
        run.flags = sorted(set(run.flags) | set(notes))
        run.extra["flag_notes"] = notes
        run.stderr = (run.stderr.rstrip("\n") + "".join(f"\n[harness] {flag}: {why}" for flag, why in
                                                      sorted(notes.items())) + "\n").lstrip("\n")
    return run


def completion_span(paper: Paper, snippet: Snippet, code: Iterable[str]) -> tuple[int, int]:
    """The lines (first, last; 1-based, as the interpreter numbers them) that ``code`` takes in its
    file as ``build_file`` inserts it; last = first - 1 for no code."""
    lines = paper.files[snippet.file].lines
    before = "\n".join(lines[: snippet.start_line]) + "\n"
    first = _line_count(before) + 1
    code = list(code)
    if not code:
        return first, first - 1
    return first, _line_count(before + "\n".join(code) + "\n")


def _line_count(text: str) -> int:
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def static_reading_of(task: Task, text: str) -> "StaticReading":
    """The static reading of a task's inserted file ``text`` (tamper.static_reading), against the
    paper's own code at the same place."""
    from .tamper import static_reading  # noqa: PLC0415

    assert task.code is not None
    paper, snippet = task.paper, task.snippet
    original = paper.files[snippet.file].lines
    reference = ("\n".join(original) + "\n", completion_span(paper, snippet, reference_code(paper, snippet)),
                 "\n".join(reference_code(paper, snippet)))
    from .tamper import module_of_file  # noqa: PLC0415

    modules = paper_modules(paper)
    refs = sorted(m.rpartition(".")[2] for m in modules if m.endswith("_ref"))
    with AST_LOCK:  # ast.parse, one thread at a time (CPython 3.11)
        return static_reading(text, completion_span(paper, snippet, task.code), code="\n".join(task.code),
                              reference=reference, ref_modules=refs, shared=(modules, module_of_file(snippet.file)))


def invalid_run(task: Task, exc: BaseException, doing: str) -> TestRun:
    """The verdict of a completion the host's own work failed on (category ``invalid``)."""
    from .tamper import NESTED_TOO_DEEP  # noqa: PLC0415

    detail = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    why = {MemoryError: NESTED_TOO_DEEP, RecursionError: NESTED_TOO_DEEP,
           UnicodeEncodeError: "it is not valid Unicode text (a lone surrogate)"}.get(type(exc), "")
    message = (f"invalid completion: the host failed {doing} ({type(exc).__name__}{': ' + detail if detail else ''})"
               + (f": {why}" if why else "") + "; it was not run")
    return TestRun(
        paper=task.paper.id, file=task.snippet.file, snippet=task.snippet.name, sample=task.sample,
        weight=task.snippet.weight, passed=False, category="invalid", exit_code=None, seconds=0.0,
        stderr=message, extra={"invalid": f"{type(exc).__name__}: {detail}"[:500]},
    )


#: papers whose sessions are opened ahead of the paper whose runs are being started (one open can
#: take longer than a paper's runs: a docker copy on a busy engine)
PREFETCH_PAPERS = 2
#: runs of one paper that may start while its reference run is still going on (their verdicts wait
#: for it; a paper whose reference fails has them replaced by environment errors)
EARLY_RUNS = 1


class _Sessions:
    """One session per paper, opened on first use (the next PREFETCH_PAPERS ahead of time), closed when its
    last task is done (in the background: the worker goes on with the next paper's runs)."""

    def __init__(self, sandbox: Sandbox, counts: dict[str, int], *, order: list[Paper], timeout: float,
                 store: ReferenceStore | None = None, queued: dict[str, int] | None = None):
        self.sandbox = sandbox
        self.store = store
        self.left = dict(counts)
        #: paper id -> its runs not yet asked for (``take``); default: every task counted as one
        self.queued = dict(counts if queued is None else queued)
        self.sessions: dict[str, SandboxSession] = {}
        self.lock = threading.Lock()
        self.paper_locks: dict[str, threading.Lock] = defaultdict(threading.Lock)
        self.order = order  # papers in the order their tasks are queued
        self.timeout = timeout
        self.closed = False
        #: paper id -> why its environment cannot score it (sandbox did not open, reference fails)
        self.problems: dict[str, str] = {}
        self.gates: dict[str, str | None] = {}
        self.early: dict[str, int] = defaultdict(int)  # paper id -> runs started before its gate was known
        self.closing: list[threading.Thread] = []
        self.threads = 1  # what each run may use (the scheduler's share: ``base.threads_per_run``)

    def _open(self, paper: Paper) -> SandboxSession | None:
        """The paper's session, opened if needed (hold its paper lock); None once it is not wanted
        or when it cannot open (the reason is in ``problems``)."""
        if paper.id in self.sessions:
            return self.sessions[paper.id]
        if paper.id in self.problems:
            return None
        try:
            session = self.sandbox.open(PaperSpec.from_paper(paper))
        except Exception as exc:  # noqa: BLE001 - an environment that cannot open scores nothing of its paper
            self.problems[paper.id] = _open_failure(exc)
            return None
        with self.lock:
            if self.closed or self.left.get(paper.id, 0) <= 0:
                session.close()
                return None
            self.sessions[paper.id] = session
        if getattr(session, "ready", None):
            # a warm runner reports proof: make the paper's reference run now, beside the first
            # runs, rather than make the first passing run wait for it
            _background(reference_run, session, paper, timeout=paper.timeout or self.timeout, store=self.store,
                        threads=self.threads)
        return session

    def get(self, paper: Paper) -> SandboxSession | None:
        """The paper's open session; None when its environment cannot be used (see ``problem``)."""
        with self.paper_locks[paper.id]:
            session = self._open(paper)
        self._prefetch_after(paper)
        if session is None and paper.id not in self.problems:
            raise RuntimeError("the scoring is over")
        return session

    def problem(self, paper: Paper, session: SandboxSession | None) -> str | None:
        """Why the paper's completions cannot count here (None: its reference passes in this environment).

        The reference run is made once per paper; one whose sandbox died under it is made again
        in a new session before the environment is blamed.
        """
        with self.paper_locks[paper.id]:
            if paper.id in self.problems:
                return self.problems[paper.id]
            if paper.id in self.gates:
                return self.gates[paper.id]
            timeout = paper.timeout or self.timeout
            assert session is not None
            try:
                info = reference_run(session, paper, timeout=timeout, store=self.store)
                if info.get("sandbox_error"):
                    retry = self.sandbox.open(PaperSpec.from_paper(paper))
                    try:
                        info = reference_run(retry, paper, timeout=timeout, store=self.store)
                    finally:
                        retry.close()
            except Exception as exc:  # noqa: BLE001 - no reference outcome: never a pass
                info = {"passed": False, "sandbox_error": _open_failure(exc)}
            reason = None
            if info.get("sandbox_error"):
                reason = f"the sandbox failed while running the reference code: {info['sandbox_error']}"
            elif not info.get("passed") or info.get("completed") is False:
                reason = info.get("reason") or "the reference code does not pass in this environment"
            self.gates[paper.id] = reason
            return reason

    def start_early(self, paper: Paper) -> bool:
        """Whether a run of the paper may start before its gate is known (its reference run is going
        on): at most EARLY_RUNS at a time, so that a paper whose reference hangs costs no more."""
        with self.lock:
            if paper.id in self.problems or paper.id in self.gates or self.early[paper.id] >= EARLY_RUNS:
                return False
            self.early[paper.id] += 1
            return True

    def early_done(self, paper: Paper) -> None:
        with self.lock:
            self.early[paper.id] -= 1

    def _prefetch_after(self, paper: Paper) -> None:
        """Start the next PREFETCH_PAPERS papers' sessions (their imports, their copies, their
        reference runs) while this paper's runs go on."""
        ids = [p.id for p in self.order]
        if paper.id not in ids:
            return
        ahead = 0
        for nxt in self.order[ids.index(paper.id) + 1 :]:
            with self.lock:
                if self.closed:
                    return
                wanted = self.left.get(nxt.id, 0) > 0
                opened = nxt.id in self.sessions
            if not wanted:
                continue
            if not opened and not self.paper_locks[nxt.id].locked():
                _background(self._prefetch, nxt)
            ahead += 1
            if ahead >= PREFETCH_PAPERS:
                return

    def _prefetch(self, paper: Paper) -> None:
        with self.paper_locks[paper.id]:
            self._open(paper)

    def take(self, paper_id: str) -> bool:
        """One run of the paper asked for now: whether it is the last one queued (its session is
        then told so: ``SandboxSession.run``'s ``last``)."""
        with self.lock:
            if self.queued.get(paper_id, 0) <= 0:
                return False
            self.queued[paper_id] -= 1
            return self.queued[paper_id] == 0

    def done(self, paper_id: str) -> None:
        with self.lock:
            self.left[paper_id] -= 1
            session = self.sessions.pop(paper_id, None) if self.left[paper_id] == 0 else None
        if session is not None:
            closer = threading.Thread(target=_close_quietly, args=(session,), daemon=True, name="session-close")
            with self.lock:
                # started before it is listed, under the lock: close_all (a job lost, from its
                # heartbeat thread) joins what it finds listed, and joining a thread not yet started
                # raised, which failed a whole submission in a fault drill
                closer.start()
                self.closing = [t for t in self.closing if t.is_alive()] + [closer]

    def close_all(self, *, abort: bool = False) -> None:
        """Close every open session; with ``abort``, end the runs going on in them now (a pooled
        session is then discarded, not given back with a test still running in it)."""
        with self.lock:
            self.closed = True
            sessions = list(self.sessions.values())
            self.sessions.clear()
        for session in sessions:
            stop = getattr(session, "discard", None) if abort else None
            try:
                (stop or session.close)()
            except Exception:  # noqa: BLE001 - closing is best effort; the others still close
                pass
        with self.lock:
            closing, self.closing = self.closing, []
        for closer in closing:  # sessions whose last task was done: closed before run_tasks returns
            closer.join()


def _close_quietly(session: SandboxSession) -> None:
    try:
        session.close()
    except Exception:  # noqa: BLE001 - closing is best effort
        pass


def _open_failure(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text if type(exc).__name__ == "SandboxUnavailable" else f"{type(exc).__name__}: {text}"


def _background(fn: Callable, *args, threads: int = 1, **kwargs) -> None:
    """Call ``fn`` in a daemon thread whose runs may use ``threads`` (``base.run_threads``); its failure
    is left to whoever needs its result."""

    def call() -> None:
        run_threads(threads)
        try:
            fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - the runs that need it try again and report
            pass

    threading.Thread(target=call, daemon=True).start()


def _cache_keys(tasks: list[Task], sandbox: Sandbox, timeout: float) -> tuple[list[str | None], dict[str, str]]:
    """Per task its verdict key (None for missing code), and per paper its (content, environment) key."""
    from .cache import verdict_key

    limits = asdict(sandbox.limits) if is_dataclass(sandbox.limits) else repr(sandbox.limits)
    paper_keys: dict[str, str] = {}
    keys: list[str | None] = []
    for task in tasks:
        if task.paper.id not in paper_keys:
            env = environment_id(sandbox, PaperSpec.from_paper(task.paper))
            paper_keys[task.paper.id] = verdict_key(HARNESS_VERSION, engine_digest(), _content_hash(task.paper), env)
        if task.code is None:
            keys.append(None)
            continue
        keys.append(verdict_key(paper_keys[task.paper.id], task.snippet.file, task.snippet.name,
                                "\n".join(task.code), task.paper.timeout or timeout, limits))
    return keys, paper_keys


@dataclass
class _Plan:
    """What ``run_tasks`` has to do: per task its result so far (a cached verdict) and its verdict key,
    per paper its cache key, and the indices of the tasks left to run."""

    results: list[TestRun | None]
    keys: list[str | None]
    paper_keys: dict[str, str]
    todo: list[int]


def run_tasks(
    tasks: list[Task],
    *,
    sandbox: Sandbox,
    workers: int | None = None,
    timeout: float = 60.0,
    progress: Callable[[TestRun], None] | None = None,
    cache: "VerdictCache | None" = None,
    store: ReferenceStore | None = None,
    stop: threading.Event | None = None,
    cores: int | None = None,
) -> list[TestRun]:
    """Run tasks in parallel (one session per paper); results come back in task order.

    ``cores``: the cores this call's runs share (default: those the process may use); each run's
    BLAS/OpenMP/torch threads are ``cores // runs in flight`` (``base.threads_per_run``).

    With ``cache``, a task whose verdict is stored for the same paper content, snippet, code and
    environment is not run again, provided the paper was shown deterministic in this environment
    (its reference run, made twice, gave identical outcomes); new verdicts of such papers are stored.
    ``store`` keeps the papers' reference outcomes across processes without caching verdicts
    (``cache`` is one too, and wins). ``progress`` is called with each result as it comes, in the
    calling thread. Once ``stop`` is set no task starts, the runs going on are ended (their sessions
    aborted) and the results not yet reported are left out of the list.

    The steps: ``_tasks_prepare`` (cached verdicts, the tasks left), ``_Scheduler.collect`` (the
    workers, the stop), ``_Scheduler.dispatch`` (a task to its paper's session), ``_Scheduler.gate``
    (the paper's health gate), ``_Scheduler.verdict_keep`` (into the cache), ``_environment_faults``.
    """
    plan = _tasks_prepare(tasks, sandbox=sandbox, timeout=timeout, cache=cache, progress=progress)
    scheduler = _Scheduler(tasks, plan, sandbox=sandbox, timeout=timeout, cache=cache,
                           store=cache if cache is not None else store)
    scheduler.collect(workers=max(1, workers or os.cpu_count() or 1), progress=progress, stop=stop, cores=cores)
    return _environment_faults(tasks, plan.results, scheduler.sessions)


def _tasks_prepare(tasks: list[Task], *, sandbox: Sandbox, timeout: float, cache: "VerdictCache | None",
                  progress: Callable[[TestRun], None] | None) -> _Plan:
    """Step 1: every task is to run; with ``cache``, a verdict it holds for a paper shown deterministic
    is the task's result at once (reported to ``progress`` now), and the reference runs it recorded
    in this environment are believed (not made again)."""
    plan = _Plan(results=[None] * len(tasks), keys=[None] * len(tasks), paper_keys={}, todo=list(range(len(tasks))))
    if cache is None:
        return plan
    plan.keys, plan.paper_keys = _cache_keys(tasks, sandbox, timeout)
    trusted = {pid for pid, pk in plan.paper_keys.items() if cache.deterministic(pk)}
    stored = cache.get_many(k for i, k in enumerate(plan.keys) if k and tasks[i].paper.id in trusted)
    plan.todo = []
    for i, key in enumerate(plan.keys):
        if key in stored:
            run = TestRun(**{**stored[key], "extra": {**stored[key].get("extra", {}), "cached": True}})
            plan.results[i] = run
            if progress is not None:
                progress(run)
        else:
            plan.todo.append(i)
    # a reference run recorded by an earlier scoring in this environment need not be repeated
    for paper in {task.paper.id: task.paper for task in tasks}.values():
        detail = cache.paper_detail(plan.paper_keys[paper.id])
        if detail and "tests_run" in detail and detail.get("passed") is not False:
            env = environment_id(sandbox, PaperSpec.from_paper(paper))
            with _REFERENCE_LOCK:
                _REFERENCE.setdefault((env, _content_hash(paper)), detail)
    return plan


#: readings ``_ReadingsAhead`` holds that no worker has taken yet, at most
READINGS_AHEAD = 256
#: how long ``_ReadingsAhead`` waits for the sandbox's head start to be under way, at most (s)
READINGS_WAIT = 10.0


class _ReadingsAhead:
    """The host's reading of the tasks' files (``task_read``), made ahead on a thread of its own in
    the order the workers take the tasks. While the sandbox starts (a warm parent importing its
    environment's modules, a container starting) one core has nothing else to do; the workers then
    find their task's reading made. A reading not made yet (or that failed: the worker meets the
    failure itself and makes it the task's verdict, ``run_task``) is made by the worker, as before.
    At most ``READINGS_AHEAD`` wait; the thread ends once all are made or ``halted`` is set.

    ``after``: the sandbox's head start (``Sandbox.prepare``'s event): the readings begin once its
    processes run (at most ``READINGS_WAIT`` later), not beside the host's steps that start them --
    a reading parses (the interpreter lock held throughout), and each of those steps waited behind one."""

    def __init__(self, tasks: list[Task], order: list[int], halted: threading.Event,
                 after: threading.Event | None = None):
        self.tasks, self.order, self.halted = tasks, [i for i in order if tasks[i].code is not None], halted
        self.after = after
        self.ready: dict[int, tuple[str, "StaticReading"]] = {}
        self.taken: set[int] = set()
        self.room = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True, name="readings-ahead")
        self.thread.start()

    def _read(self) -> None:
        if self.after is not None:
            waited_until = time.monotonic() + READINGS_WAIT
            while not self.after.wait(0.1) and not self.halted.is_set() and time.monotonic() < waited_until:
                pass
        for index in self.order:
            with self.room:
                while len(self.ready) >= READINGS_AHEAD and not self.halted.is_set():
                    self.room.wait(0.5)
                if self.halted.is_set():
                    return
                if index in self.taken:
                    continue  # its worker came first and read it itself
            try:
                read = task_read(self.tasks[index])
            except Exception:  # noqa: BLE001 - the worker reads it again and gives the verdict
                continue
            with self.room:
                if index not in self.taken:
                    self.ready[index] = read

    def take(self, index: int) -> "tuple[str, StaticReading] | None":
        """The task's reading when it was made ahead (None: the worker makes it)."""
        with self.room:
            self.taken.add(index)
            read = self.ready.pop(index, None)
            self.room.notify()
        return read


def longest_runs_first(tasks: list[Task], todo: list[int], sandbox: Sandbox, store: ReferenceStore | None) -> list[int]:
    """The order to run ``todo`` in: the papers whose runs are known to take longest first (their
    reference run's seconds, believed from an earlier scoring: ``reference_known``), the ones not known
    before all of them, each paper's tasks in their own order. A scoring then ends on the shortest runs,
    not on one long run holding a core while the others have nothing left to do. With none known (a
    first scoring) the order is the one given."""
    if store is None:
        with _REFERENCE_LOCK:
            if not _REFERENCE:  # nothing known anywhere: no environment asked for its id
                return todo
    seconds: dict[str, float | None] = {}
    for i in todo:
        paper = tasks[i].paper
        if paper.id in seconds:
            continue
        try:
            known = reference_known(sandbox, paper, store=store) or {}
        except Exception:  # noqa: BLE001 - an order only: not known is the given order's place
            known = {}
        took = known.get("seconds")
        seconds[paper.id] = float(took) if known.get("passed") and isinstance(took, (int, float)) else None
    if all(took is None for took in seconds.values()):
        return todo
    met = {paper_id: n for n, paper_id in enumerate(seconds)}

    def rank(i: int) -> tuple[bool, float, int]:
        took = seconds[tasks[i].paper.id]
        return took is not None, -(took or 0.0), met[tasks[i].paper.id]

    return sorted(todo, key=rank)


class _Scheduler:
    """The runs of one ``run_tasks`` call: each task of ``plan.todo`` dispatched to its paper's session
    (``_Sessions``) by a pool of workers, its verdict collected in task order."""

    def __init__(self, tasks: list[Task], plan: _Plan, *, sandbox: Sandbox, timeout: float,
                 cache: "VerdictCache | None", store: ReferenceStore | None):
        plan.todo = longest_runs_first(tasks, plan.todo, sandbox, store)
        self.tasks, self.plan = tasks, plan
        self.timeout, self.cache, self.store = timeout, cache, store
        counts: dict[str, int] = defaultdict(int)
        for i in plan.todo:
            counts[tasks[i].paper.id] += 1
        order = list({tasks[i].paper.id: tasks[i].paper for i in plan.todo if tasks[i].code is not None}.values())
        queued = Counter(tasks[i].paper.id for i in plan.todo if tasks[i].code is not None)  # (missing: no run)
        self.sessions = _Sessions(sandbox, counts, order=order, timeout=timeout, store=store, queued=queued)
        prepare = getattr(sandbox, "prepare", None)  # each environment's warm parent started now
        begun = None
        if prepare is not None and order:
            try:
                begun = prepare([PaperSpec.from_paper(paper) for paper in order])
            except Exception:  # noqa: BLE001 - a head start only: each session opens on its own all the same
                pass
        self.halted = threading.Event()  # set once ``stop`` is, or when the call ends early (an exception)
        self.readings = _ReadingsAhead(tasks, plan.todo, self.halted,
                                       begun if isinstance(begun, threading.Event) else None)

    def collect(self, *, workers: int, progress: Callable[[TestRun], None] | None,
                stop: threading.Event | None, cores: int | None = None) -> None:
        """Step 2: run the tasks left on ``workers`` threads; each verdict into ``plan.results`` and to
        ``progress`` as it comes. Once ``stop`` is set (or this fails) the runs going on are ended."""
        finished = threading.Event()

        def watch() -> None:  # ends the runs as soon as ``stop`` is set
            assert stop is not None
            while not finished.is_set():
                if stop.wait(0.05):
                    self.halt()
                    return

        # each run's share of the cores: never more threads in all than cores (``threads_per_run``)
        threads = threads_per_run(min(workers, max(1, len(self.plan.todo))), cores)
        self.sessions.threads = threads
        executor = ThreadPoolExecutor(max_workers=workers, initializer=run_threads, initargs=(threads,))
        try:
            if stop is not None:
                if stop.is_set():
                    self.halted.set()
                threading.Thread(target=watch, daemon=True, name="run-tasks-stop").start()
            futures = [executor.submit(self.dispatch, i) for i in self.plan.todo]
            for future in as_completed(futures):
                index, run = future.result()
                if run is None or self.halted.is_set():
                    continue
                self.plan.results[index] = run
                if progress is not None:
                    progress(run)
        except BaseException:
            self.halt()  # a failing progress callback, a job timeout: nothing goes on running behind the caller
            raise
        finally:
            finished.set()
            executor.shutdown(wait=True, cancel_futures=True)
            self.sessions.close_all()

    def halt(self) -> None:
        if not self.halted.is_set():
            self.halted.set()
            self.sessions.close_all(abort=True)

    def dispatch(self, index: int) -> tuple[int, TestRun | None]:
        """Step 3 (in a worker): task ``index`` run in its paper's session, behind the paper's health
        gate; (index, None) when the scoring was halted under it."""
        task = self.tasks[index]
        try:
            if self.halted.is_set():
                return index, None
            if task.code is None:
                return index, missing_run(task)
            paper_timeout = task.paper.timeout or self.timeout
            last = self.sessions.take(task.paper.id)
            session = self.sessions.get(task.paper)
            read = self.readings.take(index)
            run, problem = self.gate(task, session, paper_timeout, last=last, read=read)
            if problem is not None:
                return index, environment_run(task, environment=environment_name(task.paper), reason=problem)
            assert session is not None
            if run is None or run.extra.get("proof_category") == "environment":
                # (an early run whose reference was lost with its sandbox is made again, as any run
                # after the gate would be: against the reference made anew)
                run = run_task(session, task, timeout=paper_timeout, store=self.store, last=last, read=read)
            self.verdict_keep(index, session, run, paper_timeout)
            return index, run
        except Exception:
            if self.halted.is_set():  # its session was aborted under it: no result
                return index, None
            raise
        finally:
            self.sessions.done(task.paper.id)

    def gate(self, task: Task, session: SandboxSession | None, paper_timeout: float, *,
             last: bool = False, read: "tuple[str, StaticReading] | None" = None) -> tuple[TestRun | None, str | None]:
        """Step 4, the health gate: a paper's completions count only where its reference code passes
        (the problem, else None). While its reference run goes on, one run may start beside it (a core
        would wait otherwise): that run is returned, judged against the same reference all the same."""
        early = session is not None and self.sessions.start_early(task.paper)
        run = None
        try:
            if early:
                try:
                    run = run_task(session, task, timeout=paper_timeout, store=self.store,  # type: ignore[arg-type]
                                   last=last, read=read)
                except Exception:  # noqa: BLE001 - the gate says why (or the run is made again after it)
                    if self.halted.is_set():
                        raise
            problem = self.sessions.problem(task.paper, session)
        finally:
            if early:
                self.sessions.early_done(task.paper)
        return run, problem

    def verdict_keep(self, index: int, session: SandboxSession, run: TestRun, paper_timeout: float) -> None:
        """Step 5: with a cache, the verdict is stored when its paper is deterministic here (shown once,
        by its reference run made twice)."""
        cache, key = self.cache, self.plan.keys[index]
        if cache is None or not key:
            return
        task = self.tasks[index]
        pk = self.plan.paper_keys[task.paper.id]
        known = cache.deterministic(pk)
        if known is None:
            info = reference_run(session, task.paper, timeout=paper_timeout, runs=2, store=cache)
            known = bool(info["deterministic"])
            cache.set_deterministic(pk, known, json.dumps(info))
        if known:
            stored = asdict(run)
            stored["extra"] = dict(run.extra)
            cache.put(key, stored)


def _environment_faults(tasks: list[Task], results: list[TestRun | None], sessions: _Sessions) -> list[TestRun]:
    """Step 6: every run of a paper whose environment failed is an environment error (missing and cached
    ones too); the results in task order, without those never reported (a halted scoring)."""
    broken = {pid: reason for pid, reason in {**sessions.gates, **sessions.problems}.items() if reason}
    for i, run in enumerate(results):
        if run is not None and run.paper in broken and run.category != "environment":
            results[i] = environment_run(tasks[i], environment=environment_name(tasks[i].paper), reason=broken[run.paper])
    return [r for r in results if r is not None]
