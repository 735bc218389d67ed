"""Docker images of the ``docker`` backend: built here, never pulled (sessions are in ``docker.py``).

A base image made offline by ``docker/build-base.sh`` (debootstrap + ``docker import``), then one
environment image per paper requirements set, named by their hash (``rcb-env:<sha12>``), built from
wheels downloaded on the worker and installed inside with ``pip install --no-index``. Both are
reused when their tag exists. Which requirements a paper gets: ``requirements_for_paper``.
Everything goes through the Docker API, so the engine may be on another host.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import shlex
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from .base import PaperSpec, SandboxAway, SandboxUnavailable
from .process import child_env
from .skel import IMAGE_SKEL, SKEL_CODE, SKEL_FORMAT

__all__ = [
    "BASE_PYTHON",
    "LABEL",
    "PYTHON",
    "base_image_ensure",
    "base_image_tag",
    "configured_requirements",
    "default_requirements",
    "docker_client",
    "env_image_ensure",
    "env_image_tag",
    "images_build",
    "normalize_requirements",
    "requirements_for_paper",
    "requirements_infer",
]

DOCKER_DIR = Path(__file__).resolve().parents[2] / "docker"
BUILD_BASE = DOCKER_DIR / "build-base.sh"
#: every container, volume and image we make carries this label (startup cleanup finds them by it)
LABEL = "org.rcbhub.sandbox"
PYTHON = "/opt/rcb/bin/python"
#: the base image's Python (Debian bookworm); the wheels are downloaded for it
BASE_PYTHON = "3.11"
_BUILD_LOCK = threading.Lock()
#: (interpreter, modules) -> the distributions and versions that provide them there (asked once per process)
_PINS: dict[tuple[str, tuple[str, ...]], dict] = {}
_PINS_LOCK = threading.Lock()


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
        raise SandboxAway(
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


def normalize_requirements(requirements: tuple[str, ...] | list[str]) -> list[str]:
    """Sorted, whitespace-normalized requirement lines without comments (what names an image)."""
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
    key = (os.path.realpath(python or sys.executable), tuple(modules))
    with _PINS_LOCK:
        found = _PINS.get(key)
    if found is None:
        try:
            proc = subprocess.run([python or sys.executable, "-I", "-c", code, *modules],
                                  capture_output=True, text=True, timeout=120, check=True)
            found = json.loads(proc.stdout)
            with _PINS_LOCK:
                _PINS[key] = found
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


def container_env(home: str) -> dict[str, str]:
    """A run's environment (``child_env``) inside an image: its interpreter first on PATH."""
    env = child_env(home)
    env["PATH"] = "/opt/rcb/bin:/usr/local/bin:/usr/bin:/bin"
    env["LANG"] = "C.UTF-8"
    env.pop("LC_ALL", None)
    return env


def env_image_tag(requirements: tuple[str, ...] | list[str], *, base: str, arch: str = "x86_64") -> str:
    """``rcb-env:<sha12>`` of the base image, the target platform, the normalized requirements and
    what the build puts in beside them (the home skeleton's format)."""
    key = "\n".join([base, f"cp{BASE_PYTHON}", arch, f"skel{SKEL_FORMAT}", *normalize_requirements(requirements)])
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
    reqs = normalize_requirements(requirements)
    tag = env_image_tag(reqs, base=base, arch=arch)
    if _image_exists(client, tag):  # built: no wait behind another tag's build
        return tag
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
            # the environment's home skeleton (sandbox.skel), filled in a run's environment; given to
            # this command only (``env -i``), never to the image's configuration
            skel_env = " ".join(shlex.quote(f"{k}={v}") for k, v in container_env(IMAGE_SKEL).items())
            # (a skeleton that cannot be made is left out: the image is built without it, never refused)
            skel = (f"(mkdir -p {IMAGE_SKEL} && cd {IMAGE_SKEL} && env -i {skel_env} {PYTHON} -I -c "
                    f"{shlex.quote(SKEL_CODE)} && chmod -R a+rX,go-w {IMAGE_SKEL}) || rm -rf {IMAGE_SKEL}")
            container = client.containers.create(
                base, ["/bin/sh", "-c", f"{install}; status=$?; if [ $status -eq 0 ]; then {skel}; fi; "
                       "rm -rf /var/tmp/wheels; exit $status"],
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



def images_build(psets: list[str], *, requirements: tuple[str, ...] | list[str] = (), python: str | None = None, out=sys.stdout,
                 err=sys.stderr) -> int:
    """Build the base image and the environment image of every paper of ``psets`` (and of each
    comma-separated ``requirements`` set); return an exit status (1 when an image failed)."""
    from ..problemset import load_problemset  # noqa: PLC0415

    started = time.monotonic()
    try:
        client = docker_client()
    except SandboxUnavailable as exc:
        print(f"error: {exc}", file=err)
        return 2
    try:
        base = base_image_ensure(client)
        print(f"base: {base}", file=out)
        sets: dict[tuple[str, ...], list[str]] = {tuple(normalize_requirements(default_requirements())): ["(default)"]}
        for spec in requirements:
            sets.setdefault(tuple(normalize_requirements(spec.split(","))), []).append("--requirements")
        failed = 0
        for folder in psets:
            pset = load_problemset(Path(folder))
            for paper in pset.papers:
                try:
                    reqs = tuple(normalize_requirements(requirements_for_paper(PaperSpec.from_paper(paper),
                                                                               python=python)))
                except SandboxUnavailable as exc:  # an unavailable environment: its papers are environment errors
                    print(f"{paper.id}: {exc}", file=out)
                    continue
                sets.setdefault(reqs, []).append(paper.id)
        for reqs, users in sets.items():
            try:
                tag = env_image_ensure(client, reqs, base=base)
            except SandboxUnavailable as exc:
                # the other images still get built; these papers will be environment errors
                failed += 1
                print(f"FAILED: {', '.join(reqs)}  <- {', '.join(users)}\n{exc}", file=err)
                continue
            print(f"{tag}: {', '.join(reqs) or '(nothing)'}  <- {', '.join(users)}", file=out)
    except SandboxUnavailable as exc:
        print(f"error: {exc}", file=err)
        return 1
    finally:
        client.close()
    if failed:
        print(f"{failed} image(s) could not be built", file=err)
        return 1
    print(f"images ready in {time.monotonic() - started:.0f}s", file=out)
    return 0
