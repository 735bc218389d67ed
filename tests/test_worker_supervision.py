"""Supervised workers: one that ends is started again, signals reach each once, and run.sh's site stays up.

Real processes throughout: the supervisor (scoring.workers) over short-lived Python commands, and
scripts/run.sh itself in a copy of the checkout (its own SQLite and Redis in the copy's var/),
whose RQ worker is killed while the site runs.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from scoring.workers import WorkerSupervisor

from submissions_support import ROOT, free_port, session_kill, wait_for
from test_setup_run import tree  # noqa: F401 - the fixture: a copy of the checkout without var/ or .env


def test_the_pause_before_a_restart_doubles_with_quick_failures_up_to_the_bound():
    sup = WorkerSupervisor(["true"], count=1, max_backoff=30)
    slot = sup.slots[0]
    pauses = []
    for failures in range(1, 8):
        slot.quick_failures = failures
        pauses.append(sup._backoff(slot))
    assert pauses == [1, 2, 4, 8, 16, 30, 30]


def test_a_worker_that_keeps_ending_is_started_again_each_time():
    said: list[str] = []
    sup = WorkerSupervisor([sys.executable, "-c", "import sys; sys.exit(3)"], count=2, max_backoff=0.2,
                           say=said.append)
    deadline = time.monotonic() + 60
    while min(s.starts for s in sup.slots) < 3 and time.monotonic() < deadline:
        sup.step()
        time.sleep(0.05)
    assert all(s.starts >= 3 for s in sup.slots), [s.starts for s in sup.slots]
    assert all(code == 3 for s in sup.slots for code in s.exits) and all(len(s.exits) >= 2 for s in sup.slots)
    assert any("worker 1 ended (exit 3)" in line for line in said)
    assert any("worker 2 restarted (start 3)" in line for line in said)
    for slot in sup.slots:  # leave nothing behind
        if slot.proc is not None:
            slot.proc.wait(10)


# one write per line (os.write: atomic on a pipe), so two workers' lines never interleave
SLEEPER = (
    "import os, signal, sys, time\n"
    "say = lambda word: os.write(1, f'{word} {os.getpid()}\\n'.encode())\n"
    "signal.signal(signal.SIGTERM, lambda *a: (say('TERM'), sys.exit(0)))\n"
    "say('up')\n"
    "time.sleep(120)\n"
)


def test_a_signal_to_the_supervisor_reaches_every_worker_once_and_it_ends_with_them(tmp_path):
    script = (
        "import sys\nfrom scoring.workers import WorkerSupervisor\n"
        f"WorkerSupervisor([sys.executable, '-c', {SLEEPER!r}], count=2, poll=0.1).run()\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        seen = ""
        while len(re.findall(r"^up (\d+)$", seen, re.M)) < 2:
            line = proc.stdout.readline()
            assert line, seen
            seen += line
        workers = sorted(int(pid) for pid in re.findall(r"^up (\d+)$", seen, re.M))
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
        seen += out
        assert proc.returncode == 0, seen
        # each worker got the signal once (its own process group: nothing else sent it one)
        assert sorted(int(pid) for pid in re.findall(r"TERM (\d+)", seen)) == workers, seen
        assert "SIGTERM: passed on to 2 worker(s)" in seen
        assert "restarted" not in seen, seen  # stopping: nothing is started again
        for pid in workers:
            assert not Path(f"/proc/{pid}").exists()
    finally:
        session_kill(proc)


# --- scripts/run.sh ---------------------------------------------------------------------------

def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose parent is ``pid``."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                cmd = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append((int(stat.parent.name), cmd))
        except (OSError, IndexError, ValueError):
            continue
    return found


def _ping(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/ping", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


@pytest.fixture
def checkout(tree: Path) -> Path:
    """test_setup_run's copy of the checkout, with a .venv of its own that is this one (site-packages
    linked) and marked installed for run.sh (its ensure_venv must not pip-install into the shared one)."""
    venv = tree / ".venv"
    venv.unlink()
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(Path(sys.executable).resolve())
    (venv / "lib").symlink_to(Path(sys.prefix) / "lib")
    shutil.copy2(Path(sys.prefix) / "pyvenv.cfg", venv / "pyvenv.cfg")
    digest = subprocess.run("cat requirements*.txt | sha256sum | cut -c1-16", shell=True, cwd=tree, text=True,
                            capture_output=True, check=True).stdout.strip()
    (venv / f".installed-{digest}-requirements.txt").touch()
    return tree


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="run.sh starts a redis-server")
@pytest.mark.skipif(not (Path(sys.prefix) / "pyvenv.cfg").exists(), reason="the tests must run in a virtualenv")
def test_run_sh_keeps_the_site_up_when_its_worker_dies_and_the_supervisor_starts_another(checkout):
    port = free_port()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(checkout), "LANG": "C.UTF-8",
           "PORT": str(port), "RCB_SKIP_DEMO": "1", "RCB_WORKERS": "1"}
    log = open(checkout / "run.log", "wb")
    site = subprocess.Popen(["bash", "scripts/run.sh"], cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    logs = lambda: (checkout / "run.log").read_text(errors="replace")[-3000:] + "".join(  # noqa: E731
        f"\n--- {p.name}\n{p.read_text(errors='replace')[-2000:]}" for p in (checkout / "var/log").glob("*.log"))
    try:
        wait_for(lambda: _ping(port) or site.poll() is not None, timeout=240, what="run.sh's site to answer")
        assert site.poll() is None, logs()

        def worker() -> tuple[int, int] | None:
            supervisors = [pid for pid, cmd in _children(site.pid) if "manage.py workers" in cmd]
            workers = [pid for s in supervisors for pid, cmd in _children(s) if "rqworker" in cmd]
            return (supervisors[0], workers[0]) if supervisors and workers else None

        wait_for(lambda: worker() is not None, timeout=60, what="the supervised worker")
        supervisor, first = worker()
        os.kill(first, signal.SIGKILL)  # the way the OOM killer ends it
        wait_for(lambda: (w := worker()) is not None and w[1] != first, timeout=60,
                 what="the supervisor to start another worker")
        assert site.poll() is None and _ping(port), logs()
        assert worker()[0] == supervisor
        assert "worker 1 ended (exit -9)" in (checkout / "var/log/worker.log").read_text()
        # and the site still stops as a whole on a signal, its workers with it
        site.send_signal(signal.SIGTERM)
        site.wait(60)
        wait_for(lambda: not _children(supervisor) and not Path(f"/proc/{supervisor}").exists(), timeout=30,
                 what="the supervisor and its worker to end")
        assert not _ping(port)
    finally:
        session_kill(site)


@pytest.mark.parametrize("workers", ["", "1", "2", "3"])
def test_a_hosts_workers_share_its_cores(workers):
    """issue 24: by default each job of a host's RQ workers runs the cores // RCB_WORKERS tests at once
    (at least one), so the runs in flight on the host never outnumber its cores; RCB_SCORING_THREADS
    set says it outright."""
    from benchmark_core.sandbox.base import threads_per_run

    code = "from django.conf import settings; print(settings.RCB_SCORING_THREADS)"
    env = {k: v for k, v in os.environ.items() if k != "RCB_SCORING_THREADS"}
    env.update(RCB_WORKERS=workers, DJANGO_SETTINGS_MODULE="rcbsite.settings")
    got = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr[-2000:]
    assert int(got.stdout.split()[-1]) == threads_per_run(int(workers or 1))
    env["RCB_SCORING_THREADS"] = "5"
    got = subprocess.run([sys.executable, "-c", f"import django; django.setup(); {code}"], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert int(got.stdout.split()[-1]) == 5


def test_the_supervisor_tells_its_workers_how_many_they_are(monkeypatch):
    """`manage.py workers --count N` exports RCB_WORKERS=N to the workers it starts (their settings
    share the cores by it)."""
    from django.core.management import call_command

    from scoring.management.commands import workers as command

    seen = {}

    class Supervisor:
        def __init__(self, argv, *, count, max_backoff, say):
            seen["count"] = count

        def run(self):
            seen["env"] = os.environ.get("RCB_WORKERS")

    monkeypatch.setattr(command, "WorkerSupervisor", Supervisor)
    monkeypatch.setenv("RCB_WORKERS", "1")
    call_command("workers", "--count", "3", "scoring")
    assert seen == {"count": 3, "env": "3"}
