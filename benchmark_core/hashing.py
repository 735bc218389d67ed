"""Content hashes of paper folders and releases: one ignore rule, one folder hash, one release hash.

The site stores these hashes (``ReleasePaper.content_hash``, ``Release.content_hash``), the verdict
cache keys on them and the run card names the release by them, so all three read the same bytes.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Iterable

__all__ = ["IGNORED_DIRS", "IGNORED_SUFFIXES", "folder_hash", "ignored", "release_hash"]

#: folders that are caches or tooling, never part of a paper
IGNORED_DIRS = frozenset({"__pycache__", ".git", ".ipynb_checkpoints", ".venv", "node_modules", ".pytest_cache"})
#: file endings that are byproducts of running a paper's code
IGNORED_SUFFIXES = (".pyc",)


def ignored(rel: Path) -> bool:
    """Whether a path relative to a paper folder is left out of its hash and its copies."""
    return any(part in IGNORED_DIRS for part in rel.parts) or rel.name.endswith(IGNORED_SUFFIXES)


def folder_hash(folder: Path | str) -> str:
    """sha256 over a folder's files (relative paths and the sha256 of their bytes), caches ignored."""
    root = Path(folder)
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if ignored(rel) or not path.is_file():
            continue
        digest.update(rel.as_posix().encode() + b"\0")
        try:
            digest.update(hashlib.sha256(path.read_bytes()).digest())
        except OSError:  # a file the reader may not open still changes the hash by its name
            digest.update(b"<unreadable>")
    return digest.hexdigest()


def release_hash(papers: Iterable[tuple[str, str]]) -> str:
    """sha256 over (paper id, folder hash) pairs, in a stable order: a release's content hash."""
    lines = sorted(f"{paper_id}:{content_hash}" for paper_id, content_hash in papers)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()
