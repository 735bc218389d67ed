"""The ``docker`` backend (production): one container per paper, running the warm runner.

Images are built here, never pulled: a base image made offline by ``docker/build-base.sh``
(debootstrap + ``docker import``), then one environment image per paper requirements set, named
by their hash (``rcb-env:<sha12>``), built from wheels downloaded on the worker and installed inside
with ``pip install --no-index``. Both are reused when their tag exists.

A session's container has no network, memory/CPU/pids limits, a read-only root, a size-limited
tmpfs at /tmp, ``no-new-privileges`` and all capabilities dropped but the six the runner needs to
give each run its own unprivileged uid (or none at all, as ``nobody``, with ``uid_per_run=False``:
see DockerSandbox); the runs have no capability and never run as root. Everything crosses
the Docker API only, so the engine may be on another host (``DOCKER_HOST``): the paper folder and
``warm.py`` go in with ``put_archive`` (into a tmpfs-backed volume at /rcb: a plain ``--tmpfs``
mount is invisible to the archive API), run requests go to the runner's stdin through the attach
socket, answers come back on its stdout, and ``WORK/<id>/result.json`` can be fetched with
``get_archive`` when an answer is lost.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator, Mapping

from .base import Limits, PaperSpec, RunResult, Sandbox, SandboxSession, SandboxUnavailable

__all__ = [
    "DockerSandbox",
    "DockerSession",
    "docker_client",
    "base_image_ensure",
    "env_image_ensure",
    "env_image_tag",
    "requirements_for_paper",
    "requirements_infer",
    "containers_cleanup",
    "LABEL",
]

WARM_SCRIPT = Path(__file__).with_name("warm.py")
DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
BUILD_BASE = DOCKER_DIR / "build-base.sh"
#: every container, volume and image we make carries this label (startup cleanup finds them by it)
LABEL = "org.rcbhub.sandbox"
INSIDE = "/rcb"
PYTHON = "/opt/rcb/bin/python"
USER = "65534:65534"  # nobody:nogroup, present in every Debian rootfs
#: the base image's Python (Debian bookworm); the wheels are downloaded for it
BASE_PYTHON = "3.11"
READY_TIMEOUT = 300.0  # importing torch on a cold disk can take a while
ANSWER_GRACE = 60.0  # the runner kills a run at its timeout; this long after, we kill the container
STALE_SECONDS = 24 * 3600
#: what the runner keeps (as the container's root) to give each run its own uid; runs keep nothing
RUNNER_CAPS = ("SETUID", "SETGID", "CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL")
RUN_UID_BASE = 61000
SPARE_PAPER_MB = 256  # room a spare container's /rcb keeps for papers' copies (beyond Limits.tmpfs_mb)
_BUILD_LOCK = threading.Lock()


@contextlib.contextmanager
def _build_lock(tag: str):
    """One build of ``tag`` at a time: threads of this process and other processes of this host."""
    import fcntl  # noqa: PLC0415

    path = Path(tempfile.gettempdir()) / f"rcb-docker-build-{hashlib.sha256(tag.encode()).hexdigest()[:16]}.lock"
    with _BUILD_LOCK, open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _log(message: str) -> None:
    print(f"[docker sandbox] {message}", file=sys.stderr, flush=True)


def docker_client():
    """A client for the engine named by the environment (DOCKER_HOST ...); SandboxUnavailable if none answers."""
    try:
        import docker  # noqa: PLC0415 - optional dependency of the other backends
    except ImportError as exc:
        raise SandboxUnavailable("the docker Python package is missing (pip install docker)") from exc
    try:
        client = docker.from_env(version="auto", timeout=300)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no engine"
        raise SandboxUnavailable(
            f"no Docker engine answers ({exc.__class__.__name__}: {exc}); start one (scripts/docker.sh) "
            "or set DOCKER_HOST"
        ) from exc
    return client


def _image_exists(client, tag: str) -> bool:
    import docker.errors  # noqa: PLC0415

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


# --------------------------------------------------------------------------- images

def base_image_tag() -> str:
    configured = os.environ.get("RCB_DOCKER_BASE_IMAGE")
    if configured:
        return configured
    digest = hashlib.sha256(BUILD_BASE.read_bytes()).hexdigest()[:12]
    return f"rcb-sandbox-base:{digest}"


def base_image_ensure(client, *, log=_log) -> str:
    """The base image's tag, built with docker/build-base.sh when missing (needs root and debootstrap).

    ``RCB_DOCKER_BASE_IMAGE`` names a ready base instead (it must hold a venv at /opt/rcb).
    """
    tag = base_image_tag()
    with _build_lock(tag):
        if _image_exists(client, tag):
            return tag
        if os.environ.get("RCB_DOCKER_BASE_IMAGE"):
            raise SandboxUnavailable(f"RCB_DOCKER_BASE_IMAGE={tag} does not exist on the Docker engine")
        log(f"building the base image {tag} with {BUILD_BASE.name} (debootstrap, a few minutes)")
        started = time.monotonic()
        proc = subprocess.run(["bash", str(BUILD_BASE), tag], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SandboxUnavailable(f"building the base image failed:\n{proc.stderr.strip()[-3000:]}")
        log(f"built {tag} in {time.monotonic() - started:.0f}s")
        return tag


def _normalize(requirements: tuple[str, ...] | list[str]) -> list[str]:
    return sorted({" ".join(r.split()) for r in requirements if r.strip() and not r.strip().startswith("#")})


def configured_requirements() -> tuple[str, ...]:
    """``RCB_DOCKER_DEFAULT_REQUIREMENTS`` (comma-separated): for papers with no requirements of their own."""
    return tuple(r.strip() for r in os.environ.get("RCB_DOCKER_DEFAULT_REQUIREMENTS", "").split(",") if r.strip())


def default_requirements() -> tuple[str, ...]:
    """Always in an inferred set: NumPy, at the worker's own version."""
    try:
        from importlib.metadata import version  # noqa: PLC0415

        return (f"numpy=={version('numpy')}",)
    except Exception:  # noqa: BLE001
        return ("numpy",)


