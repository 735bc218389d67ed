"""The ``docker`` backend (production): containers running the warm runner — one container per
environment serving several papers (a warm parent), or one per paper.

Images come from ``docker_images.py`` (built here, never pulled). A container has no network,
memory/CPU/pids limits, a read-only root, a size-limited tmpfs at /tmp, ``no-new-privileges`` and
all capabilities dropped but the six the runner needs to give each run its own unprivileged uid
(or none at all, as ``nobody``, with ``uid_per_run=False``: see DockerSandbox); the runs have no
capability and never run as root. Everything crosses the Docker API only, so the engine may be on
another host (``DOCKER_HOST``): ``warm.py`` and the papers go in with ``put_archive`` (into a
tmpfs-backed volume at /rcb: a plain ``--tmpfs`` mount is invisible to the archive API), run
requests go to the runner's stdin through the attach socket, answers come back on its stdout
(``warm_client.WarmClient``, the protocol client bwrap uses too), and ``WORK/<id>/result.json`` can
be fetched with ``get_archive`` when an answer is lost.

**Warm parents** (option ``shared_parent``, default on): the container's first process is
``warm.py --zygote --mux``, which imports an environment's modules (torch) once and forks a server
per paper, each with its own paper folder (under a 0700 ``/rcb/papers``), work folder and random
block of run uids; the servers' protocol streams are relayed over the one attach stream as tagged
lines. Runs of two papers are as far apart as two runs of one paper: different uids, no capability.
"""
from __future__ import annotations

import io
import json
import os
import socket
import sys
import tarfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from .base import Limits, PaperSpec, Sandbox, SandboxSession, SandboxUnavailable
from .cgroups import SandboxCgroups
from .docker_images import (BASE_PYTHON, LABEL, PYTHON, base_image_ensure, configured_requirements,  # noqa: F401
                            default_requirements, docker_client, env_image_ensure, normalize_requirements,
                            requirements_for_paper)
from .process import child_env
from .warm import UNSAFE_TO_FORK, scan_imports, split_lines
from .warm_client import (READY_TIMEOUT, WARM_SCRIPT, NotServed, Transport, WarmClient, WarmSession, host_pid,
                          runner_options,
                          json_object, run_uid_base)

__all__ = [
    "DockerSandbox",
    "DockerSession",
    "DockerParentedSession",
    "containers_cleanup",
    "LABEL",
]

INSIDE = "/rcb"
USER = "65534:65534"  # nobody:nogroup, present in every Debian rootfs
STALE_SECONDS = 24 * 3600
#: what the runner keeps (as the container's root) to give each run its own uid; runs keep nothing
RUNNER_CAPS = ("SETUID", "SETGID", "CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL")
SPARE_PAPER_MB = 256  # room a spare container's /rcb keeps for papers' copies (beyond Limits.tmpfs_mb)
#: a warm parent's /rcb: room for the papers it serves and their runs' copies (beyond Limits.tmpfs_mb)
PARENT_PAPERS_MB = 1024
#: a paper whose copies (one per parallel run, plus its own) would take more gets a container of its own
PARENT_PAPER_MB = 256
#: warm parents per environment image (one per set of preloaded modules, see DockerSandbox.parent_for)
PARENTS_PER_IMAGE = 4
#: processes a warm parent may hold beyond its runs' (the parent and the papers' servers)
PARENT_PIDS = 256
#: CPU a container gets beyond its runs' share, for the runner's control work (quota and weight)
RUNNER_CPUS = 0.5
_TAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")


def _log(message: str) -> None:
    print(f"[docker sandbox] {message}", file=sys.stderr, flush=True)




# --------------------------------------------------------------------------- cleanup

def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def containers_cleanup(client, *, everything: bool = False) -> int:
    """Remove sandbox containers and volumes left by dead workers of this host (or older than a day)."""
    removed = 0
    host = socket.gethostname()
    now = time.time()

    def stale(labels: Mapping[str, str], created: float) -> bool:
        if everything:
            return True
        owner = labels.get("org.rcbhub.owner", "")
        owner_host, _, pid = owner.rpartition(":")
        if owner_host == host and pid.isdigit() and not _pid_alive(int(pid)):
            return True
        return now - created > STALE_SECONDS

    for container in client.containers.list(all=True, filters={"label": LABEL}):
        created = container.attrs.get("Created", "")
        try:
            from datetime import datetime  # noqa: PLC0415

            created_ts = datetime.fromisoformat(created[:19]).timestamp() if created else now
        except ValueError:
            created_ts = now
        if stale(container.labels, created_ts):
            try:
                container.remove(force=True, v=True)
                removed += 1
            except Exception:  # noqa: BLE001 - another worker may be removing it too
                pass
    for volume in client.volumes.list(filters={"label": LABEL}):
        labels = volume.attrs.get("Labels") or {}
        if stale(labels, now):
            try:
                volume.remove(force=True)
            except Exception:  # noqa: BLE001 - still in use by a live container
                pass
    return removed




# --------------------------------------------------------------------------- archives

_SKIP = {"__pycache__", ".git", ".ipynb_checkpoints"}


