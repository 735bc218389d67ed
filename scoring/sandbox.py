"""Which sandbox untrusted code gets: the one chooser (``sandbox_for``), by trust level.

- ``public``: predictions and contributed papers from anyone. The configured backend
  (RCB_SANDBOX_BACKEND, ``auto`` = docker, else bwrap); the ``local`` backend isolates nothing and
  is refused unless RCB_ALLOW_LOCAL_SANDBOX says the data is trusted (tests, a private install).
- ``demo``: the project's own demo data. The configured backend when it can run, else ``local``
  with a warning (the code is ours).

Every scoring of the site (a submission's paper, a release baseline, the demo, a contribution's
checks: ``scoring.evaluate``) takes its sandbox from ``job_sandbox``: in the process that outlives
its jobs (the scoring worker, ``scoring.queue.ScoringWorker``, calls ``sandboxes_keep``) that is the
process's warm pool (``benchmark_core.sandbox.pool.SandboxPool``: sessions kept between jobs per
environment and paper version, bounded in count, idle time and memory), elsewhere (a work horse
forked for another queue's job, a command) a sandbox of its own. Either way each paper runs in its
environment's interpreter (RCB_ENVS_DIR, RCB_ENV_PYTHONS): one interpreter per environment for all.
``reference_store`` is where the papers' passing reference outcomes outlive a process: a SQLite
file of this host (RCB_REFERENCE_CACHE) keyed by paper content, environment and harness version.
"""
from __future__ import annotations

import atexit
import logging
import os
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from django.conf import settings

from benchmark_core.cache import VerdictCache
from benchmark_core.sandbox.base import Sandbox, SandboxUnavailable, get_sandbox
from benchmark_core.sandbox.pool import SandboxPool

logger = logging.getLogger(__name__)

__all__ = ["PUBLIC", "DEMO", "TRUST_LEVELS", "SandboxRefused", "sandbox_for", "sandbox_environment_options",
           "sandboxes_keep", "sandboxes_warm", "job_sandbox", "reference_store"]

PUBLIC = "public"
DEMO = "demo"
TRUST_LEVELS = (PUBLIC, DEMO)


class SandboxRefused(SandboxUnavailable, RuntimeError):
    """The configured sandbox isolates nothing and the code is not trusted."""


def sandbox_environment_options() -> dict[str, Any]:
    """The sandbox options naming each environment's interpreter (settings RCB_ENVS_DIR, RCB_ENV_PYTHONS)."""
    from benchmark_core.env_command import parse_env_pythons

    options: dict[str, Any] = {}
    if settings.RCB_ENVS_DIR:
        options["envs_dir"] = str(settings.RCB_ENVS_DIR)
    pairs = [p.strip() for p in str(settings.RCB_ENV_PYTHONS or "").split(",") if p.strip()]
    if pairs:
        options["pythons"] = parse_env_pythons(pairs)
    return options


def sandbox_for(*, trust: str, backend: str | None = None, warnings: list[str] | None = None) -> Sandbox:
    """Open the sandbox for code of ``trust`` level; raise SandboxUnavailable (SandboxRefused) if none may run it.

    ``backend`` overrides RCB_SANDBOX_BACKEND; ``warnings`` collects what a ``demo`` fallback says.
    Each paper gets its environment's interpreter (RCB_ENVS_DIR, RCB_ENV_PYTHONS), else RCB_PYTHON.
    """
    if trust not in TRUST_LEVELS:
        raise ValueError(f"unknown trust level {trust!r} (known: {', '.join(TRUST_LEVELS)})")
    name = backend if backend is not None else settings.RCB_SANDBOX_BACKEND
    options: dict[str, Any] = {"python": settings.RCB_PYTHON or None, **sandbox_environment_options()}
    # the workers' papers each live in a folder of their own (by content hash): one warm parent serves them all
    options["papers_root"] = str(settings.RCB_PAPER_CACHE)
    if trust == DEMO:
        if name and name != "local":
            try:
                return get_sandbox(name, **options)
            except SandboxUnavailable as exc:
                if warnings is not None:
                    warnings.append(f"sandbox {name!r} unavailable ({exc}); the demo (trusted code) runs with 'local'")
        return get_sandbox("local", **options)
    sandbox = get_sandbox(name, **options)
    if sandbox.trusted_only and not settings.RCB_ALLOW_LOCAL_SANDBOX:
        sandbox.close()
        raise SandboxRefused(
            f"the {sandbox.name!r} sandbox isolates nothing and is refused for submissions and contributions "
            "(untrusted code): set RCB_SANDBOX_BACKEND to bwrap or docker (RCB_ALLOW_LOCAL_SANDBOX=1 is for "
            "trusted data only)"
        )
    return sandbox


