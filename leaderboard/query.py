"""Query parameters of the leaderboard, parsed once for the pages (views) and the read API (api)."""
from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, Mapping, Sequence, TypeVar

from django.conf import settings
from django.core.paginator import InvalidPage, Paginator

from benchmark_core import scoring

__all__ = [
    "PAGE_PARAMS", "TABLE_ROWS", "VIEWS", "LeaderboardParams", "PageNotFound", "TablePage", "leaderboard_params_parse",
    "parse_bool", "parse_date", "table_page", "table_rows",
]

VIEWS = ("overall", "contamination_safe")

#: rows per page of a page's long tables (leaderboards, heatmap, per-model lists); settings.RCB_TABLE_ROWS overrides
TABLE_ROWS = 100
#: the query parameters that pick a page of a table; a page's tables each have their own (a table's
#: links change only its own), and links that change what a table holds (sorting, filters, another
#: release, a download) drop them all
PAGE_PARAMS = ("page", "board_page", "per_model_page")

T = TypeVar("T")


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


# --------------------------------------------------------------------------- pages of a table
class PageNotFound(ValueError):
    """A page number that is not a whole number from 1 to the table's last page (the pages answer 404)."""


@dataclass(frozen=True)
class TablePage(Generic[T]):
    """One page of a table's rows, with what its page links need."""

    rows: list[T]
    number: int  # 1-based
    pages: int  # at least 1 (an empty table has one, empty, page)
    total: int  # rows of the whole table
    first: int  # 1-based position of rows[0] in the whole table (0 when empty)
    param: str  # the query parameter of this table's pages
    anchor: str = ""  # id of the table, so a page link lands on it
    links: list[int | None] = field(default_factory=list)  # page numbers to link, None for an ellipsis

    @property
    def paged(self) -> bool:
        return self.pages > 1

    @property
    def last(self) -> int:
        """1-based position of the page's last row (0 when empty)."""
        return self.first + len(self.rows) - 1 if self.rows else 0

    @property
    def previous_number(self) -> int | None:
        return self.number - 1 if self.number > 1 else None

    @property
    def next_number(self) -> int | None:
        return self.number + 1 if self.number < self.pages else None


def table_rows() -> int:
    return int(getattr(settings, "RCB_TABLE_ROWS", TABLE_ROWS))


def table_page(rows: Sequence[T], raw: str | None, *, param: str = "page", anchor: str = "",
               size: int | None = None) -> TablePage[T]:
    """The page ``raw`` (a query value; empty means 1) of ``rows``, ``size`` rows a page.

    Raises PageNotFound, with a message naming the valid range, for anything but a whole number
    from 1 to the last page: a bookmarked page past the end of a shrunken table is a clear 404,
    never a silently different page.
    """
    paginator = Paginator(rows, size or table_rows())
    text = (raw or "").strip() or "1"
    pages = paginator.num_pages
    if not text.isdigit():
        raise PageNotFound(f"{param}={text[:20]!r} is not a page number: this table has pages 1 to {pages}.")
    try:
        page = paginator.page(int(text))
    except InvalidPage:
        raise PageNotFound(f"No page {int(text)} of this table: it has {pages} page{'s' if pages != 1 else ''} "
                           f"of {paginator.per_page} rows ({param}=1 to {param}={pages}).") from None
    links = [n if isinstance(n, int) else None
             for n in paginator.get_elided_page_range(page.number, on_each_side=2, on_ends=1)]
    return TablePage(rows=list(page.object_list), number=page.number, pages=pages, total=paginator.count,
                     first=page.start_index(), param=param, anchor=anchor, links=links)
