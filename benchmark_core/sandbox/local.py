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
from pathlib import Path
from typing import Mapping

from .base import PaperSpec, RunResult, Sandbox, SandboxSession
from .process import child_env, run_process

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
    def run(self, files: Mapping[str, str], *, timeout: float) -> RunResult:
        limits = self.sandbox.limits
        with tempfile.TemporaryDirectory(prefix=f"rcb-{self.paper.id}-") as tmp:
            work = Path(tmp) / "paper"
            copy_paper(self.paper.folder, work)
            write_files(work, files)
            home = Path(tmp) / "home"
            home.mkdir()
            outcome = run_process(
                [self.sandbox.interpreter_for(self.paper) or sys.executable, self.paper.test_script],
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


class LocalSandbox(Sandbox):
    name = "local"
    trusted_only = True

    @property
    def environment_id(self) -> str:
        return f"local:{os.path.realpath(self.python or sys.executable)}"

    def environment_id_for(self, paper: PaperSpec) -> str:
        """Verdicts and reference outcomes of different interpreters must never be mixed up."""
        return f"local:{os.path.realpath(self.interpreter_for(paper) or sys.executable)}"

    def open(self, paper: PaperSpec) -> SandboxSession:
        return LocalSession(self, paper)