def _owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
    if set(Path(info.name).parts) & _SKIP or info.name.endswith(".pyc"):
        return None
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if info.isdir():
        info.mode = 0o755
    elif info.isfile():
        info.mode = 0o755 if info.mode & 0o100 else 0o644
    return info


def _folder_entry(tar: tarfile.TarFile, name: str, *, uid: int, mode: int) -> None:
    entry = tarfile.TarInfo(name)
    entry.type = tarfile.DIRTYPE
    entry.uid = entry.gid = uid
    entry.mode = mode
    tar.addfile(entry)


def _archive(*, paper: Path | None = None, paper_name: str = "paper", warm: bool = True,
             folders: Mapping[str, tuple[int, int]] = {}) -> bytes:
    """A tar of ``warm.py``, a paper (owned by root: read-only to the runs) and empty folders
    (name -> (owner uid, mode))."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if warm:
            tar.add(str(WARM_SCRIPT), arcname="warm.py", filter=_owned_by_root)
        for name, (uid, mode) in folders.items():
            _folder_entry(tar, name, uid=uid, mode=mode)
        if paper is not None:
            tar.add(str(Path(paper).resolve()), arcname=paper_name, filter=_owned_by_root)
    return buf.getvalue()


def _folder_mb(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total // (1024 * 1024) + 1


def _frames(sock) -> Iterator[tuple[int, bytes]]:
    """Demultiplex a non-TTY attach stream: (1 stdout | 2 stderr, payload) frames."""
    from docker.utils.socket import frames_iter  # noqa: PLC0415

    yield from frames_iter(sock, tty=False)


def _box_remove(box) -> None:
    """Remove a container and its /rcb volume (either may be None or already gone)."""
    container, volume = box
    if container is not None:
        try:
            container.remove(force=True, v=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
    if volume is not None:
        for _ in range(20):
            try:
                volume.remove(force=True)
                return
            except Exception:  # noqa: BLE001 - the engine may still be releasing it
                time.sleep(0.1)


def _ulimits(limits: Limits):
    from docker.types import Ulimit  # noqa: PLC0415

    size = limits.file_size_mb * 1024 * 1024
    return [Ulimit(name="fsize", soft=size, hard=size), Ulimit(name="core", soft=0, hard=0),
            Ulimit(name="nofile", soft=1024, hard=1024)]


# --------------------------------------------------------------------------- containers and channels

class _Container:
    """A started container (and its /rcb volume) whose first process is reached through the attach
    socket: one reader thread hands its stdout, line by line, to ``on_line`` and keeps a tail of its
    stderr. The first process is a shell waiting for one line, the command it ``exec``s (see
    ``DockerSandbox.box_create``)."""

    def __init__(self, sandbox: "DockerSandbox", image: str, *, work_mb: int, kind: str = "session"):
        self.sandbox = sandbox
        self.container, self.volume = sandbox.box_take(image, work_mb=work_mb, kind=kind)
        self.write_lock = threading.Lock()
        self.ended = threading.Event()
        self.stderr_tail = bytearray()
        self.on_line: Callable[[bytes], None] = lambda line: None
        self.on_stderr: Callable[[bytes], None] = lambda data: None
        self.on_end: Callable[[], None] = lambda: None
        self._pid: int | None = None
        try:
            self.sock = self.container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        except Exception as exc:  # noqa: BLE001 - the engine refused: no container then
            _box_remove((self.container, self.volume))
            raise SandboxUnavailable(f"cannot attach to the container: {exc}") from exc

    @property
    def id(self) -> str:
        return self.container.id

    def listen(self) -> None:
        """Start reading (the callbacks are set)."""
        threading.Thread(target=self._read, daemon=True, name="docker-attach").start()

    def _read(self) -> None:
        buf = bytearray()
        try:
            for stream, data in _frames(self.sock):
                if stream == 2:
                    self.stderr_tail += data
                    if len(self.stderr_tail) > 65536:
                        del self.stderr_tail[:-32768]
                    self.on_stderr(data)
                    continue
                buf += data
                for line in split_lines(buf):
                    self.on_line(line)
        except Exception:  # noqa: BLE001 - the socket closes when the container goes
            pass
        finally:
            self.ended.set()
            self.on_end()

    def put(self, archive: bytes, path: str = INSIDE) -> None:
        try:
            ok = self.container.put_archive(path, archive)
        except Exception as exc:  # noqa: BLE001 - gone, or the engine refused
            raise SandboxUnavailable(f"cannot copy files into the container: {exc}") from exc
        if not ok:
            raise SandboxUnavailable("cannot copy files into the container")

    def send(self, data: bytes) -> None:
        """Write to the first process's stdin (OSError once it cannot be reached)."""
        if self.ended.is_set():
            raise OSError("the container is gone")
        with self.write_lock:
            raw = getattr(self.sock, "_sock", self.sock)
            try:
                raw.sendall(data)
            except AttributeError as exc:
                raise OSError(str(exc)) from exc

    def exec(self, argv: list[str]) -> None:
        """The waiting shell becomes ``argv`` (tab-separated on one line: it reads exactly that line)."""
        try:
            self.send(("\t".join(argv) + "\n").encode())
        except OSError as exc:
            self.destroy()
            raise SandboxUnavailable("cannot reach the container's stdin through the attach socket") from exc

    @property
    def pid(self) -> int | None:
        """The host pid of the container's first process (None when the engine is elsewhere: a
        process of that pid here must be in the container's cgroup)."""
        if self._pid is None:
            try:
                self.container.reload()
                pid = int(self.container.attrs["State"].get("Pid") or 0)
                with open(f"/proc/{pid}/cgroup", encoding="utf-8") as fh:
                    ours = self.container.id in fh.read()
            except Exception:  # noqa: BLE001 - no such process here, or the container is gone
                return None
            self._pid = pid if pid and ours else None
        return self._pid

    @property
    def alive(self) -> bool:
        return not self.ended.is_set()

    def oom_killed(self) -> bool:
        try:
            self.container.reload()
            return bool(self.container.attrs["State"].get("OOMKilled"))
        except Exception:  # noqa: BLE001 - removed meanwhile
            return False

    def fetch_json(self, path: str) -> dict[str, Any] | None:
        """A JSON file inside the container, through the archive API (None when it is not there)."""
        try:
            bits, _stat = self.container.get_archive(path)
            with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tar:
                member = tar.next()
                handle = tar.extractfile(member) if member else None
                return json.loads(handle.read()) if handle else None
        except Exception:  # noqa: BLE001 - no such file: the run never finished
            return None

    def destroy(self) -> None:
        self.ended.set()
        try:
            self.sock.close()
        except Exception:  # noqa: BLE001
            pass
        box = (self.container, self.volume)
        self.container = self.volume = None
        _box_remove(box)


