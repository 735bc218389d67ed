"""Formatting, Markdown (sanitized), syntax highlighting and query-string helpers for the templates."""
from __future__ import annotations

import difflib
import re
from typing import Any

import markdown as md
import nh3
from django import template
from django.http import QueryDict
from django.urls import NoReverseMatch, reverse
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import PythonLexer, TextLexer, get_lexer_for_filename
from pygments.util import ClassNotFound

from leaderboard.mathml import math_protect, math_restore
from catalog.models import CATEGORY_LABELS
from leaderboard.query import PAGE_PARAMS

register = template.Library()

# Markdown may carry links, emphasis, lists, code and tables; nothing that runs or styles.
ALLOWED_TAGS = {
    "p", "br", "hr", "em", "strong", "code", "pre", "blockquote", "ul", "ol", "li", "a",
    "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th", "td", "sup", "sub", "del",
}
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "th": {"align"}, "td": {"align"}}


@register.filter
def pct(value: Any, digits: int = 2) -> str:
    """37.3412 -> '37.34'; missing -> an em dash."""
    if value is None or value == "":
        return "—"
    try:
        return f"{float(value):.{int(digits)}f}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def usd(value: Any) -> str:
    """A measured cost: cents and above with 2 decimals, smaller amounts with 3 significant digits."""
    if value is None or value == "":
        return "—"
    try:
        amount = float(value)
    except (TypeError, ValueError):
        return "—"
    return f"${amount:,.2f}" if amount >= 0.01 or amount == 0 else f"${amount:.3g}"


@register.filter
def cutoff(value: Any) -> str:
    """A knowledge cutoff as YYYY-MM or YYYY-MM-DD ('2024-7' -> '2024-07'); other text unchanged, none -> ''."""
    text = "" if value is None else str(value).strip()
    match = re.fullmatch(r"(\d{4})-(\d{1,2})(?:-(\d{1,2}))?", text)
    if not match:
        return text
    year, month, day = match.groups()
    return f"{year}-{int(month):02d}" + (f"-{int(day):02d}" if day else "")


@register.filter
def money(value: Any) -> str:
    if value is None or value == "":
        return "—"
    try:
        return f"${float(value):,.2f}"
    except (TypeError, ValueError):
        return "—"


@register.filter
def category_label(category: Any) -> str:
    """A stored error category as pages name it (an imported failure's is "not published")."""
    return CATEGORY_LABELS.get(category, category or "")


@register.filter
def get_item(mapping: Any, key: Any) -> Any:
    try:
        return mapping.get(key) if mapping is not None else None
    except AttributeError:
        return None


def render_markdown(text: str) -> SafeString:
    """Markdown -> HTML, then nh3 keeps only harmless tags (no scripts, styles, event handlers);
    LaTeX formulas become MathML (leaderboard.mathml, sanitized on its own)."""
    text, formulas = math_protect(text or "")
    html = md.markdown(text, extensions=["fenced_code", "tables"], output_format="html")
    # the page owns h1/h2: a summary's own headings move two levels down instead of vanishing
    html = re.sub(r"<(/?)h([1-6])\b", lambda m: f"<{m[1]}h{min(int(m[2]) + 2, 6)}", html)
    clean = nh3.clean(
        html,
        tags=ALLOWED_TAGS,
        attributes=ALLOWED_ATTRIBUTES,
        url_schemes={"http", "https", "mailto"},
        link_rel="nofollow noopener noreferrer",
    )
    return mark_safe(math_restore(clean, formulas))  # noqa: S308 - sanitized by nh3 (the MathML too)


@register.filter(name="markdown")
def markdown_filter(text: str) -> SafeString:
    return render_markdown(text)


def highlight_code(code: str, *, filename: str = "", start_line: int = 1, marked: list[int] | None = None) -> SafeString:
    """Pygments HTML with CSS classes (static/css/pygments.css), never inline styles; ``marked``
    lines (1-based) get the 'hll' class."""
    try:
        lexer = get_lexer_for_filename(filename) if filename else PythonLexer()
    except ClassNotFound:
        lexer = TextLexer()
    formatter = HtmlFormatter(
        cssclass="highlight", linenos="inline", linenostart=max(int(start_line or 1), 1), noclasses=False,
        hl_lines=marked or [],
    )
    return mark_safe(pygments_highlight(code or "", lexer, formatter))  # noqa: S308 - pygments escapes the code


@register.simple_tag
def highlight(code: str, filename: str = "", start_line: int = 1) -> SafeString:
    return highlight_code(code, filename=filename, start_line=start_line)


def diff_rows(reference: str, completion: str) -> list[dict[str, str]]:
    """Line diff (difflib) of reference -> completion as rows {kind, text} for an HTML table."""
    rows = []
    for line in difflib.unified_diff(
        (reference or "").splitlines(), (completion or "").splitlines(), "reference", "completion", lineterm="", n=3
    ):
        if line.startswith(("---", "+++")):
            continue
        kind = {"@": "hunk", "+": "add", "-": "del"}.get(line[:1], "ctx")
        rows.append({"kind": kind, "text": line})
    return rows


