"""Paper files by content hash: stored once through Django's storage API, fetched and cached by workers.

A paper version is one deterministic zip holding ``papers.yaml`` (the paper's entry: annotated
files, timeout, environment, ...) and ``<paper id>/...`` (its files), named by the sha256 of its
bytes and kept in the ``papers`` storage (``settings.STORAGES["papers"]``: a folder under var/ by
default, an S3-compatible bucket in production). ``ReleasePaper.archive`` holds the hash. A worker
needs only the database (to read the hash) and that storage: it unpacks the archive once into
``RCB_PAPER_CACHE/<hash>/`` with the contribution upload's safety rules (scoring.unzip:
no traversal, no links, size limits), after checking the hash, and renames it into place, so
concurrent fetches on one host never see half a folder.
"""
from __future__ import annotations

import hashlib
import errno
import io
import logging
import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from django.conf import settings
from django.core.files.base import ContentFile
from django.core.files.storage import Storage, storages

from benchmark_core.problemset import paper_entry, paper_entry_write, paper_folder_load
from scoring.jobs import JobWaits
from scoring.unzip import UnsafeArchive, UnzipLimits, safe_unpack
from catalog.models import ReleasePaper

__all__ = [
    "PaperFilesMissing",
    "PaperStorageUnavailable",
    "paper_archive_bytes",
    "paper_archive_fetch",
    "paper_archive_put",
    "release_paper_archive_ensure",
    "release_paper_folder",
]

logger = logging.getLogger(__name__)

STORAGE_ALIAS = "papers"
#: caches and VCS data are never part of a paper version
_SKIPPED_PARTS = {"__pycache__", ".git", ".hg", ".svn", ".ipynb_checkpoints", ".pytest_cache", ".DS_Store"}
_SKIPPED_SUFFIXES = (".pyc", ".pyo")
#: a fixed time for every member: the same files always give the same bytes (and hash)
_EPOCH = (1980, 1, 1, 0, 0, 0)
_CHUNK = 1024 * 1024


class PaperFilesMissing(RuntimeError):
    """The files a job names cannot be had on this host (not stored, damaged, or refused)."""


class PaperStorageUnavailable(JobWaits, RuntimeError):
    """The files cannot be had on this host *now*: the papers storage does not answer, or this host's
    paper cache has no room. Nobody's fault and not for good: the job waits and is tried again."""

    def wait_reason(self) -> str:
        return (f"waiting: the paper's files cannot be fetched right now ({self}); scoring of this paper "
                "resumes by itself when they can, nothing is lost or charged")


#: errno values of a paper cache that has no room left (the host's fault, not the paper's)
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT}


def _unreachable(exc: BaseException) -> bool:
    """True for an error of the storage's transport (a bucket that refuses or times out, a 5xx)."""
    try:
        from botocore.exceptions import BotoCoreError, ClientError  # noqa: PLC0415  (only with the S3 backend)
    except ImportError:  # pragma: no cover - boto3 is in requirements.txt
        return False
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return status >= 500 or status in (408, 429)
    return isinstance(exc, BotoCoreError)


def _storage() -> Storage:
    return storages[STORAGE_ALIAS]


def _limits() -> UnzipLimits:
    # a paper is the project's own reviewed content, larger than a contributor's first upload may be
    return UnzipLimits(
        max_files=settings.RCB_PAPER_ARCHIVE_MAX_FILES,
        max_total_bytes=settings.RCB_PAPER_ARCHIVE_MAX_BYTES,
        max_file_bytes=settings.RCB_PAPER_ARCHIVE_MAX_BYTES,
    )


def _name(digest: str) -> str:
    return f"{digest[:2]}/{digest}.zip"


def _member(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=_EPOCH)
    info.external_attr = (0o100644 & 0xFFFF) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    info.create_system = 3  # unix, whatever host builds it
    zf.writestr(info, data, compresslevel=9)


def paper_archive_bytes(*, folder: Path) -> bytes:
    """The deterministic zip of the paper in FOLDER with its papers.yaml entry (loaded as the worker will)."""
    folder = Path(folder)
    paper = paper_folder_load(folder)  # raises ProblemSetError: what does not load is never stored
    with tempfile.TemporaryDirectory() as tmp:
        meta = paper_entry_write(tmp, paper_entry(paper)).read_bytes()
    files = []
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part in _SKIPPED_PARTS for part in rel.parts) or path.name.endswith(_SKIPPED_SUFFIXES):
            continue
        if path.is_symlink() and not path.resolve().is_relative_to(folder.resolve()):
            raise PaperFilesMissing(f"{folder}: {rel.as_posix()} links outside the paper folder")
        if path.is_file():
            files.append((rel.as_posix(), path))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        _member(zf, "papers.yaml", meta)
        for rel, path in files:
            _member(zf, f"{paper.id}/{rel}", path.read_bytes())
    return buf.getvalue()