class _ContainerChannel(Transport):
    """One runner's streams in a container: lines that arrive before the client listens are kept
    for it (a paper server may say it is ready before its client exists)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.client: WarmClient | None = None
        self.early: list[tuple[str, bytes]] = []
        self.ended = threading.Event()

    def start(self, client: WarmClient) -> None:
        with self.lock:
            self.client = client
            early, self.early = self.early, []
        for kind, data in early:
            (client.on_line if kind == "out" else client.on_stderr)(data)
        if self.ended.is_set():
            client.on_end()

    def deliver(self, kind: str, data: bytes) -> None:
        with self.lock:
            client = self.client
            if client is None:
                self.early.append((kind, data))
                return
        (client.on_line if kind == "out" else client.on_stderr)(data)

    def end(self) -> None:
        with self.lock:
            self.ended.set()
            client = self.client
        if client is not None:
            client.on_end()


class _StandaloneChannel(_ContainerChannel):
    """A standalone runner: the container's first process itself (its whole attach stream)."""

    def __init__(self, box: _Container, argv: list[str]):
        super().__init__()
        self.box, self.argv = box, argv
        box.on_line = lambda line: self.deliver("out", line)
        box.on_stderr = lambda data: self.deliver("err", data)
        box.on_end = self.end

    def start(self, client: WarmClient) -> None:
        super().start(client)
        self.box.listen()
        self.box.exec(self.argv)  # the files are in: the waiting shell becomes the runner

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        return self.box.pid

    def write(self, data: bytes) -> None:
        self.box.send(data)

    def alive(self) -> bool:
        return self.box.alive

    def close(self) -> None:
        self.box.destroy()


class _MuxChannel(_ContainerChannel):
    """A paper server of a docker warm parent: its protocol lines relayed under a tag of its own."""

    def __init__(self, parent: "_DockerParent", tag: str):
        super().__init__()
        self.parent, self.tag = parent, tag
        self.inner_pid = 0
        self._host_pid: int | None = None

    @property
    def pid(self) -> int | None:  # type: ignore[override]
        if self._host_pid is None and self.inner_pid:
            self._host_pid = host_pid(self.parent.box.pid, self.inner_pid)
        return self._host_pid

    def write(self, data: bytes) -> None:
        prefix = self.tag.encode() + b"\t"
        lines = [ln for ln in data.split(b"\n") if ln.strip()]
        self.parent.box.send(b"".join(prefix + ln + b"\n" for ln in lines))

    def alive(self) -> bool:
        return not self.ended.is_set() and self.parent.alive

    def close(self) -> None:
        self.parent.control({"op": "close", "tag": self.tag})  # the end of its stdin: it finishes, then exits
        if not self.ended.wait(10) and self.parent.alive:
            self.kill()
            self.ended.wait(5)
        self.parent.forget(self.tag)

    def kill(self) -> None:
        self.parent.control({"op": "kill", "tag": self.tag})


