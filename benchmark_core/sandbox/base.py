"""The sandbox interface: one base class, one module per backend (like Django's session engines).

A backend opens one *session* per paper; a session runs the paper's test many times, each run in
its own copy of the paper folder with some files replaced. ``SandboxSession.run`` must be safe to
call from several threads at once: the scorer runs snippets of one paper in parallel.
"""
from __future__ import annotations

import importlib
import os
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Mapping

__all__ = [
    "Limits",
    "PaperSpec",
    "RunResult",
    "Sandbox",
    "SandboxSession",
    "SandboxUnavailable",
    "BACKENDS",
    "get_sandbox",
    "run_threads",
    "threads_per_run",
]


class _RunThreads(threading.local):
    value = 1


#: the BLAS/OpenMP/torch threads a run started from this thread may use (``run_threads``)
_RUN_THREADS = _RunThreads()


def run_threads(threads: int | None = None) -> int:
    """The threads a run started from the calling thread may use (BLAS, OpenMP, torch's intra-op
    pool); with ``threads``, set it for this thread first. The scheduler sets it in each of its
    workers (``threads_per_run``); a backend that can honour it sends it with each run (the warm
    runner: ``request_payload``); 1 unless set."""
    if threads is not None:
        _RUN_THREADS.value = max(1, min(64, int(threads)))
    return _RUN_THREADS.value


def threads_per_run(runs_in_flight: int, cores: int | None = None) -> int:
    """The threads each of ``runs_in_flight`` runs at once may use so that together they never use
    more than the cores this process may run on (``os.sched_getaffinity``): ``cores // runs``, at
    least 1 (more runs than cores: one thread each, as many runs as there are, the scheduler's choice)."""
    if cores is None:
        try:
            cores = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            cores = os.cpu_count() or 1
    return max(1, cores // max(1, runs_in_flight))


class SandboxUnavailable(RuntimeError):
    """The backend cannot run on this host (no engine, no binary, no permission)."""


class SandboxAway(SandboxUnavailable):
    """The backend's engine does not answer *now* (a stopped or restarting Docker engine): unlike
    the rest of SandboxUnavailable (no binary, no permission, an unknown backend), it may come back
    by itself, so a site's job waits for it rather than failing."""


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 4096
    pids: int = 512
    cpus: float = 1.0
    file_size_mb: int = 256
    tmpfs_mb: int = 512
    output_bytes: int = 64 * 1024  # kept per stream: head + tail


@dataclass(frozen=True)
class PaperSpec:
    """What a backend needs to know of a paper."""

    id: str
    folder: Path
    test_script: str = "paper2code_test.py"
    requirements: tuple[str, ...] = ()
    fresh_process: bool = False
    #: named environment (benchmark_core/environments.py); None: the backend infers one
    environment: str | None = None

    @classmethod
    def from_paper(cls, paper: Any) -> "PaperSpec":
        return cls(
            id=paper.id,
            folder=Path(paper.folder),
            requirements=tuple(paper.requirements),
            fresh_process=bool(paper.fresh_process),
            environment=getattr(paper, "environment", None) or None,
        )


@dataclass
class RunResult:
    exit_code: int | None
    signal: int | None
    timed_out: bool
    stdout: str
    stderr: str
    seconds: float
    truncated: bool = False
    oom: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


class SandboxSession(ABC):
    """A paper opened in a sandbox; runs its test with replaced files."""

    def __init__(self, sandbox: "Sandbox", paper: PaperSpec):
        self.sandbox = sandbox
        self.paper = paper

    @abstractmethod
    def run(self, files: Mapping[str, str], *, timeout: float, last: bool = False) -> RunResult:
        """Run the test in a fresh copy of the paper folder with ``files`` (relative path -> text) replaced.

        ``last``: a hint that the caller has no further run queued for this session (the warm
        runner then makes no process and no copy ahead for a next run; a run asked for after it is
        served all the same)."""

    def close(self) -> None:
        """Release what the session holds (processes, containers, folders)."""

    def __enter__(self) -> "SandboxSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Sandbox(ABC):
    name: ClassVar[str] = ""
    #: a backend that gives no isolation may only run trusted code (the engine's tests, the demo)
    trusted_only: ClassVar[bool] = False

    def __init__(self, *, python: str | None = None, limits: Limits | None = None, **options: Any):
        self.python = python
        #: the interpreter the caller named (backends may fill ``python`` with their default)
        self.python_given = python
        self.limits = limits or Limits()
        self.options = options

    @abstractmethod
    def open(self, paper: PaperSpec) -> SandboxSession:
        """Open a session for one paper."""

    def prepare(self, papers: list[PaperSpec]) -> "threading.Event | None":
        """A scoring's papers, in the order their sessions will open, told before the first opens: a
        backend may start what they will need in the background (bwrap and docker start each
        environment's warm parent). Nothing here depends on it; the default does nothing.

        Returns None, or an event set once the host's part of those starts is done (their processes
        run): the caller's own host work waits for it (``warm_client.parents_prestart``)."""

    def describe(self) -> str:
        return self.name

    @property
    def memory_bound(self) -> str:
        """What bounds the memory of one run (backends with per-run cgroups say so)."""
        return "RLIMIT_AS"

    def interpreter_for(self, paper: PaperSpec) -> str | None:
        """The interpreter of the paper's environment (bwrap, local): option ``pythons`` (name -> path),
        else the venv built in option ``envs_dir``, else ``python``; SandboxUnavailable with the reason
        when the environment is unavailable or not built."""
        from ..environments import environment_get, venv_path, venv_python  # noqa: PLC0415

        name = paper.environment
        pythons = self.options.get("pythons") or {}
        if name and name in pythons:
            return str(pythons[name])
        try:
            env = environment_get(name)
        except KeyError as exc:
            raise SandboxUnavailable(str(exc.args[0])) from None
        if env is None:
            return self.python
        if env.unavailable:
            raise SandboxUnavailable(f"environment {env.name!r} is unavailable: {env.unavailable}")
        envs_dir = self.options.get("envs_dir")
        if envs_dir:
            built = venv_python(env, Path(envs_dir))
            if built is not None:
                return str(built)
            if not self.python_given:
                raise SandboxUnavailable(
                    f"environment {env.name!r} is not built in {envs_dir} (expected {venv_path(env, Path(envs_dir))}): "
                    f"run python -m benchmark_core env build PSET --dir {envs_dir}"
                )
        return self.python

    def close(self) -> None:
        """Release backend-wide resources."""


BACKENDS: dict[str, str] = {
    "local": "benchmark_core.sandbox.local:LocalSandbox",
    "bwrap": "benchmark_core.sandbox.bwrap:BwrapSandbox",
    "docker": "benchmark_core.sandbox.docker:DockerSandbox",
    # docker when an engine answers, else bwrap (saying so), else refuse
    "auto": "benchmark_core.sandbox.auto:auto_sandbox",
}


def get_sandbox(name: str, **kwargs: Any) -> Sandbox:
    """Instantiate a backend by name; raise SandboxUnavailable with the reason when it cannot run."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise SandboxUnavailable(f"unknown sandbox backend {name!r} (known: {', '.join(BACKENDS)})") from None
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SandboxUnavailable(f"backend {name!r} cannot be loaded: {exc}") from exc
    return getattr(module, class_name)(**kwargs)


