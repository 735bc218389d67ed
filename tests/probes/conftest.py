"""Fixtures of the probe suite: one sandbox session of the probe paper per backend."""
from __future__ import annotations

import os

import pytest

from benchmark_core.problemset import load_problemset
from benchmark_core.sandbox.base import PaperSpec, get_sandbox
from probe_support import PROBE_LIMITS, PSET, SECRET


@pytest.fixture(scope="session")
def probe_paper():
    return load_problemset(PSET).paper("probe")


@pytest.fixture(scope="module")
def probe_session(sandbox_backend_name, probe_paper):
    # a secret in the worker's environment that no probe may read
    os.environ["RCB_PROBE_SECRET"] = SECRET
    sandbox = get_sandbox(sandbox_backend_name, limits=PROBE_LIMITS)
    session = sandbox.open(PaperSpec.from_paper(probe_paper))
    yield session
    session.close()
    sandbox.close()
    os.environ.pop("RCB_PROBE_SECRET", None)
