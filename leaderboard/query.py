"""Query parameters of the leaderboard, parsed once for the pages (views) and the read API (api)."""
from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass
from typing import Any, Mapping

from benchmark_core import scoring
from catalog.tables import TABLE_ROWS  # noqa: F401 - bench/web_load.py reads the page size here

__all__ = ["PAGE_PARAMS", "VIEWS", "LeaderboardParams", "leaderboard_params_parse", "parse_bool", "parse_date"]

VIEWS = ("overall", "contamination_safe")

#: the query parameters that pick a page of a table; a page's tables each have their own (a table's
#: links change only its own), and links that change what a table holds (sorting, filters, another
#: release, a download) drop them all
PAGE_PARAMS = ("page", "board_page", "per_model_page")

@dataclass(frozen=True)
class LeaderboardParams:
    """Validated query parameters of a leaderboard (see leaderboard_params_parse)."""

    view: str = "overall"
    cutoff: dt.date | None = None
    date_from: dt.date | None = None
    date_to: dt.date | None = None
    open_weights: bool | None = None
    organisation: str | None = None
    with_paper: bool = True
    run_here: bool | None = None  # 1: only results the Hub ran itself; 0: only the others

    def as_kwargs(self) -> dict[str, Any]:
        return asdict(self)


def parse_date(value: str) -> dt.date:
    """YYYY-MM-DD, or YYYY-MM meaning the month's last day."""
    return scoring.parse_cutoff(value) if value.count("-") < 2 else dt.date.fromisoformat(value)


def parse_bool(value: str) -> bool:
    """1/0, true/false, yes/no, on/off; ValueError otherwise."""
    v = value.strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def leaderboard_params_parse(query: Mapping[str, str]) -> tuple[LeaderboardParams, list[str]]:
    """Validate query parameters: (params, messages). A bad value is left at its default and
    named in a message (pages show the default view with the messages; the API answers 400).

    Keys: view (overall|contamination_safe), cutoff, from, to (YYYY-MM-DD, or YYYY-MM meaning the
    month's last day), open_weights (1/0/true/false), organisation, with_paper (1/0), run_here (1/0).
    """
    messages: list[str] = []
    kwargs: dict[str, Any] = {}
    view = (query.get("view") or "overall").strip()
    if view not in VIEWS:
        messages.append(f"unknown view {view!r} (use {' or '.join(VIEWS)})")
        view = "overall"
    kwargs["view"] = view
    for name, attr in (("cutoff", "cutoff"), ("from", "date_from"), ("to", "date_to")):
        raw = (query.get(name) or "").strip()
        if not raw:
            continue
        try:
            kwargs[attr] = parse_date(raw)
        except ValueError:
            messages.append(f"{name}={raw[:40]!r} is not a date (use YYYY-MM-DD)")
    if kwargs.get("date_from") and kwargs.get("date_to") and kwargs["date_from"] > kwargs["date_to"]:
        messages.append("'from' is after 'to'")
        kwargs.pop("date_from")
        kwargs.pop("date_to")
    for name in ("open_weights", "with_paper", "run_here"):
        raw = (query.get(name) or "").strip()
        if not raw:
            continue
        try:
            kwargs[name] = parse_bool(raw)
        except ValueError:
            messages.append(f"{name}={raw[:40]!r} is not a yes/no value (use 1 or 0)")
    organisation = (query.get("organisation") or "").strip()
    if organisation:
        kwargs["organisation"] = organisation[:200]
    return LeaderboardParams(**kwargs), messages