class _DockerParent:
    """A container whose first process is a warm parent (``warm.py --zygote --mux``): an
    environment's modules imported once, then a server forked per paper on request, its protocol
    relayed as tagged lines. Host-side it starts importing as soon as the container runs; papers
    are copied in meanwhile (``upload``)."""

    def __init__(self, sandbox: "DockerSandbox", image: str, modules: list[str]):
        self.sandbox, self.image, self.modules = sandbox, image, sorted(set(modules))
        self.box = _Container(sandbox, image, work_mb=sandbox.limits.tmpfs_mb + PARENT_PAPERS_MB, kind="parent")
        self.lock = threading.Lock()
        self.channels: dict[str, _MuxChannel] = {}
        self.answers: dict[str, list] = {}
        self.ready: dict[str, Any] | None = None
        self.ready_event = threading.Event()
        self.box.on_line = self._on_line
        self.box.on_end = self._on_end
        self.box.listen()
        try:
            self.box.put(_archive(folders={"papers": (0, 0o700), "runs": (0, 0o711)}))
            argv = [PYTHON, f"{INSIDE}/warm.py", "--zygote", "--mux", "--papers", f"{INSIDE}/papers",
                    "--work", f"{INSIDE}/runs", "--python", PYTHON, "--modules", ",".join(self.modules) or ",",
                    *sandbox.runner_cgroups()]
            preload = sandbox.options.get("preload")
            if preload:
                argv += ["--preload", ",".join(preload)]
            self.box.exec(argv)  # the imports start now, while papers are copied in
        except SandboxUnavailable:
            self.box.destroy()
            raise

    # -- from the container
    def _on_line(self, line: bytes) -> None:
        tag, sep, rest = line.partition(b"\t")
        if not sep:
            return
        if tag:
            channel = self.channels.get(tag.decode(errors="replace"))
            if channel is not None:
                channel.deliver("out", rest)
            return
        msg = json_object(rest)
        if msg is None:
            return
        if msg.get("ready"):
            self.ready = msg
            self.ready_event.set()
        elif "re" in msg:
            with self.lock:
                slot = self.answers.get(str(msg["re"]))
            if slot is not None:
                slot[1] = msg
                slot[0].set()
        elif "stderr" in msg:
            channel = self.channels.get(str(msg["stderr"]))
            if channel is not None:
                channel.deliver("err", str(msg.get("data") or "").encode())
        elif "ended" in msg:
            channel = self.channels.get(str(msg["ended"]))
            if channel is not None:
                channel.end()

    def _on_end(self) -> None:
        self.ready_event.set()
        with self.lock:
            slots = list(self.answers.values())
            channels = list(self.channels.values())
        for slot in slots:
            slot[0].set()
        for channel in channels:
            channel.end()

    # -- use
    @property
    def alive(self) -> bool:
        return self.box.alive

    def wait_ready(self, timeout: float) -> dict[str, Any]:
        if not self.ready_event.wait(timeout) or self.ready is None:
            detail = self.box.stderr_tail.decode(errors="replace")[-2000:]
            raise SandboxUnavailable(f"the warm parent did not start in the container: {detail or 'no output'}")
        return self.ready

    @property
    def refused(self) -> str:
        return str((self.ready or {}).get("refused") or "")

    def serves(self, modules: set[str]) -> bool:
        """Whether a paper importing ``modules`` may be served: the parent holds nothing it does not
        import (what it asked for, until it says what it could import)."""
        if self.ready is not None:
            return not self.refused and set(self.ready.get("preloaded") or ()) <= modules
        return set(self.modules) <= modules

    def control(self, msg: dict[str, Any], *, wait: float | None = None) -> dict[str, Any] | None:
        """Send a message to the parent itself; with ``wait``, its answer (None when none came)."""
        rid = uuid.uuid4().hex[:16]
        slot: list = [threading.Event(), None]
        if wait is not None:
            with self.lock:
                self.answers[rid] = slot
        try:
            self.box.send(b"\t" + json.dumps({**msg, "re": rid}).encode() + b"\n")
            if wait is None:
                return None
            slot[0].wait(wait)
            return slot[1]
        except OSError:
            return None
        finally:
            with self.lock:
                self.answers.pop(rid, None)

    def upload(self, paper: PaperSpec) -> str:
        """Copy the paper into the parent's 0700 papers folder; return its folder's (random) name."""
        token = f"p{uuid.uuid4().hex}"
        self.box.put(_archive(paper=Path(paper.folder), paper_name=token, warm=False), f"{INSIDE}/papers")
        return token

    def serve(self, paper: PaperSpec, token: str, *, work: str) -> WarmClient:
        """A client of a new server of the paper copied in as ``token``, its runs under
        ``/rcb/runs/<work>``; NotServed when the parent refuses."""
        tag = uuid.uuid4().hex
        channel = _MuxChannel(self, tag)
        with self.lock:
            self.channels[tag] = channel
        answer = self.control({"op": "serve", "tag": tag, "paper": f"{INSIDE}/papers/{token}",
                               "work": work, "run_uid_base": run_uid_base()}, wait=60.0)
        if not answer or not answer.get("ok"):
            self.forget(tag)
            raise NotServed(str((answer or {}).get("why") or "the warm parent did not answer"))
        channel.inner_pid = int(answer.get("pid") or 0)
        try:
            return WarmClient(channel, what="the paper's server in the warm parent")
        except SandboxUnavailable:
            self.forget(tag)
            raise

    def forget(self, tag: str) -> None:
        with self.lock:
            self.channels.pop(tag, None)

    def close(self) -> None:
        self.box.destroy()


