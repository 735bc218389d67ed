"""Unpack an untrusted zip of a paper folder, or refuse it with one clear reason.

Everything is checked from the archive's directory first (names, types, declared sizes,
compression ratios), then members are streamed out with the real byte count enforced, because
declared sizes are the attacker's to choose. Files land in a temporary folder beside the target
and the folder is renamed into place only when every member is out: a refused or broken archive
leaves nothing behind. Pure Python (``zipfile``), no Django.
"""
from __future__ import annotations

import os
import re
import shutil
import stat
import tempfile
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

__all__ = ["UnzipLimits", "UnsafeArchive", "UnpackResult", "safe_unpack", "NESTED_ARCHIVE_SUFFIXES"]

NESTED_ARCHIVE_SUFFIXES = (".zip", ".tar", ".gz", ".tgz", ".bz2", ".xz", ".7z", ".rar", ".whl", ".egg")
#: entries that archivers add on their own; dropping them is what the contributor meant
_JUNK_PARTS = {"__MACOSX", ".DS_Store", "Thumbs.db", "__pycache__"}
_DRIVE_RE = re.compile(r"^[A-Za-z]:")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_UTF8_FLAG = 0x800
_ENCRYPTED_FLAG = 0x1
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class UnzipLimits:
    max_files: int = 500
    max_total_bytes: int = 100 * 1024 * 1024
    max_file_bytes: int = 50 * 1024 * 1024
    #: uncompressed / compressed; source code compresses 3-10x, a bomb 1000x and more
    max_ratio: float = 100.0
    #: small members may compress extremely well (a file of blank lines) without harm
    ratio_min_bytes: int = 1024 * 1024


class UnsafeArchive(ValueError):
    """The archive is refused; the message says why in words a contributor understands."""


@dataclass
class UnpackResult:
    root: Path
    files: list[str] = field(default_factory=list)
    total_bytes: int = 0
    stripped_prefix: str = ""
    skipped: list[str] = field(default_factory=list)
    nested_archives: list[str] = field(default_factory=list)


@dataclass
class _Member:
    info: zipfile.ZipInfo
    parts: tuple[str, ...]
    is_dir: bool


def _display(name: str) -> str:
    return name if len(name) <= 120 else name[:117] + "..."


def _decoded_name(info: zipfile.ZipInfo) -> str:
    """The member's name as UTF-8; names without the UTF-8 flag are often UTF-8 anyway (Info-ZIP)."""
    if info.flag_bits & _UTF8_FLAG:
        return info.filename
    raw = info.filename.encode("cp437")  # zipfile decoded the raw bytes as cp437: this is lossless
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        shown = raw.decode("utf-8", errors="backslashreplace")
        raise UnsafeArchive(
            f"the file name '{shown}' is not valid UTF-8; rename the file with plain UTF-8 characters and zip again"
        ) from None


def _mode_kind(info: zipfile.ZipInfo) -> int:
    """The Unix file type of a member (0 when the archiver did not record one)."""
    return stat.S_IFMT(info.external_attr >> 16)


def _check_member(info: zipfile.ZipInfo) -> _Member | None:
    name = _decoded_name(info)
    shown = _display(name)
    if _CONTROL_RE.search(name):
        raise UnsafeArchive(f"the file name {shown!r} contains control characters")
    posix = name.replace("\\", "/")
    if posix.startswith("/") or _DRIVE_RE.match(posix):
        raise UnsafeArchive(f"{shown!r} is an absolute path; the zip must hold paths relative to the paper folder")
    parts = tuple(p for p in PurePosixPath(posix).parts if p not in ("", "."))
    if ".." in parts:
        raise UnsafeArchive(f"{shown!r} points outside the paper folder ('..' in the path)")
    kind = _mode_kind(info)
    if kind == stat.S_IFLNK:
        raise UnsafeArchive(f"{shown!r} is a symbolic link; links are not accepted, put the file itself in the zip")
    is_dir = info.is_dir() or kind == stat.S_IFDIR
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise UnsafeArchive(f"{shown!r} is not a regular file or folder (a device, pipe or link)")
    if info.flag_bits & _ENCRYPTED_FLAG:
        raise UnsafeArchive(f"{shown!r} is encrypted; upload an archive without a password")
    if not parts:
        return None
    if any(p in _JUNK_PARTS for p in parts) or parts[-1].startswith("._"):
        return _Member(info, (), is_dir)  # archiver junk: skipped, reported
    return _Member(info, parts, is_dir)


def _check_sizes(members: list[_Member], limits: UnzipLimits) -> int:
    files = [m for m in members if not m.is_dir and m.parts]
    if len(files) > limits.max_files:
        raise UnsafeArchive(f"the archive holds {len(files)} files; at most {limits.max_files} are accepted")
    total = 0
    for m in files:
        size, packed = m.info.file_size, max(m.info.compress_size, 1)
        shown = _display("/".join(m.parts))
        if size > limits.max_file_bytes:
            raise UnsafeArchive(f"{shown!r} unpacks to {size:,} bytes; one file may have at most {limits.max_file_bytes:,}")
        if size >= limits.ratio_min_bytes and size / packed > limits.max_ratio:
            raise UnsafeArchive(
                f"{shown!r} is compressed {size / packed:,.0f} times (a zip bomb?); at most {limits.max_ratio:g} is accepted"
            )
        total += size
    if total > limits.max_total_bytes:
        raise UnsafeArchive(f"the archive unpacks to {total:,} bytes; at most {limits.max_total_bytes:,} are accepted")
    packed_total = max(sum(m.info.compress_size for m in files), 1)
    if total >= limits.ratio_min_bytes and total / packed_total > limits.max_ratio:
        raise UnsafeArchive(
            f"the archive is compressed {total / packed_total:,.0f} times overall (a zip bomb?); "
            f"at most {limits.max_ratio:g} is accepted"
        )
    return total


