"""Pages of long tables: the one pagination of every list the site serves, pages and APIs of every app.

``table_page`` cuts a list into pages of ``table_rows()`` rows (settings.RCB_TABLE_ROWS, default
TABLE_ROWS) and refuses a page the table has not with ``PageNotFound`` (a 404 naming the range), so
a bookmarked page past the end of a shrunken table is never a silently different page.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, Sequence, TypeVar

from django.conf import settings
from django.core.paginator import InvalidPage, Paginator

__all__ = ["TABLE_ROWS", "PageNotFound", "TablePage", "table_page", "table_rows"]

#: rows per page of a page's long tables (leaderboards, heatmap, per-model lists); settings.RCB_TABLE_ROWS overrides
TABLE_ROWS = 100

T = TypeVar("T")


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
