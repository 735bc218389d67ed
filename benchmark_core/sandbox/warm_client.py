"""The host's end of the warm runner's protocol (``warm.py``): one client and one session for every backend.

``warm.py`` reads run requests as JSON lines on its stdin and answers on its stdout (its module
docstring has the protocol). What carries those streams differs per backend — a *transport*:

- ``ProcessTransport``: a process started here (bwrap's standalone runner, the tests' bare runner);
- ``bwrap._Channel``: a paper server forked by a bwrap warm parent (a socket and a stderr pipe);
- ``docker_transport.Container``: a container's attach stream (a standalone runner), or one channel of
  it relayed by a docker warm parent (``warm.py --zygote --mux``).

``WarmClient`` speaks the protocol over any of them (ids, answers matched to requests, the ready
line, a tail of stderr, the end); ``WarmSession`` is the ``SandboxSession`` built on one client that
the backends subclass: they only say how a runner is started (``_connect``) and, for docker, how a
lost answer is looked for (``_recover``). Nothing here is a backend's own: helpers both use
(``result_from_message``, ``run_uid_base``, ``spawn_lasting``, ``host_pid``) live here too.
"""
from __future__ import annotations

import itertools
import json
import os
import secrets
import subprocess
import threading
import time
import uuid
from abc import abstractmethod
from pathlib import Path
from typing import Any, Callable, Mapping

from .base import PaperSpec, RunResult, Sandbox, SandboxSession, SandboxUnavailable, run_threads
from .warm import UNSAFE_TO_FORK, parent_names

__all__ = [
    "ANSWER_GRACE",
    "READY_TIMEOUT",
    "WARM_SCRIPT",
    "NotServed",
    "PARENTS_PER_ENVIRONMENT",
    "ProcessTransport",
    "Transport",
    "WarmClient",
    "WarmSession",
    "host_pid",
    "json_object",
    "paper_preloads",
    "parent_pick",
    "parents_planned",
    "parents_prestart",
    "request_payload",
    "result_from_message",
    "run_uid_base",
    "runner_options",
    "spawn_lasting",
]

#: the runner every backend copies or binds into its sandbox (as ``/rcb/warm.py``): a folder, the
#: stdlib-only package ``sandbox/warm``, which the interpreter runs by its ``__main__.py``
WARM_SCRIPT = Path(__file__).with_name("warm")
READY_TIMEOUT = 300.0  # importing torch on a cold disk can take a while
#: the runner kills a run at its timeout; an answer this much later is given up for lost
ANSWER_GRACE = 60.0
#: each runner's runs get uids BASE+slot with a random BASE: two runners (bwrap or docker, which
#: share the host's uids) never share a uid, so a fork bomb in one cannot use up the other's
#: process limit (RLIMIT_NPROC counts per uid); the lowest uid any run gets is RUN_UID_MIN
RUN_UID_MIN, RUN_UID_BLOCKS, RUN_UID_BLOCK = 100_000, 4_000_000, 1000
_TAIL = 65536


class NotServed(Exception):
    """A warm parent does not serve this paper (the paper gets a runner of its own)."""


#: warm parents per environment (an interpreter for bwrap, an image for docker): one per set of
#: preloaded modules, see ``parent_pick``
PARENTS_PER_ENVIRONMENT = 4


def paper_preloads(paper: PaperSpec, options: Mapping[str, Any]) -> tuple[set[str], tuple[str, ...]]:
    """What a warm parent serving ``paper`` may hold: the names a fresh interpreter running the paper
    would import (``warm.parent_names``, plus the sandbox option ``preload``), and of them the ones a
    new parent for it imports (sorted; a fork-unsafe framework never: ``warm.UNSAFE_TO_FORK``)."""
    preload = [m.strip() for m in options.get("preload") or () if m.strip()]
    names = set(parent_names(str(paper.folder))) | set(preload)
    return names, tuple(sorted(m for m in names if m.split(".")[0] not in UNSAFE_TO_FORK))