#: import names whose distribution is named differently (used when the worker's env lacks them)
_DIST_NAMES = {"sklearn": "scikit-learn", "PIL": "pillow", "cv2": "opencv-python-headless", "yaml": "PyYAML",
               "skimage": "scikit-image", "bs4": "beautifulsoup4", "attr": "attrs"}
_PSET_REQUIREMENTS = ("paper2code_requirements.txt", "requirements.txt")


def _read_requirements(path: Path) -> list[str]:
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.strip().startswith(("#", "-"))]


def requirements_infer(folder: Path, *, python: str | None = None) -> list[str]:
    """Requirements of a paper that declares none: what its files import, pinned as installed in ``python``.

    Published problem sets run every paper in one shared environment (the operator's ``--python``,
    as the local and bwrap backends use); pinning the imported distributions at that environment's
    versions gives the container the same packages. An import that environment lacks is required by
    name (PyPI's newest wheel).
    """
    from .warm import scan_imports  # noqa: PLC0415 - the runner's own reading of "third-party import"

    modules = sorted(set(scan_imports(str(folder))))
    if not modules:
        return []
    code = (
        "import json, sys\n"
        "from importlib.metadata import packages_distributions, version\n"
        "dists = packages_distributions()\n"
        "out = {}\n"
        "for m in sys.argv[1:]:\n"
        "    names = sorted(set(dists.get(m, [])))\n"
        "    out[m] = [[n, version(n)] for n in names]\n"
        "print(json.dumps(out))\n"
    )
    try:
        proc = subprocess.run([python or sys.executable, "-I", "-c", code, *modules],
                              capture_output=True, text=True, timeout=120, check=True)
        found = json.loads(proc.stdout)
    except (OSError, subprocess.SubprocessError, ValueError):
        found = {}
    reqs: set[str] = set()
    for module in modules:
        pins = found.get(module) or []
        if pins:
            reqs.update(f"{name}=={ver}" for name, ver in pins)
        else:
            reqs.add(_DIST_NAMES.get(module, module))
    return sorted(reqs)