# --------------------------------------------------------------------------- sessions

class _DockerWarmSession(WarmSession):
    """What both docker sessions share: the container, a lost answer fetched through the archive API."""

    lost_why = "the container's warm runner stopped answering"
    #: where the runner keeps its runs' folders (result.json) inside the container
    work = f"{INSIDE}/runs"

    @property
    def box(self) -> _Container | None:
        raise NotImplementedError

    @property
    def container(self):
        box = self.box
        return box.container if box is not None else None

    @property
    def volume(self):
        box = self.box
        return box.volume if box is not None else None

    @property
    def container_id(self) -> str | None:
        container = self.container
        return container.id if container is not None else None

    def _fetch_result(self, container, rid: str) -> dict[str, Any] | None:
        """The runner's result.json of run ``rid``, through the archive API (when its answer was lost)."""
        box = self.box
        if box is None or box.container is not container:
            return None
        return box.fetch_json(f"{self.work}/{rid}/result.json")

    def _recover(self, client: WarmClient, rid: str) -> dict[str, Any] | None:
        return self._fetch_result(self.container, rid)

    def _lost(self, client: WarmClient) -> tuple[str, bool]:
        box = self.box
        oom = box.oom_killed() if box is not None else False
        why = ("the container ran out of memory (all runs in it at that moment were lost)" if oom
               else self.lost_why)
        with self.lock:
            if client is self.client and not self.closed:
                # last resort: nothing inside could end this run, so its runner goes
                self._end_runner(client)
        return why, oom

    def _end_runner(self, client: WarmClient) -> None:
        client.close()


def _standalone_client(sandbox: "DockerSandbox", paper: PaperSpec, image: str) -> WarmClient:
    """A container of its own for ``paper``, its first process the warm runner."""
    box = _Container(sandbox, image, work_mb=sandbox.work_mb(paper))
    argv = [PYTHON, f"{INSIDE}/warm.py", "--paper", f"{INSIDE}/paper", "--work", f"{INSIDE}/runs"]
    if sandbox.uid_per_run:
        argv += ["--run-uid-base", str(run_uid_base())]
    argv += sandbox.runner_cgroups()
    if paper.fresh_process:
        argv += ["--fresh", "--python", PYTHON]
    preload = sandbox.options.get("preload")
    if preload:
        argv += ["--preload", ",".join(preload)]
    try:
        box.put(_archive(paper=Path(paper.folder), folders={"runs": (0 if sandbox.uid_per_run else 65534, 0o711)}))
    except SandboxUnavailable:
        box.destroy()
        raise
    return WarmClient(_StandaloneChannel(box, argv), what="the warm runner in the container")


class DockerSession(_DockerWarmSession):
    """A container of its own running the warm runner for one paper; ``run`` is thread-safe."""

    def __init__(self, sandbox: "DockerSandbox", paper: PaperSpec):
        self.image = sandbox.image_for(paper)
        super().__init__(sandbox, paper)

    @property
    def box(self) -> _Container | None:
        client = self.client
        return getattr(client.transport, "box", None) if client is not None else None

    def _connect(self) -> WarmClient:
        return _standalone_client(self.sandbox, self.paper, self.image)  # type: ignore[arg-type]


class DockerParentedSession(_DockerWarmSession):
    """A paper served by a warm parent container of its environment (``DockerSandbox.parent_for``):
    the heavy imports were made once for every paper served there; runs are isolated as in a
    container of their own (own uid, own folder) and from the other papers' (other uids, 0700 folders)."""

    def __init__(self, sandbox: "DockerSandbox", paper: PaperSpec):
        self._served_once = False
        super().__init__(sandbox, paper)

    @property
    def box(self) -> _Container | None:
        client = self.client
        transport = client.transport if client is not None else None
        if isinstance(transport, _MuxChannel):
            return transport.parent.box
        return getattr(transport, "box", None)

    def _connect(self) -> WarmClient:
        sandbox: DockerSandbox = self.sandbox  # type: ignore[assignment]
        try:
            for attempt in range(2):
                parent = sandbox.parent_for(self.paper)
                try:
                    token = parent.upload(self.paper)  # while the parent imports
                    parent.wait_ready(READY_TIMEOUT)
                    if parent.refused:
                        sandbox.parent_refused(parent)
                        raise NotServed(parent.refused)
                    work = f"w{uuid.uuid4().hex}"
                    client = parent.serve(self.paper, token, work=work)
                    break
                except (SandboxUnavailable, NotServed):
                    if attempt == 0 and not parent.alive:
                        continue  # the parent went meanwhile (killed, its engine restarted): a new one
                    raise
        except NotServed:
            if not self._served_once:
                raise
            # served before, refused now (its parent died and the new one will not): a container of its own
            self.work = f"{INSIDE}/runs"
            return _standalone_client(sandbox, self.paper, sandbox.image_for(self.paper))
        self._served_once = True
        self.work = f"{INSIDE}/runs/{work}"
        self.paper_dir = f"{INSIDE}/papers/{token}"  # root's: only the paper's server reads it
        return client

    def _end_runner(self, client: WarmClient) -> None:
        transport = client.transport
        if isinstance(transport, _MuxChannel):
            transport.kill()  # the paper's server goes (with its runs); the parent and other papers stay
        else:
            client.close()