def parent_pick(parents: list, names: set[str]):
    """Of an environment's live warm parents, the one to serve a paper whose ``warm.parent_names``
    are ``names``: one whose preloads (``parent.preloads``: a set, None when it serves nothing) are
    all among them (a fresh interpreter running the paper would import each), the most of them
    (its server then imports the least on top). None when none may: the host then starts a parent
    that imports the paper's own ``names`` (while the environment has fewer than
    ``PARENTS_PER_ENVIRONMENT``), else the paper gets a runner of its own. Both backends pick so."""
    fits = [p for p in parents if p.preloads is not None and p.preloads <= names]
    return max(fits, key=lambda p: len(p.preloads), default=None)


def parents_planned(papers: list, environment_of: Callable[[Any], Any],
                    preloads_of: Callable[[Any], tuple[set[str], tuple[str, ...]]]) -> list:
    """Of a scoring's papers, in its order, those whose session would start a warm parent: in each
    environment (``environment_of``), the first paper of each set of imports that no parent started
    for an earlier paper would serve (``parent_pick`` finding none), at most PARENTS_PER_ENVIRONMENT.
    ``preloads_of``: ``paper_preloads`` for the backend's options. A paper that needs a fresh
    process, or that either callable fails on, is left to its own open."""
    planned: dict[Any, list[set[str]]] = {}
    firsts = []
    for paper in papers:
        if paper.fresh_process:
            continue
        try:
            environment = environment_of(paper)
            names, wanted = preloads_of(paper)
        except Exception:  # noqa: BLE001 - its own open will say why
            continue
        sets = planned.setdefault(environment, [])
        if any(preloads <= names for preloads in sets) or len(sets) >= PARENTS_PER_ENVIRONMENT:
            continue
        sets.append(set(wanted))
        firsts.append(paper)
    return firsts


class _Launches:
    """The host's side of a head start: ``event`` is set once each of ``count`` starters has said
    (``one()``'s callable, once) that its parent's process is running, or that its start ended."""

    def __init__(self, count: int):
        self.event, self.left, self.lock = threading.Event(), count, threading.Lock()
        if count <= 0:
            self.event.set()

    def one(self) -> Callable[[], None]:
        said: list[bool] = []

        def say() -> None:
            with self.lock:
                if said:
                    return
                said.append(True)
                self.left -= 1
                if self.left <= 0:
                    self.event.set()
        return say


def parents_prestart(sandbox: Any, papers: list, **how: Any) -> threading.Event:
    """A backend's ``prepare``: ``sandbox.parent_for(paper, launched=..., **how)`` for each of ``papers``
    (the first of each environment, in the scoring's order), in the background. The first
    environment's parent and the second's start at once (the scoring's first open starts the first
    anyway: the second's imports take the core that would wait), the others one after another, each
    once the one before has imported, so that a set of many environments does not import them all
    at once beside the first runs. Only a head start: a failure is left for the paper's own open to
    meet and report.

    Returns an event set once the parents started at once have their processes running (``launched``,
    which ``parent_for`` calls as soon as its process is started, before its imports end; or when the
    start ended). The host's own work for the scoring waits for it (``runner._ReadingsAhead``): the
    readings of the tasks hold the host's interpreter lock in long stretches (a parse), and a start's
    many short steps on the host (a container created, started, its runner executed; a bwrap command
    made and spawned) each waited behind one -- measured 2026-12-07, the first run of seven
    import-bound papers began 0.9-1.4 s later with the readings made beside the starts than after them."""
    groups = [group for group in (papers[:1], papers[1:]) if group]
    launches = _Launches(len(groups))

    def start(group: list, launched: Callable[[], None]) -> None:
        for paper in group:
            try:
                parent = sandbox.parent_for(paper, launched=launched, **how)
                launched()  # (a parent already running, or one whose start says nothing)
                wait = getattr(parent, "wait_ready", None)  # docker's returns while its container imports
                if wait is not None:
                    wait(READY_TIMEOUT)
            except Exception:  # noqa: BLE001 - see above
                launched()
                continue

    for group in groups:
        threading.Thread(target=start, args=(group, launches.one()), daemon=True, name="warm-parent-prestart").start()
    return launches.event


