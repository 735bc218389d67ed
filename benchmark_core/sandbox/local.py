"""The ``local`` backend: a plain subprocess with rlimits in its own process group.

It isolates nothing beyond resource limits, so it is for trusted code only (the engine's own
tests, the demo set); the site refuses it for public submissions.
"""
from __future__ import annotations

import os
import resource
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Mapping

from .base import PaperSpec, RunResult, Sandbox, SandboxSession, SandboxUnavailable
from .process import child_env, interpreter_paths, run_process
from .skel import home_seed, skel_for

__all__ = ["LocalSandbox", "copy_paper", "write_files"]


def copy_paper(src: Path, dst: Path) -> None:
    shutil.copytree(src, dst, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))


def write_files(root: Path, files: Mapping[str, str]) -> None:
    base = root.resolve()
    for rel, text in files.items():
        target = (root / rel).resolve()
        if not target.is_relative_to(base):
            raise ValueError(f"refusing to write outside the paper folder: {rel}")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _limits(memory_mb: int, file_size_mb: int):
    def apply() -> None:
        mem = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        size = file_size_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


class LocalSession(SandboxSession):
    def run(self, files: Mapping[str, str], *, timeout: float, last: bool = False) -> RunResult:
        limits = self.sandbox.limits
        with tempfile.TemporaryDirectory(prefix=f"rcb-{self.paper.id}-") as tmp:
            work = Path(tmp) / "paper"
            copy_paper(self.paper.folder, work)
            write_files(work, files)
            home = Path(tmp) / "home"
            home.mkdir()
            python = self.sandbox.interpreter_for(self.paper) or sys.executable
            # as a user's kept home holds what the environment's first imports wrote (font lists)
            home_seed(self.sandbox.home_skel(python), str(home))
            outcome = run_process(
                [python, self.paper.test_script],
                cwd=str(work),
                env=child_env(str(home)),
                timeout=timeout,
                output_bytes=limits.output_bytes,
                preexec=_limits(limits.memory_mb, limits.file_size_mb),
            )
        return RunResult(
            exit_code=outcome.exit_code,
            signal=outcome.signal,
            timed_out=outcome.timed_out,
            stdout=outcome.stdout,
            stderr=outcome.stderr,
            seconds=outcome.seconds,
            truncated=outcome.truncated,
        )


_SKELS: dict[str, Path | None] = {}
_SKELS_LOCK = threading.Lock()


class LocalSandbox(Sandbox):
    name = "local"
    trusted_only = True

    @staticmethod
    def home_skel(python: str) -> Path | None:
        """The home skeleton of ``python``'s environment (``sandbox.skel``), looked up once per interpreter."""
        with _SKELS_LOCK:
            if python not in _SKELS:
                try:
                    _SKELS[python] = skel_for(python, interpreter_paths(python)["packages"])
                except SandboxUnavailable:
                    _SKELS[python] = None
            return _SKELS[python]

    @property
    def environment_id(self) -> str:
        return f"local:{os.path.realpath(self.python or sys.executable)}"

    def environment_id_for(self, paper: PaperSpec) -> str:
        """Verdicts and reference outcomes of different interpreters must never be mixed up."""
        return f"local:{os.path.realpath(self.interpreter_for(paper) or sys.executable)}"

    def open(self, paper: PaperSpec) -> SandboxSession:
        return LocalSession(self, paper)