def paper_archive_put(*, folder: Path) -> str:
    """Store the paper in FOLDER once in the papers storage; return its content hash (sha256 of the zip)."""
    data = paper_archive_bytes(folder=folder)
    digest = hashlib.sha256(data).hexdigest()
    storage, name = _storage(), _name(digest)
    if not storage.exists(name):
        saved = storage.save(name, ContentFile(data))
        if saved != name:  # another process stored the same bytes meanwhile: keep one copy
            storage.delete(saved)
    return digest


def release_paper_archive_ensure(*, release_paper: ReleasePaper) -> str:
    """The row's content hash, storing its folder first when it has none yet ('' for a paper without code).

    Called where jobs are made (the host that made the release has its folders): a worker then
    needs only the hash.
    """
    rp = release_paper
    if rp.archive or not rp.folder:
        return rp.archive
    if not Path(rp.folder).is_dir():
        return ""  # nothing to store from here; the worker reports the missing files
    rp.archive = paper_archive_put(folder=Path(rp.folder))
    ReleasePaper.objects.filter(pk=rp.pk, archive="").update(archive=rp.archive)
    return rp.archive


def _download(digest: str, into: Path) -> None:
    """Copy the archive from storage to INTO, with a size cap, and check its hash."""
    cap = settings.RCB_PAPER_ARCHIVE_MAX_BYTES
    h = hashlib.sha256()
    size = 0
    try:
        src = _storage().open(_name(digest), "rb")
        with src, open(into, "wb") as dst:
            while chunk := src.read(_CHUNK):
                size += len(chunk)
                if size > cap:
                    raise PaperFilesMissing(f"paper archive {digest} is larger than {cap} bytes: refused")
                h.update(chunk)
                dst.write(chunk)
    except PaperFilesMissing:
        raise
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in _NO_ROOM:
            raise PaperStorageUnavailable(f"this worker's paper cache is full ({exc.strerror})") from None
        if _unreachable(exc):
            raise PaperStorageUnavailable(f"the papers storage cannot be reached ({type(exc).__name__})") from None
        if isinstance(exc, OSError):  # not there (FileNotFoundError, a 404), or not readable
            raise PaperFilesMissing(f"paper archive {digest} is not in the papers storage: {exc}") from None
        raise
    if h.hexdigest() != digest:
        raise PaperFilesMissing(f"paper archive {digest} is damaged in storage (its bytes hash to {h.hexdigest()})")


def paper_archive_fetch(*, digest: str) -> Path:
    """The unpacked archive (a problem set of one paper) in this host's cache, fetched when absent."""
    if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise PaperFilesMissing(f"not a paper content hash: {digest!r}")
    cache = Path(settings.RCB_PAPER_CACHE)
    target = cache / digest
    if target.is_dir():
        return target
    try:
        cache.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{digest}-", suffix=".zip", dir=cache)
    except OSError as exc:
        if exc.errno in _NO_ROOM:
            raise PaperStorageUnavailable(f"this worker's paper cache is full ({exc.strerror})") from None
        raise
    os.close(fd)
    try:
        _download(digest, Path(tmp))
        # unpacked beside the target and renamed in whole: a reader never sees half a folder
        staging = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=cache)) / "x"
        try:
            safe_unpack(tmp, staging, limits=_limits(), strip_single_root=False)
            try:
                os.rename(staging, target)
            except OSError:
                if not target.is_dir():  # not a concurrent fetch of the same hash that won the race
                    raise
        finally:
            shutil.rmtree(staging.parent, ignore_errors=True)
    except UnsafeArchive as exc:
        raise PaperFilesMissing(f"paper archive {digest} is refused: {exc}") from None
    except OSError as exc:
        if exc.errno in _NO_ROOM:  # unpacking ran out of room: nothing half-made is left (removed above)
            raise PaperStorageUnavailable(f"this worker's paper cache is full ({exc.strerror})") from None
        raise
    finally:
        Path(tmp).unlink(missing_ok=True)
    logger.info("paper archive %s fetched into %s", digest, target)
    return target


def release_paper_folder(*, release_paper: ReleasePaper) -> Path:
    """The paper's folder on this host, with its papers.yaml beside it (for paper_folder_load).

    By content hash from the papers storage when the row has one; a row from before the store
    falls back to its folder path, which only a host sharing the release folders has.
    """
    rp = release_paper
    paper_id = rp.paper.paper_id
    if rp.archive:
        folder = paper_archive_fetch(digest=rp.archive) / paper_id
        if not folder.is_dir():
            raise PaperFilesMissing(f"paper archive {rp.archive} does not hold paper {paper_id}")
        return folder
    if rp.folder and Path(rp.folder).is_dir():
        return Path(rp.folder)
    raise PaperFilesMissing(
        f"the files of paper {paper_id} are not on this worker (no content hash stored; expected at {rp.folder or '?'})"
    )
