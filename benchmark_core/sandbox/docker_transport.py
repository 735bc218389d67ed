"""Transport of the ``docker`` backend: what crosses into a started container and back, through the
Docker API only (the engine may be on another host). Files go in as tar archives (``put_archive``);
the container's first process, a shell waiting for one line, is told the runner's command line
(``Container.exec``) and is then reached through the attach socket: requests to its stdin, answers
line by line from its stdout (``Container``); a lost answer's ``result.json`` comes back with
``get_archive``. A standalone runner is the whole attach stream (``StandaloneChannel``); a warm
parent (``DockerParent``, ``warm.py --zygote --mux``) relays its papers' servers as tagged lines,
one ``MuxChannel`` each. The protocol client on top is ``warm_client.WarmClient``.

Who may import it: ``docker.py`` (and tests). Containers are made and removed by ``docker_containers.py``.
"""
from __future__ import annotations

import io
import json
import os
import tarfile
import threading
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from .base import PaperSpec, SandboxUnavailable
from .bytecode import BYTECODE_FOLDER, runner_bytecode
from .docker_containers import INSIDE, Box, box_remove
from .docker_images import PYTHON
from .warm import split_lines
from .warm_client import WARM_SCRIPT, NotServed, Transport, WarmClient, host_pid, json_object, run_uid_base

__all__ = ["Container", "ContainerChannel", "StandaloneChannel", "MuxChannel", "DockerParent", "files_archive",
           "folder_listing", "PARENT_PAPERS_MB", "AHEAD_PAPERS_MB"]

#: a warm parent's /rcb: room for the papers it serves and their runs' copies (beyond Limits.tmpfs_mb)
PARENT_PAPERS_MB = 1024
#: of that room, what the papers copied in ahead, all in one archive, may take (``DockerParent``)
AHEAD_PAPERS_MB = PARENT_PAPERS_MB // 8


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


