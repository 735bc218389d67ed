"""Sandboxes that run a paper's test: ``local`` (trusted only), ``bwrap`` and ``docker``."""
from .base import BACKENDS, Limits, PaperSpec, RunResult, Sandbox, SandboxSession, SandboxUnavailable, get_sandbox

__all__ = ["BACKENDS", "Limits", "PaperSpec", "RunResult", "Sandbox", "SandboxSession", "SandboxUnavailable", "get_sandbox"]
