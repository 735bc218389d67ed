"""Helpers of the contribution tests: demo-format paper zips, a sandbox choice, a real RQ worker."""
from __future__ import annotations

import io
import os
import zipfile
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.test import override_settings

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
#: a Redis database index of our own on the machine's Redis: these tests empty it freely
#: (one per pytest-xdist worker, so parallel runs do not empty each other's queues)
_XDIST = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
REDIS_DB = max(8, 14 - int(_XDIST[2:] or 0)) if _XDIST.startswith("gw") else 14

WEAK_MODULE = '''"""Two tiny functions; the test below checks only the first."""


def add(a, b):
    # <paper2code name="add numbers">
    total = a + b
    return total
    # </paper2code name="add numbers">


def mul(a, b):
    # <paper2code name="multiply numbers">
    product = a * b
    return product
    # </paper2code name="multiply numbers">
'''
WEAK_TEST = '''import calc

assert calc.add(2, 3) == 5
print("all good")
'''


def zip_folder(folder: Path, *, top: str | None = None) -> bytes:
    """Zip a paper folder the way a contributor would (the folder itself at the top)."""
    top = top if top is not None else folder.name
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            rel = path.relative_to(folder).as_posix()
            zf.write(path, f"{top}/{rel}" if top else rel)
    return buf.getvalue()


def zip_files(files: dict[str, str], *, top: str = "paper") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for rel, text in files.items():
            zf.writestr(f"{top}/{rel}" if top else rel, text)
    return buf.getvalue()


def weak_paper_zip() -> bytes:
    return zip_files({"calc.py": WEAK_MODULE, "paper2code_test.py": WEAK_TEST, "paper2code_paper.md": "# Calc\n"},
                     top="calc-paper")


def sandbox_settings() -> dict:
    """bwrap when its backend is there and works; else 'local', allowed explicitly for the tests only."""
    from benchmark_core.sandbox.base import SandboxUnavailable, get_sandbox

    chosen = os.environ.get("RCB_TEST_CONTRIB_BACKEND")  # e.g. docker or auto, to check those backends too
    if chosen:
        return {"RCB_SANDBOX_BACKEND": chosen}
    try:
        get_sandbox("bwrap").close()
        return {"RCB_SANDBOX_BACKEND": "bwrap"}
    except SandboxUnavailable:
        return {"RCB_SANDBOX_BACKEND": "local", "RCB_ALLOW_LOCAL_SANDBOX": True}


def redis_url() -> str:
    base = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    return base.rsplit("/", 1)[0] + f"/{REDIS_DB}"


@contextmanager
def contribution_env(tmp_path: Path):
    """Own media/pset folders, an own Redis database, a sandbox; yields the RQ connection."""
    import django_rq
    import redis

    url = redis_url()
    queues = {name: {"URL": url, "DEFAULT_TIMEOUT": 600} for name in settings.RQ_QUEUES}
    conn = redis.Redis.from_url(url)
    conn.flushdb()  # our own database index only
    with override_settings(
        MEDIA_ROOT=tmp_path / "media", RCB_PSET_ROOT=tmp_path / "psets", RQ_QUEUES=queues,
        RCB_SCORING_THREADS=2, RCB_RUN_TIMEOUT=60, **sandbox_settings(),
    ):
        for name in queues:
            django_rq.get_queue(name).empty()
        try:
            yield conn
        finally:
            conn.flushdb()


def run_worker(queues=("contributions", "scoring")) -> int:
    """Run every queued job with a real RQ worker (in this process, burst mode); return how many failed."""
    import django_rq
    from rq import SimpleWorker

    from rq.registry import FailedJobRegistry

    qs = [django_rq.get_queue(name) for name in queues]
    before = sum(FailedJobRegistry(queue=q).count for q in qs)
    worker = SimpleWorker(qs, connection=qs[0].connection)
    worker.work(burst=True)
    return sum(FailedJobRegistry(queue=q).count for q in qs) - before