@register.simple_tag(takes_context=True)
def query(context: template.Context, **changes: Any) -> str:
    """The current query string with some parameters replaced (None or '' drops one)."""
    request = context.get("request")
    params = request.GET.copy() if request is not None else QueryDict(mutable=True)
    for key, value in changes.items():
        if value is None or value == "":
            params.pop(key, None)
        else:
            params[key] = str(value)
    encoded = params.urlencode()
    return "?" + encoded if encoded else "?"


@register.simple_tag(takes_context=True)
def sort_query(context: template.Context, column: str) -> str:
    """Link target of a sortable header: same filters, this column, direction flipped if already sorted."""
    sort = context.get("sort") or {}
    direction = "desc"
    if sort.get("column") == column:
        direction = "asc" if sort.get("direction") == "desc" else "desc"
    # another order is another table: back to its first page
    return query(context, sort=column, dir=direction, **{p: None for p in PAGE_PARAMS})


@register.simple_tag(takes_context=True)
def page_query(context: template.Context, pager: Any, number: int) -> str:
    """Link to page ``number`` of the table ``pager`` (a leaderboard.query.TablePage): the other
    parameters (sort, filters, the other tables' pages) kept, the table's anchor appended."""
    target = query(context, **{pager.param: number if number > 1 else None})
    return target + (f"#{pager.anchor}" if pager.anchor else "")


@register.simple_tag(takes_context=True)
def download_query(context: template.Context, table: str = "") -> str:
    """The current query as a CSV download of the whole table: format=csv, ``table`` when given,
    no page parameter (a download has every row)."""
    return query(context, format="csv", table=table or None, **{p: None for p in PAGE_PARAMS})


@register.simple_tag(takes_context=True)
def aria_sort(context: template.Context, column: str) -> str:
    sort = context.get("sort") or {}
    if sort.get("column") != column:
        return "none"
    return "ascending" if sort.get("direction") == "asc" else "descending"


@register.simple_tag
def url_or_empty(name: str, *args: Any) -> str:
    """reverse() that yields '' when another app has not wired the route (yet)."""
    try:
        return reverse(name, args=args)
    except NoReverseMatch:
        return ""


@register.filter
def bibtex_escape(value: str) -> str:
    return escape(str(value).replace("{", "").replace("}", ""))


_JSON_ESCAPES = {ord(">"): "\\u003E", ord("<"): "\\u003C", ord("&"): "\\u0026"}


@register.simple_tag
def json_data(value: Any, element_id: str, chart_target: str = "") -> SafeString:
    """A <script type="application/json"> block (never executed, CSP-safe); data-chart names the div to draw in."""
    import json

    from django.core.serializers.json import DjangoJSONEncoder

    payload = json.dumps(value, cls=DjangoJSONEncoder).translate(_JSON_ESCAPES)
    target = f' data-chart="{escape(chart_target)}"' if chart_target else ""
    return mark_safe(f'<script id="{escape(element_id)}" type="application/json"{target}>{payload}</script>')  # noqa: S308


#: list prices (USD per million tokens) sort after measured costs (USD per snippet): not the same unit
LIST_PRICE_OFFSET = 1e6


@register.filter
def row_cost(row: Any) -> str:
    """Input + output cost of a leaderboard row, for client-side sorting ('' when unknown)."""
    measured = getattr(row, "cost_per_snippet", None)
    if measured is not None:  # USD per snippet, measured: sorts before every list price
        return f"{measured:.8f}"
    a, b = getattr(row, "input_cost", None), getattr(row, "output_cost", None)
    if a is None and b is None:
        return ""
    return f"{LIST_PRICE_OFFSET + (a or 0.0) + (b or 0.0):.4f}"


@register.simple_tag
def plotly_css_markers() -> SafeString:
    """Hidden elements whose ids stop plotly.js from injecting inline <style> (see leaderboard.plotly_bundle)."""
    from leaderboard.plotly_bundle import plotly_inline_css_ids

    return mark_safe("".join(f'<span hidden id="{escape(i)}"></span>' for i in plotly_inline_css_ids()))  # noqa: S308


@register.simple_tag(takes_context=True)
def hidden_query_inputs(context: template.Context, *exclude: str) -> SafeString:
    """Hidden inputs repeating the current query parameters (except ``exclude`` and the tables'
    page numbers: another release has other tables), so a small GET form (the release switcher)
    changes one parameter and keeps the rest of the view."""
    request = context.get("request")
    if request is None:
        return mark_safe("")  # noqa: S308
    skip = {*exclude, *PAGE_PARAMS}
    parts = [
        f'<input type="hidden" name="{escape(key)}" value="{escape(value)}">'
        for key, values in request.GET.lists()
        if key not in skip
        for value in values
    ]
    return mark_safe("".join(parts))  # noqa: S308 - every name and value is escaped


@register.filter
def bibtex_with_url(citation: str, url: str) -> str:
    """Add the release's permalink as the entry's last field (the selector's text has none)."""
    text = (citation or "").rstrip()
    if not url or not text.endswith("}") or "url = {" in text:
        return text
    body = text[:-1].rstrip()
    return f"{body},\n  url = {{{url}}}\n}}"
