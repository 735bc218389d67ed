import os
import shutil
import tempfile
from pathlib import Path

import pytest

# the site's settings refuse to start without a secret unless debug is on
os.environ.setdefault("DJANGO_DEBUG", "1")
# paper archives (scoring.paper_store) of this test process, never under the repository's var/: the
# environment carries the paths to the worker subprocesses the tests start (one "host" sharing them)
# Once per process: a module importing this file by another name (``tests.conftest``) executes it
# again, and a second folder here would send the workers to a store the test process never writes.
_PAPERS_KEY = f"RCB_TEST_PAPERS_TMP_{os.getpid()}"
_PAPERS_TMP = os.environ.get(_PAPERS_KEY) or tempfile.mkdtemp(prefix="rcb-test-papers-")
os.environ[_PAPERS_KEY] = _PAPERS_TMP
os.environ["RCB_PAPER_STORAGE_ROOT"] = os.path.join(_PAPERS_TMP, "store")
os.environ["RCB_PAPER_CACHE"] = os.path.join(_PAPERS_TMP, "cache")
# the reference outcomes the scoring jobs keep (scoring.sandbox.reference_store), likewise per process
os.environ["RCB_REFERENCE_CACHE"] = os.path.join(_PAPERS_TMP, "references.sqlite3")

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
DEMO = ROOT / "demo"


def pytest_configure(config):
    # The site's manifest storage needs `collectstatic` first and hashed names that the live
    # server's static handler (finders) cannot serve; tests render the plain names.
    # tests/test_static_files.py collects with the real storage and checks the hashed, cached files.
    from django.conf import settings

    settings.STORAGES = {**settings.STORAGES,
                         "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
                         "papers": {"BACKEND": "django.core.files.storage.FileSystemStorage",
                                    "OPTIONS": {"location": os.environ["RCB_PAPER_STORAGE_ROOT"]}}}
    settings.RCB_PAPER_CACHE = Path(os.environ["RCB_PAPER_CACHE"])
    settings.RCB_REFERENCE_CACHE = Path(os.environ["RCB_REFERENCE_CACHE"])


def pytest_unconfigure(config):
    shutil.rmtree(_PAPERS_TMP, ignore_errors=True)


@pytest.fixture
def shared_upstream() -> Path:
    path = SHARED / "upstream"
    if not path.exists():
        pytest.fail(f"../shared/upstream is missing (expected at {path})")
    return path


# Isolating sandbox backends that sandbox/probe tests run against (parametrize with the fixture
# below): bwrap always (scripts/test.sh installs it), docker when an engine answers. Without an
# engine the docker cases skip loudly, or fail when RCB_REQUIRE_DOCKER=1 (CI, where one must run).
SANDBOX_BACKENDS = ("bwrap", "docker")


@pytest.fixture(scope="session", params=SANDBOX_BACKENDS)
def sandbox_backend_name(request) -> str:
    name = request.param
    if name == "docker":
        from benchmark_core.sandbox.auto import docker_engine_problem

        problem = docker_engine_problem()
        if problem:
            message = f"!!! DOCKER SANDBOX TESTS NOT RUN: no Docker engine answers ({problem}) !!!"
            if os.environ.get("RCB_REQUIRE_DOCKER") == "1":
                pytest.fail(message)
            pytest.skip(message)
    else:
        from benchmark_core.sandbox.bwrap import bwrap_available

        problem = bwrap_available()
        if problem:
            pytest.fail(f"bwrap must work here (scripts/test.sh installs bubblewrap): {problem}")
    return name


@pytest.fixture
def fresh_page_cache():
    """An empty page cache before and after the test: Django's cache and this process's copies
    (leaderboard.page_cache); release ids repeat between tests on a fresh database."""
    from django.core.cache import cache

    from leaderboard import page_cache

    cache.clear()
    page_cache.local_clear()
    yield
    cache.clear()
    page_cache.local_clear()
