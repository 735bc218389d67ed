"""What the importers share: their error and the Paper fields of a papers.yaml entry."""
from __future__ import annotations

import datetime as dt
from typing import Any

__all__ = ["ImportProblem", "paper_fields"]


class ImportProblem(Exception):
    """An input that cannot be imported; the message says why (commands print it, no traceback)."""


def _date(value: Any) -> dt.date | None:
    if value in (None, "", "null"):
        return None
    try:
        return dt.date.fromisoformat(str(value).strip())
    except ValueError:
        return None


def paper_fields(meta: dict[str, Any]) -> dict[str, Any]:
    """Paper model fields from a papers.yaml / paper_metadata entry (dates may be strings or dates)."""

    def as_date(key: str) -> dt.date | None:
        value = meta.get(key)
        return value if isinstance(value, dt.date) else _date(value)

    def as_str(key: str, limit: int) -> str:
        value = meta.get(key)
        return "" if value in (None, "null") else str(value).strip()[:limit]

    return {
        "title": as_str("title", 500) or str(meta.get("id")),
        "venue": as_str("venue", 100),
        "arxiv_abs": as_str("arxiv_abs", 500),
        "arxiv_date": as_date("arxiv_date"),
        "arxiv_v1_date": as_date("arxiv_v1_date"),
        "github_url": as_str("github_url", 500),
        "first_commit_date": as_date("first_commit_date"),
        "last_commit_date": as_date("last_commit_date"),
        "metadata": {k: (v.isoformat() if isinstance(v, dt.date) else v) for k, v in meta.items()},
    }