def folder_listing(folder: Path) -> tuple[int, tuple]:
    """(bytes, what the folder holds: each file's path, size and time), the files a copy of it takes
    (caches and bytecode left out, as ``files_archive`` leaves them)."""
    total, listing = 0, []
    for root, dirs, files in os.walk(folder):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP)
        for name in sorted(files):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(root, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            total += st.st_size
            listing.append((os.path.relpath(path, folder), st.st_size, st.st_mtime_ns, st.st_mode))
    return total, tuple(listing)


def files_archive(*, paper: Path | None = None, paper_name: str = "paper", warm: bool = True,
                  folders: Mapping[str, tuple[int, int]] = {}, papers: Mapping[str, Path] = {}) -> bytes:
    """A tar of ``warm.py`` (and its rooms' bytecode, ``warm-pyc``: sandbox/bytecode.py), a paper
    (owned by root: read-only to the runs), or several (``papers``: name -> folder), and empty
    folders (name -> (owner uid, mode))."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        if warm:
            tar.add(str(WARM_SCRIPT), arcname="warm.py", filter=_owned_by_root)
            bytecode = runner_bytecode(f"{INSIDE}/warm.py")  # the runner's rooms compiled once, here
            if bytecode:
                _folder_entry(tar, BYTECODE_FOLDER, uid=0, mode=0o755)
            for name, data in sorted(bytecode.items()):
                entry = tarfile.TarInfo(f"{BYTECODE_FOLDER}/{name}")
                entry.size, entry.mode, entry.uname, entry.gname = len(data), 0o644, "root", "root"
                tar.addfile(entry, io.BytesIO(data))
        for name, (uid, mode) in folders.items():
            _folder_entry(tar, name, uid=uid, mode=mode)
        for name, folder in {**({paper_name: paper} if paper is not None else {}), **papers}.items():
            tar.add(str(Path(folder).resolve()), arcname=name, filter=_owned_by_root)
    return buf.getvalue()


def _frames(sock) -> Iterator[tuple[int, bytes]]:
    """Demultiplex a non-TTY attach stream: (1 stdout | 2 stderr, payload) frames."""
    from docker.utils.socket import frames_iter  # noqa: PLC0415

    yield from frames_iter(sock, tty=False)


# --------------------------------------------------------------------------- containers and channels

class Container:
    """A started container (and its /rcb volume) whose first process is reached through the attach
    socket: one reader thread hands its stdout, line by line, to ``on_line`` and keeps a tail of its
    stderr. The first process is a shell waiting for one line, the command it ``exec``s (see
    ``docker_containers.Boxes.create``)."""

    def __init__(self, box: Box):
        self.container, self.volume = box
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
            box_remove((self.container, self.volume))
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
        box_remove(box)


class ContainerChannel(Transport):
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


class StandaloneChannel(ContainerChannel):
    """A standalone runner: the container's first process itself (its whole attach stream)."""

    def __init__(self, box: Container, argv: list[str]):
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


class MuxChannel(ContainerChannel):
    """A paper server of a docker warm parent: its protocol lines relayed under a tag of its own."""

    def __init__(self, parent: "DockerParent", tag: str):
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


class DockerParent:
    """A container whose first process is a warm parent (``warm.py --zygote --mux``): an
    environment's modules imported once, then a server forked per paper on request, its protocol
    relayed as tagged lines. Host-side it starts importing as soon as the container runs; papers
    are copied in meanwhile: ``ahead``, the scoring's papers it may serve, in one archive once its
    imports started (each archive the engine unpacks costs it a helper process of its own, about
    40 ms of CPU: a paper copied at its session's start paid it while the other papers' runs
    went on), the others at their session's start (``upload``)."""

    def __init__(self, sandbox: Any, image: str, modules: list[str], ahead: list[PaperSpec] = (),
                 launched: "Callable[[], None] | None" = None):
        self.sandbox, self.image, self.modules = sandbox, image, sorted(set(modules))
        self.box = Container(sandbox.boxes.take(image, work_mb=sandbox.limits.tmpfs_mb + PARENT_PAPERS_MB,
                                                kind="parent"))
        self.lock = threading.Lock()
        self.channels: dict[str, MuxChannel] = {}
        self.answers: dict[str, list] = {}
        self.ready: dict[str, Any] | None = None
        self.ready_event = threading.Event()
        #: the papers copied in ahead: their folder -> (the name of their copy, what the folder held)
        self.copied: dict[str, tuple[str, tuple]] = {}
        self.box.on_line = self._on_line
        self.box.on_end = self._on_end
        self.box.listen()
        try:
            self.box.put(files_archive(folders={"papers": (0, 0o700), "runs": (0, 0o711)}))
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
        if launched is not None:
            launched()
        self.papers_ahead(ahead)

    def papers_ahead(self, papers: list[PaperSpec]) -> None:
        """Copy ``papers`` in, in one archive (up to ``AHEAD_PAPERS_MB``); a paper that is not is
        copied at its session's start (``upload``), as is one whose folder changed since (a copy no
        session takes stays in the container's papers folder until the container goes)."""
        chosen: dict[str, Path] = {}
        listings: dict[str, tuple[str, tuple]] = {}
        room = AHEAD_PAPERS_MB * 1024 * 1024
        for paper in papers:
            folder = str(Path(paper.folder).resolve())
            if folder in listings:
                continue
            size, listing = folder_listing(Path(folder))
            if size > room:
                continue
            room -= size
            token = f"p{uuid.uuid4().hex}"
            chosen[token] = Path(folder)
            listings[folder] = (token, listing)
        if not chosen:
            return
        try:
            self.box.put(files_archive(papers=chosen, warm=False), f"{INSIDE}/papers")
        except (SandboxUnavailable, OSError):
            return  # each is copied at its session's start
        with self.lock:
            self.copied.update(listings)

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

    @property
    def preloads(self) -> set[str] | None:
        """What the parent holds (what it asked for, until it says what it could import); None once
        it refused every paper (``warm_client.parent_pick``)."""
        if self.ready is not None:
            return None if self.refused else set(self.ready.get("preloaded") or ())
        return set(self.modules)

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
        """Copy the paper into the parent's 0700 papers folder; return its folder's (random) name. A
        copy made ahead (``papers_ahead``) is taken instead, once, when the folder still holds what it
        held then (its server removes it when it ends)."""
        folder = str(Path(paper.folder).resolve())
        with self.lock:
            ahead = self.copied.pop(folder, None)
        if ahead is not None and folder_listing(Path(folder))[1] == ahead[1]:
            return ahead[0]
        token = f"p{uuid.uuid4().hex}"
        self.box.put(files_archive(paper=Path(paper.folder), paper_name=token, warm=False), f"{INSIDE}/papers")
        return token

    def serve(self, paper: PaperSpec, token: str, *, work: str) -> WarmClient:
        """A client of a new server of the paper copied in as ``token``, its runs under
        ``/rcb/runs/<work>``; NotServed when the parent refuses."""
        tag = uuid.uuid4().hex
        channel = MuxChannel(self, tag)
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