def requirements_for_paper(paper: PaperSpec, *, python: str | None = None, fallback=None) -> tuple[str, ...]:
    """The paper's named environment's pins, else its own requirements, else its problem set's, else
    ``fallback`` or the configured ones, else inferred.

    A curated environment outranks a paper's requirements file (in published sets that is often the
    upstream repository's full training requirements); an unavailable one is SandboxUnavailable.
    """
    from ..environments import environment_get  # noqa: PLC0415

    try:
        env = environment_get(paper.environment)
    except KeyError as exc:
        raise SandboxUnavailable(str(exc.args[0])) from None
    if env is not None:
        if env.unavailable:
            raise SandboxUnavailable(f"environment {env.name!r} is unavailable: {env.unavailable}")
        return tuple(env.requirements)
    if paper.requirements:
        return tuple(paper.requirements)
    folder = Path(paper.folder)
    for name in _PSET_REQUIREMENTS:
        shared = folder.parent / name
        if shared.is_file():
            return tuple(_read_requirements(shared))
    fallback = tuple(fallback or ()) or configured_requirements()
    if fallback:
        return fallback
    inferred = requirements_infer(folder, python=python)
    # NumPy always: nearly every test uses it, and an empty set would need an image of its own
    if not any(r.split("==")[0].lower() == "numpy" for r in inferred):
        inferred += list(default_requirements())
    return tuple(inferred)


def env_image_tag(requirements: tuple[str, ...] | list[str], *, base: str, arch: str = "x86_64") -> str:
    """``rcb-env:<sha12>`` of the base image, the target platform and the normalized requirements."""
    key = "\n".join([base, f"cp{BASE_PYTHON}", arch, *_normalize(requirements)])
    return f"rcb-env:{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def _platform_tags(arch: str) -> list[str]:
    # pip does not widen an explicit --platform to older manylinux versions: list them all
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(36, 16, -1)]
    tags += [f"manylinux2014_{arch}", f"linux_{arch}"]
    if arch == "x86_64":
        tags += ["manylinux2010_x86_64", "manylinux1_x86_64"]
    return tags


def wheels_download(requirements: list[str], dest: Path, *, arch: str) -> None:
    """Download binary wheels for the base image's Python into ``dest`` (on the worker: it has the index)."""
    (dest / "requirements.txt").write_text("\n".join(requirements) + "\n", encoding="utf-8")
    argv = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(dest), "--only-binary=:all:",
            "--python-version", BASE_PYTHON, "--implementation", "cp", "--abi", f"cp{BASE_PYTHON.replace('.', '')}"]
    for tag in _platform_tags(arch):
        argv += ["--platform", tag]
    argv += ["-r", str(dest / "requirements.txt")]
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SandboxUnavailable(
            f"cannot download wheels for {', '.join(requirements)}:\n{proc.stderr.strip()[-2000:]}"
        )


def _tar_folder(src: Path, arcname: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(src), arcname=arcname)
    return buf.getvalue()