# --------------------------------------------------------------------------- the backend

class DockerSandbox(Sandbox):
    """Options: ``parallel`` (runs at once per container; default the engine's CPUs),
    ``preload`` (extra modules), ``memory_mb`` (whole container; default per-run budget x parallel + 1 GiB),
    ``requirements`` (used for papers without their own), ``spare`` (start the next container
    in advance; default on), ``uid_per_run`` (default on, see below), ``shared_parent`` (default
    on: papers of one environment share a warm parent container, see ``parent_for``),
    ``cgroup_parent`` (the containers' parent cgroup; default ``/`` on a cgroupfs engine, see
    ``box_create``).

    With ``uid_per_run`` the warm runner is the container's root, holding only the six
    capabilities it needs (setuid/setgid/chown/fowner/dac_override/kill, everything else dropped,
    ``no-new-privileges``) to give each run its own uid (from a random range per runner): runs
    cannot read, write or signal each other's files and processes, and whatever a run leaves
    behind is found by uid and killed. The
    runs themselves have no capability at all. Without it the whole container is ``nobody`` with
    no capability, and the runs of one paper that are going at the same time share that uid (so
    papers never share a container then).
    """

    name = "docker"

    def __init__(self, *, python: str | None = None, limits: Limits | None = None, **options: Any):
        super().__init__(python=python, limits=limits, **options)
        self.client = docker_client()
        info = self.client.info()
        self.engine_cpus = int(info.get("NCPU") or os.cpu_count() or 1)
        self.engine_version = info.get("ServerVersion", "?")
        self.parallel = int(options.get("parallel") or self.engine_cpus)
        #: the runs' CPU share, and the container's: that plus the runner's control work, at most the engine's
        self.cpus = min(float(self.engine_cpus), max(0.01, self.limits.cpus * self.parallel))
        self.container_cpus = min(float(self.engine_cpus), self.cpus + RUNNER_CPUS)
        self.container_memory_mb = int(options.get("memory_mb") or self.limits.memory_mb * self.parallel + 1024)
        default_parent = "/" if str(info.get("CgroupDriver") or "") == "cgroupfs" else None
        self.cgroup_parent = options.get("cgroup_parent", default_parent) or None
        self._images: dict[tuple[str, ...], str] = {}
        self._images_lock = threading.Lock()
        #: one started, idle container per image, ready for the next paper (option spare=False: none)
        self.spare = bool(options.get("spare", True))
        self.uid_per_run = bool(options.get("uid_per_run", True))
        # papers share a container only when their runs get uids of their own
        self.shared_parent = bool(options.get("shared_parent", True)) and self.uid_per_run
        self._spares: dict[str, tuple[Any, Any]] = {}
        self._spares_making: set[str] = set()
        self._spares_lock = threading.Lock()
        #: image -> its warm parents (one per set of preloaded modules); what a parent refused, by image and modules
        self._parents: dict[str, list[_DockerParent]] = {}
        self._parents_refused: dict[tuple[str, tuple[str, ...]], str] = {}
        self._parents_lock = threading.Lock()
        self.closed = False
        #: each run's own memory and pids cgroup, below one folder per sandbox bound into its containers
        #: (bounded as a whole like one container: runs moved there leave the container's cgroup)
        self.cgroups = SandboxCgroups(enabled=self.uid_per_run and os.geteuid() == 0,
                                      memory_mb=self.container_memory_mb,
                                      pids=self.limits.pids * self.parallel + 64)
        containers_cleanup(self.client)
        self.base = base_image_ensure(self.client)

    def describe(self) -> str:
        return f"docker (engine {self.engine_version}, base {self.base})"

    @property
    def memory_bound(self) -> str:
        return self.cgroups.bound("RLIMIT_AS and the container's memory limit (no memory cgroup per run here)")

    def runner_cgroups(self) -> list[str]:
        """The warm runner's ``--cgroups`` argument (none without a cgroup folder) and its options."""
        made = self.cgroups.get()
        return runner_options(self.options) + (["--cgroups", made.spec] if made is not None else [])

    @property
    def environment_id(self) -> str:
        """What, beside a paper's own files, decides its environment image (for the verdict cache)."""
        import hashlib  # noqa: PLC0415

        inputs = [self.base, BASE_PYTHON, os.path.realpath(self.python or sys.executable),
                  ",".join(self.options.get("requirements") or ()), ",".join(configured_requirements()),
                  ",".join(default_requirements())]
        return f"docker:{self.base}:{hashlib.sha256(chr(10).join(inputs).encode()).hexdigest()[:12]}"

    def environment_id_for(self, paper: PaperSpec) -> str:
        """The environment id of a paper that names an environment: its pins decide the image."""
        from ..environments import environment_get  # noqa: PLC0415

        env = environment_get(paper.environment)
        return self.environment_id if env is None else f"{self.environment_id}:{env.name}:{env.key}"

    def work_mb(self, paper: PaperSpec) -> int:
        """Size of the /rcb tmpfs: the runs' copies of the paper plus their output."""
        return self.limits.tmpfs_mb + max(SPARE_PAPER_MB, _folder_mb(Path(paper.folder)) * (self.parallel + 2))

    def box_create(self, image: str, *, work_mb: int, kind: str = "session"):
        """A started container (and its /rcb volume) waiting for a paper (``kind`` session) or for a
        warm parent (``kind`` parent: room for several papers' servers).

        Its first process is a shell blocked reading one line from stdin: the runner's command
        line (tab-separated), sent once the files are in place; then it ``exec``s it, so the runner
        inherits the attached stdin/stdout. One generic container can so serve any paper.

        CPU: the quota is the runs' share plus ``RUNNER_CPUS`` for the runner's control work (at
        most the engine's CPUs), and so is the weight (1024 per run and one more for the runner);
        inside, runs are at nice 10 and the runner at 0. On a cgroupfs engine the container's
        cgroup sits at the root of the hierarchy (``cgroup_parent``), beside the host's processes,
        instead of below one ``docker`` group that every container shares: there a host busy
        with other work would leave all containers together one process's share of the CPU.
        """
        from docker.types import Mount  # noqa: PLC0415

        client, limits = self.client, self.limits
        labels = {LABEL: "session", "org.rcbhub.owner": _owner()}
        # a size-limited tmpfs that the archive API can still reach, because it is a volume
        volume = client.volumes.create(
            name=f"rcb-{uuid.uuid4().hex[:16]}", driver="local", labels=labels,
            driver_opts={"type": "tmpfs", "device": "tmpfs",
                         # inodes are bounded too: a flood of empty files must not eat the host's memory
                         "o": f"size={work_mb}m,nr_inodes={max(200_000, work_mb * 500)},mode=0755,nosuid,nodev"},
        )
        # dash's `read` takes stdin byte by byte: nothing after the newline (the first request) is lost
        script = "IFS= read -r command || exit 1; set -f; IFS='\t'; exec $command"
        # each run has its own budget of `pids` (RLIMIT_NPROC of its uid); the runner needs a few
        pids = limits.pids * self.parallel + 64 + (PARENT_PIDS if kind == "parent" else 0)
        made = self.cgroups.get()
        cgroup_mounts = [Mount(target=inside, source=host, type="bind", read_only=False)
                         for host, inside in (made.binds() if made is not None else [])]
        extra: dict[str, Any] = {}
        if self.cgroup_parent:
            extra["cgroup_parent"] = self.cgroup_parent
        try:
            container = client.containers.create(
                image,
                ["/bin/sh", "-c", script],
                name=f"rcb-{uuid.uuid4().hex[:12]}",
                labels=labels,
                # see DockerSandbox: the runner is root with six capabilities only so that every
                # run gets its own uid; the runs themselves have no capability at all
                user="0:0" if self.uid_per_run else USER,
                working_dir=INSIDE,
                environment=self.environment(),
                network_mode="none",
                read_only=True,
                tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={limits.tmpfs_mb}m,nr_inodes={max(100_000, limits.tmpfs_mb * 500)},"
                            "mode=1777"},
                mounts=[Mount(target=INSIDE, source=volume.name, type="volume"), *cgroup_mounts],
                cap_drop=["ALL"],
                cap_add=list(RUNNER_CAPS) if self.uid_per_run else None,
                security_opt=["no-new-privileges"],
                mem_limit=f"{self.container_memory_mb}m",
                memswap_limit=f"{self.container_memory_mb}m",
                pids_limit=pids,
                nano_cpus=int(self.container_cpus * 1e9),
                cpu_shares=int(1024 * (self.parallel + 1)),
                ulimits=_ulimits(limits),
                stdin_open=True,
                tty=False,
                ipc_mode="private",
                **extra,
            )
            container.start()
        except Exception:
            volume.remove(force=True)
            raise
        return container, volume

    def box_take(self, image: str, *, work_mb: int, kind: str = "session"):
        """A waiting container for a new session: the spare when it fits, else a new one; a warm
        parent's is always new (it lives as long as the sandbox).

        Starting a container costs the engine most of a second; a spare started in the background
        while the previous paper runs hides that.
        """
        if kind == "parent":
            return self.box_create(image, work_mb=work_mb, kind=kind)
        box = None
        with self._spares_lock:
            spare = self._spares.pop(image, None)
        if spare is not None:
            container, volume = spare
            try:
                container.reload()
                if work_mb <= self.limits.tmpfs_mb + SPARE_PAPER_MB and container.status == "running":
                    box = spare
            except Exception:  # noqa: BLE001 - gone meanwhile
                pass
            if box is None:
                _box_remove(spare)
        if box is None:
            box = self.box_create(image, work_mb=work_mb)
        if self.spare:
            threading.Thread(target=self._spare_make, args=(image,), daemon=True, name="docker-spare").start()
        return box

    def _spare_make(self, image: str) -> None:
        with self._spares_lock:
            if self.closed or image in self._spares or image in self._spares_making:
                return
            self._spares_making.add(image)
        try:
            box = self.box_create(image, work_mb=self.limits.tmpfs_mb + SPARE_PAPER_MB)
        except Exception:  # noqa: BLE001 - only an optimisation: the next open creates its own
            box = None
        with self._spares_lock:
            self._spares_making.discard(image)
            if box is not None and not self.closed and image not in self._spares:
                self._spares[image] = box
                box = None
        if box is not None:
            _box_remove(box)

    def environment(self) -> dict[str, str]:
        env = child_env(f"{INSIDE}/runs")
        env["PATH"] = "/opt/rcb/bin:/usr/local/bin:/usr/bin:/bin"
        env["LANG"] = "C.UTF-8"
        env.pop("LC_ALL", None)
        return env

    def requirements_for(self, paper: PaperSpec) -> tuple[str, ...]:
        """The paper's own file, else its problem set's, else the ``requirements`` option, else inferred."""
        return requirements_for_paper(paper, python=self.python, fallback=self.options.get("requirements"))

    def image_for(self, paper: PaperSpec) -> str:
        reqs = tuple(normalize_requirements(self.requirements_for(paper)))
        with self._images_lock:
            if reqs not in self._images:
                self._images[reqs] = env_image_ensure(self.client, reqs, base=self.base)
            return self._images[reqs]

    def open(self, paper: PaperSpec) -> SandboxSession:
        """A session of ``paper``: served by a warm parent of its environment when one serves it
        (option ``shared_parent``), else by a container of its own."""
        if self.shared_parent and not paper.fresh_process:
            try:
                return DockerParentedSession(self, paper)
            except NotServed:
                pass
        return DockerSession(self, paper)

    def parent_for(self, paper: PaperSpec) -> _DockerParent:
        """A warm parent that may serve ``paper`` (started, without waiting for its imports, when none
        does): one of its environment image whose preloaded modules the paper all imports (a fresh
        interpreter would hold no other), up to PARENTS_PER_IMAGE per image; NotServed when the
        paper must have a container of its own (too big to share one, a fork-unsafe framework, a
        parent that refused)."""
        if _folder_mb(Path(paper.folder)) * (self.parallel + 2) > PARENT_PAPER_MB:
            raise NotServed("the paper is too big to share a container")
        image = self.image_for(paper)
        preload = [m.strip() for m in self.options.get("preload") or () if m.strip()]
        modules = set(scan_imports(str(paper.folder)))
        wanted = tuple(sorted((modules | set(preload)) - set(UNSAFE_TO_FORK)))
        with self._parents_lock:
            if self.closed:
                raise NotServed("the sandbox is closed")
            parents = [p for p in self._parents.get(image, []) if p.alive]
            for gone in set(self._parents.get(image, [])) - set(parents):
                gone.close()
            self._parents[image] = parents
            for parent in parents:
                if parent.serves(modules | set(preload)):
                    return parent
            if (image, wanted) in self._parents_refused:
                raise NotServed(self._parents_refused[(image, wanted)])
            if len(parents) >= PARENTS_PER_IMAGE:
                raise NotServed(f"{PARENTS_PER_IMAGE} warm parents of {image} already, none importing only "
                                "what the paper imports")
            parent = _DockerParent(self, image, list(wanted))
            parents.append(parent)
            return parent

    def parent_refused(self, parent: _DockerParent) -> None:
        """A parent that refuses every paper (its imports left threads, a fork-unsafe module): gone."""
        with self._parents_lock:
            self._parents_refused[(parent.image, tuple(parent.modules))] = parent.refused
            if parent in self._parents.get(parent.image, []):
                self._parents[parent.image].remove(parent)
        parent.close()

    def close(self) -> None:
        with self._spares_lock:
            self.closed = True
            spares = list(self._spares.values())
            self._spares.clear()
        with self._parents_lock:
            parents = [p for group in self._parents.values() for p in group]
            self._parents.clear()
        for parent in parents:
            parent.close()
        for box in spares:
            _box_remove(box)
        self.cgroups.close()  # its containers are gone: no run is in it
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmark_core.sandbox.docker build [PSET ...]``: build the base and env images
    (``docker_images.images_build``); ``cleanup``: remove every sandbox container and volume."""
    import argparse  # noqa: PLC0415

    from .docker_images import images_build  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m benchmark_core.sandbox.docker")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the base image and each problem set's environment images")
    build.add_argument("psets", nargs="*", help="problem-set folders whose papers' environments to build")
    build.add_argument("--requirements", action="append", default=[],
                       help="also build an image for this comma-separated requirements set")
    build.add_argument("--python", help="interpreter whose packages pin what papers without requirements import")
    sub.add_parser("cleanup", help="remove every sandbox container and volume of this engine")
    args = parser.parse_args(argv)
    if args.command == "build":
        return images_build(args.psets, requirements=args.requirements, python=args.python)
    try:
        client = docker_client()
    except SandboxUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"removed {containers_cleanup(client, everything=True)} container(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
