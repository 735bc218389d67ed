"""Container lifecycle of the ``docker`` backend: a container (and its tmpfs-backed /rcb volume) made
with the sandbox's limits, a spare started ahead per image, removed, and the ones dead workers left
behind cleaned up. What crosses into a started container is ``docker_transport.py``'s.

Who may import it: ``docker.py`` and ``docker_transport.py`` (and tests); the site never does.
"""
from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from typing import Any, Mapping

from .base import Limits
from .docker_images import LABEL

__all__ = ["Boxes", "box_remove", "containers_cleanup", "INSIDE", "USER", "RUNNER_CAPS", "RUNNER_CPUS",
           "PARENT_PIDS", "SPARE_PAPER_MB", "STALE_SECONDS"]

INSIDE = "/rcb"
USER = "65534:65534"  # nobody:nogroup, present in every Debian rootfs
STALE_SECONDS = 24 * 3600
#: what the runner keeps (as the container's root) to give each run its own uid; runs keep nothing
RUNNER_CAPS = ("SETUID", "SETGID", "CHOWN", "FOWNER", "DAC_OVERRIDE", "KILL")
SPARE_PAPER_MB = 256  # room a spare container's /rcb keeps for papers' copies (beyond Limits.tmpfs_mb)
#: processes a warm parent may hold beyond its runs' (the parent and the papers' servers)
PARENT_PIDS = 256
#: CPU a container gets beyond its runs' share, for the runner's control work (quota and weight)
RUNNER_CPUS = 0.5

#: a started container and its /rcb volume (either None once removed)
Box = tuple[Any, Any]


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


# --------------------------------------------------------------------------- making and removing

def box_remove(box: Box) -> None:
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


class Boxes:
    """The containers of one ``DockerSandbox``: each made with its limits (``create``), handed out
    with one spare per image started in the background ahead of the next paper (``take``), and the
    spares removed on ``close``."""

    def __init__(self, sandbox: Any):
        self.sandbox = sandbox
        self.spares: dict[str, Box] = {}
        self._spares_making: set[str] = set()
        self._spares_lock = threading.Lock()
        self.closed = False

    def create(self, image: str, *, work_mb: int, kind: str = "session"):
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

        sandbox = self.sandbox
        client, limits = sandbox.client, sandbox.limits
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
        pids = limits.pids * sandbox.parallel + 64 + (PARENT_PIDS if kind == "parent" else 0)
        made = sandbox.cgroups.get()
        cgroup_mounts = [Mount(target=inside, source=host, type="bind", read_only=False)
                         for host, inside in (made.binds() if made is not None else [])]
        extra: dict[str, Any] = {}
        if sandbox.cgroup_parent:
            extra["cgroup_parent"] = sandbox.cgroup_parent
        try:
            container = client.containers.create(
                image,
                ["/bin/sh", "-c", script],
                name=f"rcb-{uuid.uuid4().hex[:12]}",
                labels=labels,
                # see DockerSandbox: the runner is root with six capabilities only so that every
                # run gets its own uid; the runs themselves have no capability at all
                user="0:0" if sandbox.uid_per_run else USER,
                working_dir=INSIDE,
                environment=sandbox.environment(),
                network_mode="none",
                read_only=True,
                tmpfs={"/tmp": f"rw,exec,nosuid,nodev,size={limits.tmpfs_mb}m,nr_inodes={max(100_000, limits.tmpfs_mb * 500)},"
                            "mode=1777"},
                mounts=[Mount(target=INSIDE, source=volume.name, type="volume"), *cgroup_mounts],
                cap_drop=["ALL"],
                cap_add=list(RUNNER_CAPS) if sandbox.uid_per_run else None,
                security_opt=["no-new-privileges"],
                mem_limit=f"{sandbox.container_memory_mb}m",
                memswap_limit=f"{sandbox.container_memory_mb}m",
                pids_limit=pids,
                nano_cpus=int(sandbox.container_cpus * 1e9),
                cpu_shares=int(1024 * (sandbox.parallel + 1)),
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

    def take(self, image: str, *, work_mb: int, kind: str = "session"):
        """A waiting container for a new session: the spare when it fits, else a new one; a warm
        parent's is always new (it lives as long as the sandbox).

        Starting a container costs the engine most of a second; a spare started in the background
        while the previous paper runs hides that.
        """
        if kind == "parent":
            return self.create(image, work_mb=work_mb, kind=kind)
        box = None
        with self._spares_lock:
            spare = self.spares.pop(image, None)
        if spare is not None:
            container, volume = spare
            try:
                container.reload()
                if work_mb <= self.sandbox.limits.tmpfs_mb + SPARE_PAPER_MB and container.status == "running":
                    box = spare
            except Exception:  # noqa: BLE001 - gone meanwhile
                pass
            if box is None:
                box_remove(spare)
        if box is None:
            box = self.create(image, work_mb=work_mb)
        if self.sandbox.spare:
            threading.Thread(target=self._spare_make, args=(image,), daemon=True, name="docker-spare").start()
        return box

    def _spare_make(self, image: str) -> None:
        with self._spares_lock:
            if self.closed or image in self.spares or image in self._spares_making:
                return
            self._spares_making.add(image)
        try:
            box = self.create(image, work_mb=self.sandbox.limits.tmpfs_mb + SPARE_PAPER_MB)
        except Exception:  # noqa: BLE001 - only an optimisation: the next open creates its own
            box = None
        with self._spares_lock:
            self._spares_making.discard(image)
            if box is not None and not self.closed and image not in self.spares:
                self.spares[image] = box
                box = None
        if box is not None:
            box_remove(box)

    def close(self) -> None:
        """No spare from now on; the ones started are removed."""
        with self._spares_lock:
            self.closed = True
            spares = list(self.spares.values())
            self.spares.clear()
        for box in spares:
            box_remove(box)
