"""The ``auto`` backend: docker when an engine answers, else bwrap (and it says so), else refuse."""
from __future__ import annotations

import logging
from typing import Any

from .base import Sandbox, SandboxUnavailable, get_sandbox

__all__ = ["auto_sandbox", "docker_engine_problem"]

log = logging.getLogger("benchmark_core.sandbox")


def docker_engine_problem(timeout: float = 5.0) -> str | None:
    """Why no Docker engine can be used, or None when one answers a ping."""
    try:
        import docker  # type: ignore[import-untyped]
    except ImportError:
        return "the docker Python package is not installed"
    try:
        client = docker.from_env(timeout=timeout)
        try:
            client.ping()
        finally:
            client.close()
    except Exception as exc:  # noqa: BLE001 - any failure means: no usable engine
        return f"{type(exc).__name__}: {str(exc)[:200]}"
    return None


def auto_sandbox(**kwargs: Any) -> Sandbox:
    """The best isolating backend this host offers; never the trusted-only ``local``."""
    problem = docker_engine_problem()
    if problem is None:
        try:
            return get_sandbox("docker", **kwargs)
        except SandboxUnavailable as exc:
            problem = str(exc)
    try:
        sandbox = get_sandbox("bwrap", **kwargs)
    except SandboxUnavailable as exc:
        raise SandboxUnavailable(
            f"no isolating sandbox here: no Docker engine answered ({problem}) and bwrap cannot run ({exc})"
        ) from exc
    message = f"no Docker engine answered ({problem}), using bwrap"
    log.warning(message)
    sandbox.note = message  # type: ignore[attr-defined]
    return sandbox


def default_backend() -> str:
    """``auto`` when an isolating backend works on this host, else ``local`` (trusted data only)."""
    from .bwrap import bwrap_available

    if bwrap_available() is None or docker_engine_problem(timeout=2.0) is None:
        return "auto"
    return "local"
