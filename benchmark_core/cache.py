"""A verdict cache: re-scoring identical completions in the same environment costs a lookup.

A verdict is keyed by the SHA-256 of (harness version, paper content, file, snippet, completion
code, environment id, timeout and limits). It is only trusted for papers shown deterministic: the
paper's reference run, made twice in the same environment, gave identical verdicts (exit code,
pass/fail, number of test cases). Stored in one small SQLite file, safe to share between threads
and processes.

It also keeps each paper's reference outcome per (paper content, environment) (``reference_get`` /
``reference_put``, used by ``runner.reference_run``), so a later scoring in another process or session
does not run the reference code again; a failed outcome is believed only ``failed_seconds``.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any, Iterable

from .hashing import folder_hash

__all__ = ["VerdictCache", "paper_content_hash", "verdict_key"]

#: the one folder hash (benchmark_core.hashing): the site stores the same hashes
paper_content_hash = folder_hash


def verdict_key(*parts: Any) -> str:
    """SHA-256 of the parts, each JSON-encoded (so no two different part lists collide)."""
    return hashlib.sha256(json.dumps(list(parts), sort_keys=True, default=str).encode()).hexdigest()


class VerdictCache:
    """A SQLite file of verdicts and of which (paper, environment) pairs are deterministic."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30)
        with self._lock, self._db:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS verdict (key TEXT PRIMARY KEY, run TEXT NOT NULL, created REAL NOT NULL)"
            )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS paper_env (key TEXT PRIMARY KEY, deterministic INTEGER NOT NULL, "
                "detail TEXT NOT NULL, created REAL NOT NULL)"
            )
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS reference (key TEXT PRIMARY KEY, info TEXT NOT NULL, "
                "passed INTEGER NOT NULL, created REAL NOT NULL)"
            )
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute("SELECT run FROM verdict WHERE key = ?", (key,)).fetchone()
        if row is None:
            self.misses += 1
            return None
        self.hits += 1
        return json.loads(row[0])

    def get_many(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        keys = list(dict.fromkeys(keys))
        found: dict[str, dict[str, Any]] = {}
        with self._lock:
            for i in range(0, len(keys), 500):
                chunk = keys[i : i + 500]
                marks = ",".join("?" * len(chunk))
                for key, run in self._db.execute(f"SELECT key, run FROM verdict WHERE key IN ({marks})", chunk):
                    found[key] = json.loads(run)
        self.hits += len(found)
        self.misses += len(keys) - len(found)
        return found

    def put(self, key: str, run: dict[str, Any]) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO verdict (key, run, created) VALUES (?, ?, ?)",
                             (key, json.dumps(run), time.time()))

    def deterministic(self, paper_env: str) -> bool | None:
        """True/False when known for this (paper content, environment) key, else None."""
        with self._lock:
            row = self._db.execute("SELECT deterministic FROM paper_env WHERE key = ?", (paper_env,)).fetchone()
        return None if row is None else bool(row[0])

    def paper_detail(self, paper_env: str) -> dict[str, Any] | None:
        """What the determinism check recorded (the reference run's completion and case count)."""
        with self._lock:
            row = self._db.execute("SELECT detail FROM paper_env WHERE key = ?", (paper_env,)).fetchone()
        try:
            return json.loads(row[0]) if row and row[0] else None
        except ValueError:
            return None

    def set_deterministic(self, paper_env: str, value: bool, detail: str = "") -> None:
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR REPLACE INTO paper_env (key, deterministic, detail, created) VALUES (?, ?, ?, ?)",
                (paper_env, int(value), detail, time.time()),
            )

    def reference_get(self, key: str, *, failed_seconds: float) -> tuple[dict[str, Any], float] | None:
        """The reference outcome stored under ``key`` and its age in seconds; a failed one only while
        younger than ``failed_seconds`` (an environment repaired meanwhile must be noticed)."""
        with self._lock:
            row = self._db.execute("SELECT info, passed, created FROM reference WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        age = max(0.0, time.time() - float(row[2]))
        if not row[1] and age >= failed_seconds:
            return None
        try:
            info = json.loads(row[0])
        except ValueError:
            return None
        return (info, age) if isinstance(info, dict) else None

    def reference_put(self, key: str, info: dict[str, Any], *, passed: bool) -> None:
        with self._lock, self._db:
            self._db.execute("INSERT OR REPLACE INTO reference (key, info, passed, created) VALUES (?, ?, ?, ?)",
                             (key, json.dumps(info, default=str), int(passed), time.time()))

    def close(self) -> None:
        with self._lock:
            self._db.close()
