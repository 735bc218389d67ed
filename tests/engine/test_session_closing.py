"""A scoring that ends while one of its papers' sessions is being closed (a job lost: its heartbeat
thread ends the work with ``close_all``) joins only closers that were started: joining one listed
but not yet started raised ``RuntimeError: cannot join thread before it is started``, which failed a
whole submission in the fault drill that terminates connections and stops Redis."""
from __future__ import annotations

import threading
import time

from benchmark_core import runner


def test_ending_the_scoring_while_a_session_closes_joins_only_started_closers(monkeypatch):
    original = threading.Thread
    release = threading.Event()

    class SlowStart(original):
        """A closer whose start is slow (a busy host): made and listed, not yet running."""

        def start(self):
            release.wait(5)
            super().start()

    closed = []

    class Session:  # what a paper's sandbox session gives the scheduler to close
        def close(self):
            closed.append(True)

    sessions = runner._Sessions(None, {"p": 1}, order=[], timeout=1.0)
    sessions.sessions["p"] = Session()
    monkeypatch.setattr(runner.threading, "Thread", SlowStart)
    last_run_done = original(target=sessions.done, args=("p",))
    last_run_done.start()  # the paper's last run is done: its session is handed to a closer
    time.sleep(0.2)  # that closer is starting
    original(target=lambda: (time.sleep(0.3), release.set()), daemon=True).start()
    sessions.close_all(abort=True)  # the job is lost meanwhile: the scoring ends
    last_run_done.join(5)
    monkeypatch.undo()
    assert closed == [True]
    assert not sessions.closing
