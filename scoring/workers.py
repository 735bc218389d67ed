"""Supervised RQ workers: keep N ``manage.py rqworker`` processes running, restarting any that ends.

An RQ worker quits on its own when Redis goes away while it runs a job ("found an unhandled
exception, quitting"), and refuses to start while Redis is unreachable. Neither is a reason for the
site to lose its workers: ``WorkerSupervisor`` starts each worker again, after a pause that doubles
with every quick failure in a row (1 s, 2 s, 4 s ... up to ``max_backoff``) and falls back to 1 s once
a worker has stayed up for ``stable_after`` seconds. A job that was running when its worker died
is not lost: a scoring job runs in the worker process itself (``scoring.queue.ScoringWorker``, which
keeps its warm sandboxes between jobs), so it ends with its worker, its heartbeat stops and
``reconcile`` queues it again (it continues with the snippets not yet stored); a job of the other
queues runs in a work horse of its own, which RQ lets finish.

Each worker gets a process group of its own, so a signal reaches it once, from here: SIGTERM or
SIGINT to the supervisor is passed on (RQ's warm shutdown: the running job ends first; a second
signal is RQ's cold shutdown) and the supervisor returns when every worker has ended. Starts
workers only through ``manage.py`` (this module does not import RQ: ``scoring.queue`` does).
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

__all__ = ["WorkerSupervisor", "rqworker_command"]

MANAGE_PY = Path(__file__).resolve().parent.parent / "manage.py"


def rqworker_command(queues: list[str], *extra: str) -> list[str]:
    """The command line of one RQ worker on ``queues`` (django-rq's ``rqworker``), in this interpreter."""
    return [sys.executable, str(MANAGE_PY), "rqworker", *extra, *queues]


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")  # one write a line, flushed: a log read while it runs is whole
    sys.stdout.flush()


@dataclass
class _Slot:
    number: int
    proc: subprocess.Popen | None = None
    started: float = 0.0
    quick_failures: int = 0
    restart_at: float = 0.0
    starts: int = 0
    exits: list[int] = field(default_factory=list)


class WorkerSupervisor:
    """Run ``count`` copies of ``command`` and keep them running until told to stop."""

    def __init__(self, command: list[str], *, count: int, max_backoff: float = 30.0, stable_after: float = 60.0,
                 say: Callable[[str], None] = _say, poll: float = 0.5):
        if count < 1:
            raise ValueError("at least one worker is needed")
        self.command, self.count = list(command), count
        self.max_backoff, self.stable_after, self.poll = max_backoff, stable_after, poll
        self.say = say
        self.slots = [_Slot(number=n + 1) for n in range(count)]
        self.signals: list[int] = []  # received and not yet passed on
        self._stopping = False

    # -- signals ------------------------------------------------------------------------------
    def _on_signal(self, signum: int, frame: object) -> None:
        self.signals.append(signum)

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    # -- workers ------------------------------------------------------------------------------
    def _start(self, slot: _Slot) -> None:
        slot.proc = subprocess.Popen(self.command, process_group=0)
        slot.started = time.monotonic()
        slot.starts += 1
        verb = "started" if slot.starts == 1 else f"restarted (start {slot.starts})"
        self.say(f"worker {slot.number} {verb}: pid {slot.proc.pid}")

    def _backoff(self, slot: _Slot) -> float:
        return min(self.max_backoff, 2.0 ** max(slot.quick_failures - 1, 0))

    def _reap(self, slot: _Slot, now: float) -> None:
        assert slot.proc is not None
        code = slot.proc.returncode
        ran = now - slot.started
        slot.exits.append(code)
        slot.proc = None
        if self._stopping:
            self.say(f"worker {slot.number} stopped (exit {code})")
            return
        slot.quick_failures = 1 if ran >= self.stable_after else slot.quick_failures + 1
        delay = self._backoff(slot)
        slot.restart_at = now + delay
        self.say(f"worker {slot.number} ended (exit {code}) after {ran:.1f} s; starting it again in {delay:.0f} s")

    def _pass_on(self, signum: int) -> None:
        self._stopping = True
        name = signal.Signals(signum).name
        live = [s for s in self.slots if s.proc is not None and s.proc.poll() is None]
        self.say(f"{name}: passed on to {len(live)} worker(s); waiting for them to end")
        for slot in live:
            try:
                slot.proc.send_signal(signum)  # type: ignore[union-attr]
            except ProcessLookupError:
                pass

    def step(self) -> None:
        """One round: pass on signals, reap ended workers, start those whose pause is over."""
        while self.signals:
            self._pass_on(self.signals.pop(0))
        now = time.monotonic()
        for slot in self.slots:
            if slot.proc is not None and slot.proc.poll() is not None:
                self._reap(slot, now)
            if slot.proc is None and not self._stopping and now >= slot.restart_at:
                self._start(slot)

    def running(self) -> bool:
        return any(s.proc is not None for s in self.slots)

    def run(self) -> None:
        """Supervise until a signal stopped every worker."""
        self.install_signal_handlers()
        self.say(f"supervising {self.count} worker(s): {' '.join(self.command[1:])}")
        while True:
            self.step()
            if self._stopping and not self.running():
                self.say("every worker ended; the supervisor stops")
                return
            time.sleep(self.poll)