def runner_options(options: Mapping[str, Any]) -> list[str]:
    """The warm runner's arguments from a sandbox's options: ``library_guard=False`` (the bench's
    measure of what the library-namespace guard costs; never for scoring) turns the guard off."""
    return ["--no-library-guard"] if options.get("library_guard") is False else []


def run_uid_base() -> int:
    """A random block of run uids for one runner (see RUN_UID_MIN)."""
    return RUN_UID_MIN + secrets.randbelow(RUN_UID_BLOCKS) * RUN_UID_BLOCK


def request_payload(limits: Any, files: Mapping[str, str], timeout: float, *, last: bool = False) -> dict[str, Any]:
    """One run request of the protocol (the id is added by ``WarmClient.request``); ``threads``: what
    the scheduler gave runs started from this thread (``base.run_threads``); ``last``: no further
    run is queued for the session (the server makes no spare and no copy for a next one)."""
    payload = {"files": dict(files), "timeout": timeout, "memory_mb": limits.memory_mb,
               "output_bytes": limits.output_bytes, "pids": limits.pids, "file_size_mb": limits.file_size_mb,
               "threads": run_threads()}
    if last:
        payload["last"] = True
    return payload


def spawn_lasting(argv: list[str], *, env: Mapping[str, str], pass_fds: tuple[int, ...] = (),
                  **popen: Any) -> subprocess.Popen:
    """Start ``argv`` in a new session from a thread that lives as long as the process does: bwrap's
    --die-with-parent fires when the *thread* that started it ends (sessions open from pool threads)."""
    started = threading.Event()
    box: list = []

    def spawn_and_wait() -> None:
        try:
            box.append(subprocess.Popen(argv, env=dict(env), start_new_session=True, close_fds=True,
                                        pass_fds=pass_fds, **popen))
        except OSError as exc:
            box.append(exc)
        started.set()
        if isinstance(box[0], subprocess.Popen):
            box[0].wait()

    threading.Thread(target=spawn_and_wait, daemon=True, name="warm-runner").start()
    started.wait()
    if isinstance(box[0], OSError):
        raise SandboxUnavailable(f"cannot start {argv[0]}: {box[0]}")
    return box[0]


def _status_field(pid: int, name: str) -> list[str]:
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if line.startswith(name):
                    return line.split()[1:]
    except OSError:
        pass
    return []


def host_pid(ancestor: int | None, inner: int) -> int | None:
    """The host pid of the descendant of ``ancestor`` (a host pid) whose pid in its own namespace is
    ``inner``: how the host finds a paper server that a warm parent reported by its inner pid."""
    if not ancestor:
        return None
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        nspid = _status_field(int(entry), "NSpid:")
        if len(nspid) < 2 or int(nspid[-1]) != inner:
            continue
        pid = int(entry)
        for _ in range(64):  # climb to the ancestor
            ppid = _status_field(pid, "PPid:")
            if not ppid:
                break
            if int(ppid[0]) == ancestor:
                return int(entry)
            if int(ppid[0]) <= 1:
                break
            pid = int(ppid[0])
    return None


def json_object(raw: bytes) -> dict[str, Any] | None:
    """One protocol line read: the JSON object it holds, or None for anything else."""
    try:
        msg = json.loads(raw)
    except ValueError:
        return None
    return msg if isinstance(msg, dict) else None