def env_image_ensure(client, requirements: tuple[str, ...] | list[str], *, base: str | None = None, log=_log) -> str:
    """The environment image for ``requirements``; built (and then reused) when its tag is missing.

    The wheels go into a stopped container with put_archive, ``pip install --no-index`` runs
    there without network, and the container is committed; the wheels are deleted before the
    commit, so the image holds only the installed packages.
    """
    base = base or base_image_ensure(client, log=log)
    arch = client.info().get("Architecture", platform.machine()) or "x86_64"
    reqs = _normalize(requirements)
    tag = env_image_tag(reqs, base=base, arch=arch)
    with _build_lock(tag):
        if _image_exists(client, tag):
            return tag
        log(f"building {tag} for: {', '.join(reqs) or '(nothing)'}")
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="rcb-wheels-") as tmp:
            wheels = Path(tmp) / "wheels"
            wheels.mkdir()
            if reqs:
                wheels_download(reqs, wheels, arch=arch)
            install = (
                f"{PYTHON} -m pip install --no-cache-dir --no-index --find-links /var/tmp/wheels "
                "-r /var/tmp/wheels/requirements.txt" if reqs else "true"
            )
            container = client.containers.create(
                base, ["/bin/sh", "-c", f"{install}; status=$?; rm -rf /var/tmp/wheels; exit $status"],
                network_mode="none", labels={LABEL: "build"}, user="0:0",
            )
            try:
                container.put_archive("/var/tmp", _tar_folder(wheels, "wheels"))
                container.start()
                status = container.wait(timeout=1800)
                if status.get("StatusCode") != 0:
                    output = container.logs().decode(errors="replace")
                    raise SandboxUnavailable(f"installing {', '.join(reqs)} into {tag} failed:\n{output[-3000:]}")
                container.commit(
                    repository=tag.split(":")[0], tag=tag.split(":")[1],
                    changes=[f'LABEL {LABEL}=env org.rcbhub.requirements="{" ".join(reqs)}"',
                             'CMD ["/opt/rcb/bin/python"]'],
                )
            finally:
                container.remove(force=True, v=True)
        try:  # an image this tag pointed to before (a rebuild) would linger untagged
            client.images.prune(filters={"dangling": True, "label": f"{LABEL}=env"})
        except Exception:  # noqa: BLE001 - only tidying
            pass
        log(f"built {tag} in {time.monotonic() - started:.0f}s")
        return tag


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


# --------------------------------------------------------------------------- sessions