def _common_root(members: list[_Member]) -> str:
    """The single top folder every member sits in (zips of a folder), or ''."""
    kept = [m for m in members if m.parts]
    tops = {m.parts[0] for m in kept}
    if len(tops) != 1:
        return ""
    top = tops.pop()
    if any(len(m.parts) == 1 and not m.is_dir for m in kept):
        return ""  # a file at the top level: the zip holds the folder's content itself
    return top


def _copy_limited(src: BinaryIO, dst: BinaryIO, *, name: str, declared: int, budget: int) -> int:
    written = 0
    while True:
        chunk = src.read(_CHUNK)
        if not chunk:
            return written
        written += len(chunk)
        if written > declared:
            raise UnsafeArchive(f"{name!r} unpacks to more bytes than the archive declares (a forged zip?)")
        if written > budget:
            raise UnsafeArchive("the archive unpacks to more bytes than accepted")
        dst.write(chunk)


def safe_unpack(
    source: str | os.PathLike | BinaryIO,
    target: str | os.PathLike,
    *,
    limits: UnzipLimits | None = None,
    strip_single_root: bool = True,
) -> UnpackResult:
    """Unpack ``source`` into the new folder ``target`` (which must not exist), or raise UnsafeArchive.

    With ``strip_single_root``, a zip whose members all sit in one folder (``paper/...``) is
    unpacked as that folder's content. Nested archives are stored as files, never expanded.
    """
    limits = limits or UnzipLimits()
    target = Path(target)
    if target.exists():
        raise FileExistsError(f"{target} exists")
    try:
        archive = zipfile.ZipFile(source)
    except zipfile.BadZipFile:
        raise UnsafeArchive("the file is not a zip archive (or it is damaged)") from None
    except UnicodeDecodeError:
        raise UnsafeArchive("the archive has a file name marked UTF-8 that is not valid UTF-8") from None
    except OSError as exc:
        raise UnsafeArchive(f"the archive cannot be read: {exc.strerror or exc}") from None
    with archive:
        infos = archive.infolist()
        if len(infos) > limits.max_files * 2 + 100:
            raise UnsafeArchive(f"the archive holds {len(infos)} entries; at most {limits.max_files} files are accepted")
        members = [m for m in (_check_member(i) for i in infos) if m is not None]
        skipped = sorted({_display(_decoded_name(m.info)) for m in members if not m.parts and not m.is_dir})
        total = _check_sizes(members, limits)
        prefix = _common_root(members) if strip_single_root else ""
        seen: dict[str, str] = {}
        planned: list[tuple[_Member, tuple[str, ...]]] = []
        for m in members:
            if not m.parts:
                continue
            parts = m.parts[1:] if prefix else m.parts
            if not parts:
                continue
            rel = "/".join(parts)
            key = rel.casefold()  # a case-insensitive checkout would merge these two files
            if key in seen and not m.is_dir:
                raise UnsafeArchive(f"{_display(rel)!r} appears twice in the archive")
            seen[key] = rel
            planned.append((m, parts))
        if not any(not m.is_dir for m, _ in planned):
            raise UnsafeArchive("the archive holds no file")

        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
        result = UnpackResult(root=target, total_bytes=total, stripped_prefix=prefix, skipped=skipped)
        try:
            base = staging.resolve()
            budget = limits.max_total_bytes
            for m, parts in planned:
                dest = staging.joinpath(*parts)
                if not dest.resolve().is_relative_to(base):
                    raise UnsafeArchive(f"{_display('/'.join(parts))!r} resolves outside the paper folder")
                rel = "/".join(parts)
                try:
                    if m.is_dir:
                        dest.mkdir(parents=True, exist_ok=True)
                        continue
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    if dest.is_dir():
                        raise UnsafeArchive(f"{_display(rel)!r} is both a file and a folder in the archive")
                    with archive.open(m.info) as src, open(dest, "xb") as dst:
                        written = _copy_limited(src, dst, name=rel, declared=m.info.file_size, budget=budget)
                except (FileExistsError, NotADirectoryError):
                    raise UnsafeArchive(f"{_display(rel)!r} is both a file and a folder in the archive") from None
                except (zipfile.BadZipFile, EOFError, zlib.error) as exc:
                    raise UnsafeArchive(f"{_display(rel)!r} is damaged in the archive: {exc}") from None
                except NotImplementedError:
                    raise UnsafeArchive(f"{_display(rel)!r} uses a compression method that is not supported") from None
                budget -= written
                os.chmod(dest, 0o644)
                result.files.append(rel)
                if rel.lower().endswith(NESTED_ARCHIVE_SUFFIXES):
                    result.nested_archives.append(rel)
            os.rename(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    os.chmod(target, 0o755)
    result.files.sort()
    return result

