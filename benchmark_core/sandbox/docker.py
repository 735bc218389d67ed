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

Its rooms: this module holds the backend (``DockerSandbox``: options, images per paper, warm parents
per image) and its sessions; ``docker_containers.py`` the containers' lifecycle (made with the
limits, a spare ahead, removed, left-overs cleaned up); ``docker_transport.py`` what crosses into
a container (archives, the attach socket, the warm parent's tagged lines); ``docker_images.py``
the images. Only this module is named by the backend registry (``base.BACKENDS``).
"""
from __future__ import annotations

import os
import sys
import threading
import uuid
from pathlib import Path
from typing import Any, Callable

from .base import Limits, PaperSpec, Sandbox, SandboxSession, SandboxUnavailable
from .cgroups import SandboxCgroups
from .docker_containers import INSIDE, RUNNER_CPUS, SPARE_PAPER_MB, Boxes, containers_cleanup
from .docker_images import (BASE_PYTHON, LABEL, PYTHON, base_image_ensure, configured_requirements,  # noqa: F401
                            container_env, default_requirements, docker_client, env_image_ensure,
                            normalize_requirements, requirements_for_paper)
from .docker_transport import Container, DockerParent, MuxChannel, StandaloneChannel, files_archive, folder_listing
from .skel import IMAGE_SKEL
from .warm_client import (PARENTS_PER_ENVIRONMENT, READY_TIMEOUT, NotServed, WarmClient, WarmSession, paper_preloads,
                          parent_pick, parents_planned, parents_prestart, run_uid_base, runner_options)

__all__ = [
    "DockerSandbox",
    "DockerSession",
    "DockerParentedSession",
    "containers_cleanup",
    "LABEL",
]

#: a paper whose copies (one per parallel run, plus its own) would take more gets a container of its own
PARENT_PAPER_MB = 256


def _folder_mb(folder: Path) -> int:
    """The MB a copy of the folder takes (``folder_listing``)."""
    return folder_listing(folder)[0] // (1024 * 1024) + 1


# --------------------------------------------------------------------------- sessions

class _DockerWarmSession(WarmSession):
    """What both docker sessions share: the container, a lost answer fetched through the archive API."""

    lost_why = "the container's warm runner stopped answering"
    #: where the runner keeps its runs' folders (result.json) inside the container
    work = f"{INSIDE}/runs"

    @property
    def box(self) -> Container | None:
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
    box = Container(sandbox.boxes.take(image, work_mb=sandbox.work_mb(paper)))
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
        box.put(files_archive(paper=Path(paper.folder), folders={"runs": (0 if sandbox.uid_per_run else 65534, 0o711)}))
    except SandboxUnavailable:
        box.destroy()
        raise
    return WarmClient(StandaloneChannel(box, argv), what="the warm runner in the container")


class DockerSession(_DockerWarmSession):
    """A container of its own running the warm runner for one paper; ``run`` is thread-safe."""

    def __init__(self, sandbox: "DockerSandbox", paper: PaperSpec):
        self.image = sandbox.image_for(paper)
        super().__init__(sandbox, paper)

    @property
    def box(self) -> Container | None:
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
    def box(self) -> Container | None:
        client = self.client
        transport = client.transport if client is not None else None
        if isinstance(transport, MuxChannel):
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
        if isinstance(transport, MuxChannel):
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
    ``docker_containers.Boxes.create``).

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
        #: image -> its warm parents (one per set of preloaded modules); what a parent refused, by image and modules
        self._parents: dict[str, list[DockerParent]] = {}
        self._parents_refused: dict[tuple[str, tuple[str, ...]], str] = {}
        #: the scoring's papers of each environment (``prepare``), copied into its parent ahead
        self._upcoming: dict[tuple[str, ...], list[PaperSpec]] = {}
        self._parents_lock = threading.Lock()
        self.closed = False
        #: each run's own memory and pids cgroup, below one folder per sandbox bound into its containers
        #: (bounded as a whole like one container: runs moved there leave the container's cgroup)
        self.cgroups = SandboxCgroups(enabled=self.uid_per_run and os.geteuid() == 0,
                                      memory_mb=self.container_memory_mb,
                                      pids=self.limits.pids * self.parallel + 64)
        #: its containers: made with the limits above, a spare per image started ahead (docker_containers.py)
        self.boxes = Boxes(self)
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
        # the image's home skeleton (an image built before it had none: the runner then skips it)
        return (runner_options(self.options) + ["--skel", IMAGE_SKEL]
                + (["--cgroups", made.spec] if made is not None else []))

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


    def environment(self) -> dict[str, str]:
        return container_env(f"{INSIDE}/runs")

    def requirements_for(self, paper: PaperSpec) -> tuple[str, ...]:
        """The paper's own file, else its problem set's, else the ``requirements`` option, else inferred."""
        return requirements_for_paper(paper, python=self.python, fallback=self.options.get("requirements"))

    def image_for(self, paper: PaperSpec) -> str:
        reqs = tuple(normalize_requirements(self.requirements_for(paper)))
        with self._images_lock:
            known = self._images.get(reqs)
        if known is not None:
            return known
        # built (or found) outside the lock: one environment's build does not hold up another's image
        # (``env_image_ensure`` builds a tag once, whoever asks at the same time)
        tag = env_image_ensure(self.client, reqs, base=self.base)
        with self._images_lock:
            return self._images.setdefault(reqs, tag)

    def prepare(self, papers: list[PaperSpec]) -> threading.Event | None:
        """Start, in the background, the warm parents the papers' sessions will ask for: in each
        environment image, one for the first paper of each set of imports that no earlier one serves
        (``parents_planned``; its image built first when missing), in the order the scoring meets
        them (``parents_prestart`` says when; its event is returned)."""
        if not self.shared_parent or self.closed:
            return None
        groups: dict[tuple[str, ...], list[PaperSpec]] = {}
        for paper in papers:
            if paper.fresh_process:
                continue
            try:
                groups.setdefault(self._environment_key(paper), []).append(paper)
            except Exception:  # noqa: BLE001 - its own open will say why
                continue
        with self._parents_lock:
            self._upcoming.update(groups)
        return parents_prestart(self, parents_planned(papers, self._environment_key,
                                               lambda p: paper_preloads(p, self.options)))

    def _environment_key(self, paper: PaperSpec) -> tuple[str, ...]:
        return tuple(normalize_requirements(self.requirements_for(paper)))

    def _shareable(self, paper: PaperSpec) -> bool:
        """Whether ``paper`` may share a warm parent's container (its copies fit: PARENT_PAPER_MB)."""
        return _folder_mb(Path(paper.folder)) * (self.parallel + 2) <= PARENT_PAPER_MB

    def open(self, paper: PaperSpec) -> SandboxSession:
        """A session of ``paper``: served by a warm parent of its environment when one serves it
        (option ``shared_parent``), else by a container of its own."""
        if self.shared_parent and not paper.fresh_process:
            try:
                return DockerParentedSession(self, paper)
            except NotServed:
                pass
        return DockerSession(self, paper)

    def parent_for(self, paper: PaperSpec, *, launched: Callable[[], None] | None = None) -> DockerParent:
        """A warm parent that may serve ``paper`` (started, without waiting for its imports, when none
        does): one of its environment image whose preloaded modules the paper all imports (a fresh
        interpreter would hold no other: ``parent_pick``), up to PARENTS_PER_ENVIRONMENT per image;
        NotServed when the paper must have a container of its own (too big to share one, a
        fork-unsafe framework, a parent that refused). ``launched``: called once a parent started
        here runs its imports (``parents_prestart``)."""
        if not self._shareable(paper):
            raise NotServed("the paper is too big to share a container")
        image = self.image_for(paper)
        names, wanted = paper_preloads(paper, self.options)
        with self._parents_lock:
            if self.closed:
                raise NotServed("the sandbox is closed")
            parents = [p for p in self._parents.get(image, []) if p.alive]
            for gone in set(self._parents.get(image, [])) - set(parents):
                gone.close()
            self._parents[image] = parents
            # the scoring's papers of this environment (``prepare``), told once: a parent started now
            # takes those it will serve with this one; one already running copies each at its session
            upcoming = self._upcoming.pop(self._environment_key(paper), [])
            parent = parent_pick(parents, names)
            if parent is not None:
                return parent
            if (image, wanted) in self._parents_refused:
                raise NotServed(self._parents_refused[(image, wanted)])
            if len(parents) >= PARENTS_PER_ENVIRONMENT:
                raise NotServed(f"{PARENTS_PER_ENVIRONMENT} warm parents of {image} already, none importing only "
                                "what the paper imports")
            # those it will serve (all it preloads among what each imports: ``parent_pick``), copied in
            # with this one while it imports
            upcoming = [p for p in upcoming if p.folder != paper.folder and self._shareable(p)
                        and set(wanted) <= paper_preloads(p, self.options)[0]]
            parent = DockerParent(self, image, list(wanted), ahead=[paper] + upcoming, launched=launched)
            parents.append(parent)
            return parent

    def parent_refused(self, parent: DockerParent) -> None:
        """A parent that refuses every paper (its imports left threads, a fork-unsafe module): gone."""
        with self._parents_lock:
            self._parents_refused[(parent.image, tuple(parent.modules))] = parent.refused
            if parent in self._parents.get(parent.image, []):
                self._parents[parent.image].remove(parent)
        parent.close()

    def close(self) -> None:
        self.closed = True
        self.boxes.close()  # no spare from now on; the started ones removed
        with self._parents_lock:
            parents = [p for group in self._parents.values() for p in group]
            self._parents.clear()
        for parent in parents:
            parent.close()
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