def _paper_archive(paper: PaperSpec, *, work_uid: int) -> bytes:
    """warm.py, the paper (read-only to the runner: owned by root) and the runner's work folder."""
    skip = {"__pycache__", ".git", ".ipynb_checkpoints"}

    def owned_by_root(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if set(Path(info.name).parts) & skip or info.name.endswith(".pyc"):
            return None
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if info.isdir():
            info.mode = 0o755
        elif info.isfile():
            info.mode = 0o755 if info.mode & 0o100 else 0o644
        return info

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(str(WARM_SCRIPT), arcname="warm.py", filter=owned_by_root)
        tar.add(str(Path(paper.folder).resolve()), arcname="paper", filter=owned_by_root)
        work = tarfile.TarInfo("runs")
        work.type = tarfile.DIRTYPE
        work.uid = work.gid = work_uid
        work.mode = 0o711  # runs cannot list each other's (randomly named) folders
        tar.addfile(work)
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


class DockerSession(SandboxSession):
    """One container running the warm runner for one paper; ``run`` is thread-safe."""

    def __init__(self, sandbox: "DockerSandbox", paper: PaperSpec):
        super().__init__(sandbox, paper)
        self.lock = threading.Lock()  # container life
        self.write_lock = threading.Lock()
        self.pending: dict[str, list] = {}
        self.pending_lock = threading.Lock()
        self.container = None
        self.volume = None
        self.sock = None
        self.ready: dict[str, Any] | None = None
        self.dead = True
        self.closed = False
        self.stderr_tail = bytearray()
        self.image = sandbox.image_for(paper)
        self._start()

    # -- container life
    def _start(self) -> None:
        sandbox: DockerSandbox = self.sandbox  # type: ignore[assignment]
        self.container, self.volume = sandbox.box_take(self.image, work_mb=sandbox.work_mb(self.paper))
        argv = [PYTHON, f"{INSIDE}/warm.py", "--paper", f"{INSIDE}/paper", "--work", f"{INSIDE}/runs"]
        if sandbox.uid_per_run:
            argv += ["--run-uid-base", str(_run_uid_base())]
        if self.paper.fresh_process:
            argv += ["--fresh", "--python", PYTHON]
        preload = sandbox.options.get("preload")
        if preload:
            argv += ["--preload", ",".join(preload)]
        self.sock = self.container.attach_socket(params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        self.ready = None
        self.dead = False
        self.stderr_tail = bytearray()
        ready_event = threading.Event()
        threading.Thread(target=self._read, args=(self.sock, ready_event), daemon=True, name="docker-warm").start()
        self.container.put_archive(INSIDE, _paper_archive(self.paper, work_uid=0 if sandbox.uid_per_run else 65534))
        # the files are in: the waiting shell reads this line and becomes the runner
        if not self._send_line("\t".join(argv), self.sock):
            self._destroy()
            raise SandboxUnavailable("cannot reach the container's stdin through the attach socket")
        if not ready_event.wait(READY_TIMEOUT) or self.ready is None:
            detail = self.stderr_tail.decode(errors="replace")[-2000:]
            self._destroy()
            raise SandboxUnavailable(f"the warm runner did not start in the container: {detail or 'no output'}")

    def _read(self, sock, ready_event: threading.Event) -> None:
        buf = bytearray()
        try:
            for stream, data in _frames(sock):
                if stream == 2:
                    self.stderr_tail += data
                    if len(self.stderr_tail) > 65536:
                        del self.stderr_tail[:-32768]
                    continue
                buf += data
                while b"\n" in buf:
                    line, _, rest = bytes(buf).partition(b"\n")
                    buf = bytearray(rest)
                    self._on_line(line, ready_event)
        except Exception:  # noqa: BLE001 - the socket closes when the container goes
            pass
        finally:
            if sock is self.sock:
                self.dead = True
            ready_event.set()
            # wake the runs sent to this container only: a replacement may already be serving others
            with self.pending_lock:
                for slot in self.pending.values():
                    if slot[2] is sock:
                        slot[0].set()

    def _on_line(self, line: bytes, ready_event: threading.Event) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict):
            return
        if msg.get("ready"):
            self.ready = msg
            ready_event.set()
            return
        with self.pending_lock:
            slot = self.pending.get(msg.get("id"))
        if slot is not None:
            slot[1] = msg
            slot[0].set()

    def _destroy(self) -> None:
        self.dead = True
        sock, self.sock = self.sock, None
        if sock is not None:
            try:
                sock.close()
            except Exception:  # noqa: BLE001
                pass
        box = (self.container, self.volume)
        self.container = self.volume = None
        _box_remove(box)

    # -- runs
    def _send_line(self, line: str, sock) -> bool:
        data = (line + "\n").encode()
        try:
            with self.write_lock:
                raw = getattr(sock, "_sock", sock)
                raw.sendall(data)
            return True
        except (OSError, AttributeError):
            return False

    def _fetch_result(self, container, rid: str) -> dict[str, Any] | None:
        """The runner's result.json of run ``rid``, through the archive API (when its answer was lost)."""
        try:
            bits, _stat = container.get_archive(f"{INSIDE}/runs/{rid}/result.json")
            with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tar:
                member = tar.next()
                handle = tar.extractfile(member) if member else None
                return json.loads(handle.read()) if handle else None
        except Exception:  # noqa: BLE001 - no such file: the run never finished
            return None

    def run(self, files: Mapping[str, str], *, timeout: float) -> RunResult:
        from .bwrap import result_from_message  # noqa: PLC0415 - one reading of the runner's answer

        limits = self.sandbox.limits
        with self.lock:
            if self.closed:
                raise RuntimeError("session is closed")
            if self.dead:
                # killed (OOM of the whole container, last-resort timeout): a new one for the rest
                self._destroy()
                self._start()
            container, sock = self.container, self.sock
        rid = uuid.uuid4().hex
        slot: list = [threading.Event(), None, sock]  # event, answer, the socket it was sent on
        with self.pending_lock:
            self.pending[rid] = slot
        started = time.monotonic()
        try:
            payload = {"id": rid, "files": dict(files), "timeout": timeout, "memory_mb": limits.memory_mb,
                       "output_bytes": limits.output_bytes, "pids": limits.pids, "file_size_mb": limits.file_size_mb}
            if self._send_line(json.dumps(payload), sock):
                slot[0].wait(timeout + ANSWER_GRACE)
            msg = slot[1]
            if msg is None and container is not None:
                msg = self._fetch_result(container, rid)
            if msg is None:
                why = "the container's warm runner stopped answering"
                oom = _oom_killed(container)
                if oom:
                    why = "the container ran out of memory (all runs of the paper at that moment were lost)"
                with self.lock:
                    if container is self.container and not self.closed:
                        # last resort: nothing inside could end this run, so the container goes
                        self._destroy()
                tail = self.stderr_tail.decode(errors="replace")[-1000:]
                result = result_from_message(None, seconds=time.monotonic() - started, why=f"{why}: {tail}")
                result.oom = oom
                return result
            return result_from_message(msg, seconds=time.monotonic() - started, why="")
        finally:
            with self.pending_lock:
                self.pending.pop(rid, None)

    @property
    def container_id(self) -> str | None:
        return self.container.id if self.container is not None else None

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self._destroy()


def _run_uid_base() -> int:
    """A uid range of its own for each container's runs.

    Containers share the host's uids (no user namespace), and the kernel counts RLIMIT_NPROC per
    uid across all of them: with one fixed base, runs of two papers (or a bwrap session on the
    same host) would eat each other's process budget.
    """
    return RUN_UID_BASE + 1000 * random.SystemRandom().randrange(1, 2_000_000)


def _oom_killed(container) -> bool:
    try:
        container.reload()
        return bool(container.attrs["State"].get("OOMKilled"))
    except Exception:  # noqa: BLE001 - removed meanwhile
        return False


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


class DockerSandbox(Sandbox):
    """Options: ``parallel`` (runs at once per container; default the engine's CPUs),
    ``preload`` (extra modules), ``memory_mb`` (whole container; default per-run budget x parallel + 1 GiB),
    ``requirements`` (used for papers without their own), ``spare`` (start the next container
    in advance; default on), ``uid_per_run`` (default on, see below).

    With ``uid_per_run`` the warm runner is the container's root, holding only the six
    capabilities it needs (setuid/setgid/chown/fowner/dac_override/kill, everything else dropped,
    ``no-new-privileges``) to give each run its own uid (from a random range per container): runs
    cannot read, write or signal each other's files and processes, and whatever a run leaves
    behind is found by uid and killed. The
    runs themselves have no capability at all. Without it the whole container is ``nobody`` with
    no capability, and the runs of one paper that are going at the same time share that uid.
    """

    name = "docker"

    def __init__(self, *, python: str | None = None, limits: Limits | None = None, **options: Any):
        super().__init__(python=python, limits=limits, **options)
        self.client = docker_client()
        info = self.client.info()
        self.engine_cpus = int(info.get("NCPU") or os.cpu_count() or 1)
        self.engine_version = info.get("ServerVersion", "?")
        self.parallel = int(options.get("parallel") or self.engine_cpus)
        self.cpus = min(float(self.engine_cpus), max(0.01, self.limits.cpus * self.parallel))
        self.container_memory_mb = int(options.get("memory_mb") or self.limits.memory_mb * self.parallel + 1024)
        self._images: dict[tuple[str, ...], str] = {}
        self._images_lock = threading.Lock()
        #: one started, idle container per image, ready for the next paper (option spare=False: none)
        self.spare = bool(options.get("spare", True))
        self.uid_per_run = bool(options.get("uid_per_run", True))
        self._spares: dict[str, tuple[Any, Any]] = {}
        self._spares_making: set[str] = set()
        self._spares_lock = threading.Lock()
        self.closed = False
        containers_cleanup(self.client)
        self.base = base_image_ensure(self.client)

    def describe(self) -> str:
        return f"docker (engine {self.engine_version}, base {self.base})"

    @property
    def environment_id(self) -> str:
        """What, beside a paper's own files, decides its environment image (for the verdict cache)."""
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

    def box_create(self, image: str, *, work_mb: int):
        """A started container (and its /rcb volume) waiting for a paper.

        Its first process is a shell blocked reading one line from stdin: the runner's command
        line (tab-separated), sent once the paper is in place; then it ``exec``s it, so the runner
        inherits the attached stdin/stdout. One generic container can so serve any paper.
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
                mounts=[Mount(target=INSIDE, source=volume.name, type="volume")],
                cap_drop=["ALL"],
                cap_add=list(RUNNER_CAPS) if self.uid_per_run else None,
                security_opt=["no-new-privileges"],
                mem_limit=f"{self.container_memory_mb}m",
                memswap_limit=f"{self.container_memory_mb}m",
                # each run has its own budget of `pids` (RLIMIT_NPROC of its uid); the runner needs a few
                pids_limit=limits.pids * self.parallel + 64,
                nano_cpus=int(self.cpus * 1e9),
                ulimits=_ulimits(limits),
                stdin_open=True,
                tty=False,
                ipc_mode="private",
            )
            container.start()
        except Exception:
            volume.remove(force=True)
            raise
        return container, volume

    def box_take(self, image: str, *, work_mb: int):
        """A waiting container for a new session: the spare when it fits, else a new one.

        Starting a container costs the engine most of a second; a spare started in the background
        while the previous paper runs hides that.
        """
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
        from .local import child_env  # noqa: PLC0415

        env = child_env(f"{INSIDE}/runs")
        env["PATH"] = "/opt/rcb/bin:/usr/local/bin:/usr/bin:/bin"
        env["LANG"] = "C.UTF-8"
        env.pop("LC_ALL", None)
        return env

    def requirements_for(self, paper: PaperSpec) -> tuple[str, ...]:
        """The paper's own file, else its problem set's, else the ``requirements`` option, else inferred."""
        return requirements_for_paper(paper, python=self.python, fallback=self.options.get("requirements"))

    def image_for(self, paper: PaperSpec) -> str:
        reqs = tuple(_normalize(self.requirements_for(paper)))
        with self._images_lock:
            if reqs not in self._images:
                self._images[reqs] = env_image_ensure(self.client, reqs, base=self.base)
            return self._images[reqs]

    def open(self, paper: PaperSpec) -> SandboxSession:
        return DockerSession(self, paper)

    def close(self) -> None:
        with self._spares_lock:
            self.closed = True
            spares = list(self._spares.values())
            self._spares.clear()
        for box in spares:
            _box_remove(box)
        try:
            self.client.close()
        except Exception:  # noqa: BLE001
            pass


def main(argv: list[str] | None = None) -> int:
    """``python -m benchmark_core.sandbox.docker build [PSET ...]``: build the base and env images."""
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m benchmark_core.sandbox.docker")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build the base image and each problem set's environment images")
    build.add_argument("psets", nargs="*", help="problem-set folders whose papers' environments to build")
    build.add_argument("--requirements", action="append", default=[],
                       help="also build an image for this comma-separated requirements set")
    build.add_argument("--python", help="interpreter whose packages pin what papers without requirements import")
    sub.add_parser("cleanup", help="remove every sandbox container and volume of this engine")
    args = parser.parse_args(argv)
    try:
        client = docker_client()
    except SandboxUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.command == "cleanup":
        print(f"removed {containers_cleanup(client, everything=True)} container(s)")
        return 0
    from ..problemset import load_problemset  # noqa: PLC0415

    started = time.monotonic()
    try:
        base = base_image_ensure(client)
        print(f"base: {base}")
        sets: dict[tuple[str, ...], list[str]] = {tuple(_normalize(default_requirements())): ["(default)"]}
        for spec in args.requirements:
            sets.setdefault(tuple(_normalize(spec.split(","))), []).append("--requirements")
        failed = 0
        for folder in args.psets:
            pset = load_problemset(Path(folder))
            for paper in pset.papers:
                try:
                    reqs = tuple(_normalize(requirements_for_paper(PaperSpec.from_paper(paper), python=args.python)))
                except SandboxUnavailable as exc:  # an unavailable environment: its papers are environment errors
                    print(f"{paper.id}: {exc}")
                    continue
                sets.setdefault(reqs, []).append(paper.id)
        for reqs, users in sets.items():
            try:
                tag = env_image_ensure(client, reqs, base=base)
            except SandboxUnavailable as exc:
                # the other images still get built; these papers will be environment errors
                failed += 1
                print(f"FAILED: {', '.join(reqs)}  <- {', '.join(users)}\n{exc}", file=sys.stderr)
                continue
            print(f"{tag}: {', '.join(reqs) or '(nothing)'}  <- {', '.join(users)}")
    except SandboxUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if failed:
        print(f"{failed} image(s) could not be built", file=sys.stderr)
        return 1
    print(f"images ready in {time.monotonic() - started:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
