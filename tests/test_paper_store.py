"""Paper files by content hash (scoring.paper_store): stored once, fetched into a cache, checked, refused."""
from __future__ import annotations

import hashlib
import io
import shutil
import threading
import zipfile
from pathlib import Path

import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import storages

from benchmark_core.problemset import load_problemset, paper_folder_load
from scoring import paper_store
from scoring.paper_store import PaperFilesMissing, paper_archive_fetch, paper_archive_put

DEMO = Path(__file__).resolve().parent.parent / "demo"


@pytest.fixture
def store(settings, tmp_path):
    settings.STORAGES = {**settings.STORAGES, "papers": {
        "BACKEND": "django.core.files.storage.FileSystemStorage", "OPTIONS": {"location": str(tmp_path / "store")}}}
    settings.RCB_PAPER_CACHE = tmp_path / "cache"
    return tmp_path


def _stored(store: Path) -> list[Path]:
    return sorted(p for p in (store / "store").rglob("*") if p.is_file())


def test_a_paper_is_stored_once_by_the_hash_of_a_deterministic_archive(store, tmp_path):
    digest = paper_archive_put(folder=DEMO / "rope")
    # a copy elsewhere with caches beside it is the same paper version: same bytes, same name
    copy = tmp_path / "copy"
    shutil.copytree(DEMO, copy)
    (copy / "rope" / "__pycache__").mkdir(exist_ok=True)
    (copy / "rope" / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"junk")
    assert paper_archive_put(folder=copy / "rope") == digest
    files = _stored(store)
    assert [p.name for p in files] == [f"{digest}.zip"]
    assert hashlib.sha256(files[0].read_bytes()).hexdigest() == digest
    # any change of the files is another version
    (copy / "rope" / "paper2code_test.py").write_text((copy / "rope" / "paper2code_test.py").read_text() + "\n# x\n")
    assert paper_archive_put(folder=copy / "rope") != digest
    assert len(_stored(store)) == 2


def test_a_fetched_paper_loads_as_the_original_with_its_entry(store):
    original = load_problemset(DEMO, papers=["lion"]).paper("lion")
    digest = paper_archive_put(folder=DEMO / "lion")
    root = paper_archive_fetch(digest=digest)
    assert root == store / "cache" / digest
    fetched = paper_folder_load(root / "lion")
    assert [(s.file, s.name, s.code) for s in fetched.snippets] == [(s.file, s.name, s.code) for s in original.snippets]
    assert (fetched.timeout, fetched.environment, fetched.annotated_files) == (
        original.timeout, original.environment, original.annotated_files)
    # a second fetch is the cache: the storage is not read again
    (store / "store" / digest[:2] / f"{digest}.zip").unlink()
    assert paper_archive_fetch(digest=digest) == root


def test_damaged_or_missing_archives_are_refused_and_leave_nothing(store):
    digest = paper_archive_put(folder=DEMO / "rope")
    path = store / "store" / digest[:2] / f"{digest}.zip"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(PaperFilesMissing, match="damaged in storage"):
        paper_archive_fetch(digest=digest)
    with pytest.raises(PaperFilesMissing, match="not in the papers storage"):
        paper_archive_fetch(digest="0" * 64)
    with pytest.raises(PaperFilesMissing, match="not a paper content hash"):
        paper_archive_fetch(digest="../../etc")
    assert not any((store / "cache").iterdir())


def test_an_archive_that_escapes_its_folder_is_refused_even_with_a_matching_hash(store):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("papers.yaml", "- id: x\n")
        zf.writestr("../../outside.py", "print('escaped')\n")
    data = buf.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    storages["papers"].save(f"{digest[:2]}/{digest}.zip", ContentFile(data))
    with pytest.raises(PaperFilesMissing, match="refused"):
        paper_archive_fetch(digest=digest)
    assert not (store / "outside.py").exists() and not any((store / "cache").iterdir())


def test_concurrent_fetches_of_one_hash_on_one_host_agree(store):
    digest = paper_archive_put(folder=DEMO / "minp-sampling")
    results: list[Path | BaseException] = []

    def fetch() -> None:
        try:
            results.append(paper_archive_fetch(digest=digest))
        except BaseException as exc:  # noqa: BLE001 - reported below
            results.append(exc)

    threads = [threading.Thread(target=fetch) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [store / "cache" / digest] * 6
    # no half-unpacked leftovers beside the one folder
    assert [p.name for p in (store / "cache").iterdir()] == [digest]
    assert paper_folder_load(store / "cache" / digest / "minp-sampling").snippets


@pytest.mark.django_db
def test_a_release_paper_gets_its_hash_where_jobs_are_made_and_a_worker_needs_no_folder(store, tmp_path):
    from submissions_support import demo_release_create

    shutil.copytree(DEMO, tmp_path / "release")
    release = demo_release_create(papers=["rope"], root=tmp_path / "release")
    rp = release.release_papers.get()
    assert rp.archive == ""
    digest = paper_store.release_paper_archive_ensure(release_paper=rp)
    rp.refresh_from_db()
    assert rp.archive == digest and len(digest) == 64
    shutil.rmtree(tmp_path / "release")  # this "worker" has no release folder at all
    folder = paper_store.release_paper_folder(release_paper=rp)
    assert folder == store / "cache" / digest / "rope"
    assert len(paper_folder_load(folder).snippets) == rp.snippet_count
    rp.archive = ""
    with pytest.raises(PaperFilesMissing, match="not on this worker"):
        paper_store.release_paper_folder(release_paper=rp)


def test_the_s3_setting_makes_the_papers_storage_a_bucket():
    """RCB_PAPER_STORAGE=s3 gives django-storages' S3 backend with the bucket settings (no bucket is reached)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "RCB_PAPER_STORAGE": "s3", "RCB_PAPER_S3_BUCKET": "rcb-papers",
           "RCB_PAPER_S3_ENDPOINT_URL": "http://127.0.0.1:9", "RCB_PAPER_S3_PREFIX": "p", "DJANGO_DEBUG": "1"}
    code = ("import django; django.setup(); from django.core.files.storage import storages; s = storages['papers']; "
            "print(type(s).__name__, s.bucket_name, s.endpoint_url, s.location, s.file_overwrite)")
    out = subprocess.run([sys.executable, "-c", code], env={**env, "DJANGO_SETTINGS_MODULE": "rcbsite.settings"},
                         cwd=DEMO.parent, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["S3Storage", "rcb-papers", "http://127.0.0.1:9", "p", "False"]