# --------------------------------------------------------------------------------------------
# What a scoring job runs in: the worker's warm pool, and reference outcomes shared on this host

#: the process that keeps its sandboxes between jobs (a work horse forked from it does not: it exits
#: without closing what it opened, so it must not hold pooled sessions)
_KEEP: dict[str, int] = {}
_POOL_LOCK = threading.Lock()
_POOL: dict[str, Any] = {}  # "key": the configuration it was made for, "pool": the SandboxPool


def sandboxes_keep() -> None:
    """This process outlives its jobs (a scoring worker): keep their sandboxes warm between them."""
    _KEEP["pid"] = os.getpid()


def _keeping() -> bool:
    return _KEEP.get("pid") == os.getpid() and bool(settings.RCB_SANDBOX_POOL)


def _pool_config(trust: str) -> tuple:
    return (os.getpid(), trust, settings.RCB_SANDBOX_BACKEND, settings.RCB_PYTHON, settings.RCB_ENVS_DIR,
            settings.RCB_ENV_PYTHONS, settings.RCB_ALLOW_LOCAL_SANDBOX, settings.RCB_SANDBOX_POOL_SESSIONS,
            settings.RCB_SANDBOX_POOL_IDLE_SECONDS, settings.RCB_SANDBOX_POOL_MEMORY_MB)


def _pool_close() -> None:
    with _POOL_LOCK:
        pool = _POOL.pop("pool", None)
        _POOL.clear()
    if pool is not None:
        pool.close()


def _pool_get(trust: str) -> SandboxPool:
    """The process's pool for the configuration in force (a changed one replaces it: one pool at a time)."""
    key = _pool_config(trust)
    old = None
    with _POOL_LOCK:
        if _POOL.get("key") == key:
            return _POOL["pool"]
        if _POOL.get("key", (None,))[0] == os.getpid():
            old = _POOL.get("pool")  # (a forked child's copy belongs to its parent: left alone)
        pool = SandboxPool(sandbox_for(trust=trust), max_sessions=settings.RCB_SANDBOX_POOL_SESSIONS,
                           idle_seconds=settings.RCB_SANDBOX_POOL_IDLE_SECONDS,
                           memory_mb=settings.RCB_SANDBOX_POOL_MEMORY_MB or None)
        if not _POOL:
            atexit.register(_pool_close)
        _POOL.update(key=key, pool=pool)
    if old is not None:
        old.close()  # its idle sessions now; leased ones when given back
    return pool


def sandboxes_warm(*, trust: str = PUBLIC) -> None:
    """Make the warm pool of a process that keeps its sandboxes ready before its first job: the
    backend's modules imported, the engine or bwrap checked. A sandbox that cannot be had now is
    only logged: each job tries again and says why it cannot run."""
    if not _keeping():
        return
    try:
        _pool_get(trust)
    except SandboxUnavailable as exc:
        logger.warning("no sandbox for scoring yet (%s): each job tries again", exc)


@contextmanager
def job_sandbox(*, trust: str = PUBLIC, backend: str | None = None,
                warnings: list[str] | None = None) -> Iterator[Sandbox]:
    """The sandbox a scoring opens its papers in (closing a session gives a pooled one back).

    The process's warm pool when it keeps sandboxes between jobs (``sandboxes_keep``, RCB_SANDBOX_POOL)
    and no other backend is asked for, else a sandbox of its own (``sandbox_for``), closed at the end.
    """
    if backend is None and _keeping():
        yield _pool_get(trust)
        return
    sandbox = sandbox_for(trust=trust, backend=backend, warnings=warnings)
    try:
        yield sandbox
    finally:
        sandbox.close()


class _PassingReferences:
    """A ``runner.ReferenceStore`` over a VerdictCache file keeping passing outcomes only: a failing
    reference (a broken environment) is made again by every job, so a repair is seen at once."""

    def __init__(self, path: Path):
        self.cache = VerdictCache(path)

    def reference_get(self, key: str, *, failed_seconds: float) -> tuple[dict, float] | None:
        return self.cache.reference_get(key, failed_seconds=0.0)  # a failed row is never believed

    def reference_put(self, key: str, info: dict, *, passed: bool) -> None:
        if passed:
            self.cache.reference_put(key, info, passed=True)


_STORES: dict[tuple[int, str], _PassingReferences] = {}


def reference_store() -> _PassingReferences:
    """This host's store of passing reference outcomes (RCB_REFERENCE_CACHE), one per process and file."""
    path = Path(settings.RCB_REFERENCE_CACHE)
    key = (os.getpid(), str(path))
    with _POOL_LOCK:
        store = _STORES.get(key)
        if store is None:
            store = _STORES[key] = _PassingReferences(path)
    return store