class Transport:
    """What carries one runner's stdin, stdout and stderr. ``start(client)`` begins delivering to
    ``client.on_line`` (one stdout line, newline stripped), ``client.on_stderr`` (bytes) and, once,
    ``client.on_end``; ``write`` raises OSError once the runner cannot be reached."""

    #: the runner's pid as the host sees it (None when unknown, e.g. on a remote Docker engine)
    pid: int | None = None

    def start(self, client: "WarmClient") -> None:
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        raise NotImplementedError

    def alive(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        """End the runner (its stdin first, so that it finishes what it runs; killed if it lingers)
        and release what the transport holds."""
        raise NotImplementedError


class FileTransport(Transport):
    """A runner whose stdout and stderr are readable files here (a pipe, a socket): two reader threads."""

    stdout: Any = None
    stderr: Any = None

    def start(self, client: "WarmClient") -> None:
        threading.Thread(target=self._read_stdout, args=(client,), daemon=True, name="warm-stdout").start()
        threading.Thread(target=self._read_stderr, args=(client,), daemon=True, name="warm-stderr").start()

    def _read_stdout(self, client: "WarmClient") -> None:
        try:
            for raw in self.stdout:
                client.on_line(raw.rstrip(b"\n"))
        except (OSError, ValueError):
            pass
        self._stdout_ended()
        client.on_end()

    def _stdout_ended(self) -> None:
        pass

    def _read_stderr(self, client: "WarmClient") -> None:
        try:
            for raw in self.stderr:
                client.on_stderr(raw)
        except (OSError, ValueError):
            pass

    def _close_files(self) -> None:
        for stream in (self.stdout, self.stderr):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass


class ProcessTransport(FileTransport):
    """A runner process started here, talking over its own stdin/stdout/stderr pipes."""

    def __init__(self, argv: list[str], *, env: Mapping[str, str], pass_fds: tuple[int, ...] = ()):
        self.proc = spawn_lasting(argv, env=env, pass_fds=pass_fds, stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.pid = self.proc.pid
        self.stdout, self.stderr = self.proc.stdout, self.proc.stderr
        self.write_lock = threading.Lock()

    def write(self, data: bytes) -> None:
        try:
            with self.write_lock:
                assert self.proc.stdin is not None
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
        except ValueError as exc:  # closed
            raise OSError(str(exc)) from exc

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            if self.proc.stdin:
                self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(self.proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.wait()
        self._close_files()


class WarmClient:
    """Talks the warm runner's JSON-lines protocol over a ``Transport``; thread-safe."""

    def __init__(self, transport: Transport, *, ready_timeout: float = READY_TIMEOUT, what: str = "the warm runner"):
        self.transport = transport
        self.pending: dict[str, list] = {}  # id -> [event, answer]
        self.pending_lock = threading.Lock()
        self.stderr_tail = bytearray()
        self.ready: dict[str, Any] | None = None
        self.ready_event = threading.Event()
        self.dead = False
        self.ids = itertools.count()
        transport.start(self)
        if not self.ready_event.wait(ready_timeout) or self.ready is None:
            detail = self.stderr_text(2000)
            self.close()
            raise SandboxUnavailable(f"{what} did not start: {detail or 'no output'}")

    @classmethod
    def spawn(cls, argv: list[str], *, env: Mapping[str, str], pass_fds: tuple[int, ...] = (),
              ready_timeout: float = READY_TIMEOUT) -> "WarmClient":
        """A client of a runner process started here with ``argv``."""
        return cls(ProcessTransport(argv, env=env, pass_fds=pass_fds), ready_timeout=ready_timeout)

    # -- what the transport delivers
    def on_line(self, raw: bytes) -> None:
        msg = json_object(raw)
        if msg is None:
            return
        if msg.get("ready"):
            self.ready = msg
            self.ready_event.set()
            return
        with self.pending_lock:
            slot = self.pending.get(msg.get("id"))
        if slot is not None:
            slot[1] = msg
            slot[0].set()

    def on_stderr(self, data: bytes) -> None:
        self.stderr_tail += data
        if len(self.stderr_tail) > _TAIL:
            del self.stderr_tail[:-_TAIL // 2]

    def on_end(self) -> None:
        self.dead = True
        self.ready_event.set()
        with self.pending_lock:
            for slot in self.pending.values():
                slot[0].set()

    # -- use
    @property
    def pid(self) -> int | None:
        return self.transport.pid

    def stderr_text(self, limit: int = 1000) -> str:
        return self.stderr_tail.decode(errors="replace")[-limit:]

    def new_id(self) -> str:
        # unguessable: a run must not find its neighbours' folders by counting
        return f"r{next(self.ids)}-{uuid.uuid4().hex[:12]}"

    def request(self, payload: dict[str, Any], *, wait: float, rid: str | None = None) -> dict[str, Any] | None:
        """Send one run; return its answer, or None when the runner died or never answered."""
        rid = rid or self.new_id()
        slot: list = [threading.Event(), None]
        with self.pending_lock:
            self.pending[rid] = slot
        try:
            if self.dead:
                return None
            try:
                self.transport.write((json.dumps({**payload, "id": rid}) + "\n").encode())
            except OSError:
                return None
            slot[0].wait(wait)
            return slot[1]
        finally:
            with self.pending_lock:
                self.pending.pop(rid, None)

    @property
    def alive(self) -> bool:
        return not self.dead and self.transport.alive()

    def died(self, grace: float = 2.0) -> bool:
        """True when the runner is gone (its output ends soon after it dies)."""
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not self.alive:
                return True
            time.sleep(0.05)
        return False

    def close(self) -> None:
        self.transport.close()


def result_from_message(msg: dict[str, Any] | None, *, seconds: float, why: str) -> RunResult:
    """A RunResult from a warm runner's answer (or a crash result when there is none, or one that
    cannot be decoded: that run's failure, never an exception out of the session)."""
    if msg is not None:
        try:
            return _result_decode(msg, seconds=seconds)
        except (TypeError, ValueError, AttributeError, OverflowError) as exc:
            why = f"the warm runner's answer cannot be read ({type(exc).__name__}: {str(exc)[:200]})"
    return RunResult(exit_code=None, signal=None, timed_out=False, stdout="", stderr=why, seconds=seconds,
                     extra={"proof": False, "sandbox_error": why[:500]})


def _result_decode(msg: dict[str, Any], *, seconds: float) -> RunResult:
    proof = msg.get("proof") or {}
    extra: dict[str, Any] = {
        "completed": bool(proof.get("completed")),
        "tests_run": int(proof.get("tests_run") or 0),
        # what the run's audit hook reported (runner.apply_proof compares it with the reference run)
        "audit": {k: proof.get(k) for k in ("authentic", "forged", "forged_sample", "skipped", "events",
                                            "snapshots", "overflow", "channel_lost") if k in proof},
    }
    # figures for the bench (no verdict reads them): what each detection cost the run, as its own
    # process counted (``cost_hook_s``, ``cost_checkpoints``...), and how many of the modules it had
    # were imported by the server's learning (``learned``)
    costs = proof.get("costs")
    for name, value in (costs.items() if isinstance(costs, dict) else ()):
        if isinstance(name, str) and isinstance(value, (int, float)) and not isinstance(value, bool):
            extra[f"cost_{name[:20]}"] = value
    for name in ("cpu_seconds", "minor_faults"):  # the run's child's own (wait4), for the bench
        if isinstance(msg.get(name), (int, float)) and not isinstance(msg.get(name), bool):
            extra[name] = msg[name]
    learned = msg.get("learned")
    extra["learned"] = len(learned) if isinstance(learned, list) else 0
    compiled = msg.get("compiled")  # the paper's files its server had compiled for it (watch.prepare_plain)
    extra["compiled"] = len(compiled) if isinstance(compiled, list) else 0
    # what the run imported (its proof's M lines): a reference run's is kept with its outcome, so
    # that a later session whose reference is not run again still learns it (``WarmSession.learn``)
    modules = proof.get("modules")
    if isinstance(modules, list):
        extra["modules"] = [m for m in modules[:4096] if isinstance(m, str)]
    if msg.get("error"):
        extra["sandbox_error"] = str(msg["error"])[:500]
        extra["proof"] = False
    return RunResult(
        exit_code=msg.get("exit_code"),
        signal=msg.get("signal"),
        timed_out=bool(msg.get("timed_out")),
        stdout=str(msg.get("stdout") or ""),
        stderr=str(msg.get("stderr") or ""),
        seconds=float(msg.get("seconds") or seconds),
        truncated=bool(msg.get("truncated")),
        oom=bool(msg.get("oom")),
        extra=extra,
    )


class WarmSession(SandboxSession):
    """A paper served by one warm runner (``WarmClient``); ``run`` may be called from many threads.

    A runner that died (killed from outside, its sandbox gone) is replaced at the next run; a run
    sent to a runner that was already dead is sent once more to its replacement (it never ran).
    Backends say how a runner is started (``_connect``) and may look for a lost answer (``_recover``).
    """

    #: what a run's crash result says when no answer came (followed by the runner's stderr tail)
    lost_why = "the sandbox's warm runner stopped answering"

    def __init__(self, sandbox: Sandbox, paper: PaperSpec):
        super().__init__(sandbox, paper)
        self.lock = threading.Lock()
        self.client: WarmClient | None = None
        self.closed = False
        self._start()

    @abstractmethod
    def _connect(self) -> WarmClient:
        """A client of a new runner serving ``self.paper`` (SandboxUnavailable when none can start)."""

    def _start(self) -> WarmClient:
        self.client = self._connect()
        return self.client

    def _recover(self, client: WarmClient, rid: str) -> dict[str, Any] | None:
        """The answer of run ``rid`` found another way than the protocol (None: nowhere)."""
        return None

    def _lost(self, client: WarmClient) -> tuple[str, bool]:
        """Why no answer came (and whether memory ran out) once it is given up; a backend may end
        the runner there (nothing inside could end that run)."""
        return self.lost_why, False

    @property
    def ready(self) -> dict[str, Any]:
        return (self.client.ready if self.client else None) or {}

    @property
    def dead(self) -> bool:
        client = self.client
        return client is None or not client.alive

    def _live_client(self, stale: WarmClient | None = None) -> WarmClient:
        with self.lock:
            if self.closed:
                raise RuntimeError("session is closed")
            client = self.client
            if client is None or not client.alive or (stale is not None and client is stale):
                if client is not None:
                    client.close()
                client = self._start()
            return client

    def learn(self, modules: list[str]) -> None:
        """Tell the runner what the paper's reference run imported in an earlier session (its outcome
        known, its run not made again here): the server imports what passes its own checks before
        its next spares (``Server.learn_told``). Once per runner; nothing is answered."""
        client = self.client
        if client is None or client.dead or getattr(client, "taught", False) or not modules:
            return
        client.taught = True
        try:
            client.transport.write((json.dumps({"op": "learn", "modules": list(modules)[:4096]}) + "\n").encode())
        except OSError:
            pass

    def run(self, files: Mapping[str, str], *, timeout: float, last: bool = False) -> RunResult:
        client = self._live_client()
        payload = request_payload(self.sandbox.limits, files, timeout, last=last)
        started = time.monotonic()
        rid = client.new_id()
        msg = client.request(payload, wait=timeout + ANSWER_GRACE, rid=rid)
        if msg is None and client.died():
            # the runner was already dead when this run was sent (killed from outside between runs,
            # before its reader saw the end of its output): this run never ran, so run it once more
            # in a new runner instead of failing a completion that was never tried
            client = self._live_client(stale=client)
            rid = client.new_id()
            msg = client.request(payload, wait=timeout + ANSWER_GRACE, rid=rid)
        if msg is not None:
            return result_from_message(msg, seconds=time.monotonic() - started, why="")
        msg = self._recover(client, rid)
        if msg is not None:
            return result_from_message(msg, seconds=time.monotonic() - started, why="")
        why, oom = self._lost(client)
        result = result_from_message(None, seconds=time.monotonic() - started,
                                     why=f"{why}: {client.stderr_text(1000)}")
        result.oom = oom
        return result

    def close(self) -> None:
        with self.lock:
            self.closed = True
            client, self.client = self.client, None
        if client is not None:
            client.close()
