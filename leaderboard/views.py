"""Server-rendered pages of the leaderboard. Thin: parse input, call selectors, pick a template.

Every page works without JavaScript; charts are plotly specs embedded as JSON and drawn by
static/js/charts.js. Unknown releases, papers, models and snippets give a 404; bad query
parameters fall back to the default view with a notice on the page.

Long tables (one row per model) come a page at a time (``leaderboard.query.table_page``, 100 rows):
the whole table is computed and sorted first, so tiers and order are those of the whole table,
then sliced; charts show the rows of the page; a CSV download has every row whatever the page.
A page number that is not one of the table's pages is a 404 that names the valid range.
"""
from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.views.defaults import page_not_found

from benchmark_core.completions import completion_lines
from catalog.models import IMPORTED_FAILURE, IMPORTED_NOTE, Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet
from catalog.ranking import release_scorability
from catalog.tables import PageNotFound, TablePage, table_page
from catalog.visibility import release_content_visible, release_get
from contributions.selectors import release_succession
from submissions.selectors import release_closed_reason, submission_can_view

from . import charts
from . import csv as lb_csv
from .query import leaderboard_params_parse, parse_bool
from .selectors import boards, caching, compare, details, hardest, paper_files, release_info
from .templatetags.leaderboard_tags import diff_rows, highlight_code, render_markdown

HEADLINE_MODELS = 12


# --------------------------------------------------------------------------- helpers
def _release(request: HttpRequest, slug: str | None = None, *, content: bool = False) -> Release:
    """The release named in the URL or ?release=, else the default one; 404 when unknown (a draft
    is unknown to all but staff; with ``content``, a held-out release too: its tasks and code)."""
    slug = slug or (request.GET.get("release") or "").strip() or None
    try:
        release = release_get(slug=slug, viewer=request.user, content=content)
        if content and not release_content_visible(release=release, viewer=request.user):
            raise Release.DoesNotExist("held out")  # (the default release, when it is held out)
        return release
    except Release.DoesNotExist:
        if slug:
            raise Http404(f"No release {slug!r}.") from None
        raise Http404("No release has been published yet.") from None


def _paper_release(request: HttpRequest, paper_id: str) -> Release:
    """A paper page's release: as ?release= says, else the default one or the latest that has the paper."""
    if (request.GET.get("release") or "").strip():
        return _release(request)
    try:
        return release_info.release_for_paper(paper_id=paper_id)
    except Release.DoesNotExist:
        raise Http404("No release has been published yet.") from None


def _releases_menu() -> list[dict[str, Any]]:
    # published ones only: the menu is on every page, for every visitor (staff find drafts on their releases page)
    return list(Release.objects.filter(status=Release.PUBLISHED).order_by("-release_date", "-created_at")
                .values("name", "slug", "status"))


def _page(request: HttpRequest, template: str, context: dict[str, Any], *, nav: str, release: Release | None = None) -> HttpResponse:
    context.setdefault("notices", [])
    context.update(nav=nav, release=release, releases_menu=_releases_menu())
    return render(request, template, context)


def _bool_param(request: HttpRequest, name: str, notices: list[str], default: bool = True) -> bool:
    raw = (request.GET.get(name) or "").strip().lower()
    if not raw:
        return default
    try:
        return parse_bool(raw)
    except ValueError:
        notices.append(f"{name}={raw!r} is not a yes/no value (use 1 or 0); ignored.")
        return default


def _table_page(request: HttpRequest, rows: Sequence[Any], *, param: str = "page", anchor: str = "") -> TablePage:
    """The page of ``rows`` the request asks for with ``?<param>=``; 404 for a page the table has not."""
    try:
        return table_page(rows, request.GET.get(param), param=param, anchor=anchor)
    except PageNotFound as exc:
        raise Http404(str(exc)) from None


def _wants_csv(request: HttpRequest) -> bool:
    return (request.GET.get("format") or "").lower() == "csv"


# --------------------------------------------------------------------------- sorting of the overall table
@dataclass(frozen=True)
class SortSpec:
    column: str
    direction: str  # "asc" | "desc"


def _cost(row: boards.LeaderboardRow) -> float | None:
    """Measured USD per snippet (run card) first, then list prices per million tokens (another unit)."""
    from .templatetags.leaderboard_tags import LIST_PRICE_OFFSET

    if row.cost_per_snippet is not None:
        return row.cost_per_snippet
    if row.input_cost is None and row.output_cost is None:
        return None
    return LIST_PRICE_OFFSET + (row.input_cost or 0.0) + (row.output_cost or 0.0)


SORT_KEYS: dict[str, tuple[Callable[[boards.LeaderboardRow], Any], str]] = {
    # column: (value, default direction); None values always sink to the bottom
    "rank": (lambda r: (r.tier if r.ranked and r.tier is not None else None), "asc"),
    "model": (lambda r: r.name.lower(), "asc"),
    "organisation": (lambda r: (r.organisation or "").lower() or None, "asc"),
    "scaled": (lambda r: r.scaled_pass_rate, "desc"),
    "pass": (lambda r: r.pass_rate, "desc"),
    "coverage": (lambda r: r.coverage, "desc"),
    "cutoff": (lambda r: r.knowledge_cutoff_date, "desc"),
    "cost": (_cost, "asc"),
    "samples": (lambda r: r.samples, "desc"),
}


def _sort_spec(request: HttpRequest, notices: list[str]) -> SortSpec:
    column = (request.GET.get("sort") or "rank").strip()
    if column not in SORT_KEYS:
        notices.append(f"Cannot sort by {column!r}; sorted by rank (columns: {', '.join(SORT_KEYS)}).")
        column = "rank"
    direction = (request.GET.get("dir") or SORT_KEYS[column][1]).strip().lower()
    if direction not in ("asc", "desc"):
        notices.append(f"dir={direction!r} is not asc or desc; ignored.")
        direction = SORT_KEYS[column][1]
    return SortSpec(column, direction)


def _sorted_rows(rows: list[boards.LeaderboardRow], spec: SortSpec) -> list[boards.LeaderboardRow]:
    """Baselines last, then rows with a value sorted as asked, then rows without one."""
    value = SORT_KEYS[spec.column][0]
    baselines = [r for r in rows if r.baseline]
    others = [r for r in rows if not r.baseline]
    # the selector's order (best scaled rate first) breaks ties, so sorts are stable and meaningful
    present = [r for r in others if value(r) is not None]
    missing = [r for r in others if value(r) is None]
    present.sort(key=value, reverse=spec.direction == "desc")
    return present + missing + baselines


def _csv(filename: str, text: str) -> HttpResponse:
    """A page's download: the same table, columns and cells as the API's ``?format=csv`` (leaderboard.csv)."""
    return lb_csv.csv_response(text, filename=filename)


def _ci_chart(rows: Sequence[boards.LeaderboardRow], *, limit: int | None = None) -> dict[str, Any] | None:
    ranked = [r for r in rows if r.ranked and r.scaled_pass_rate is not None]
    ranked.sort(key=lambda r: -(r.scaled_pass_rate or 0.0))
    if limit:
        ranked = ranked[:limit]
    if not ranked:
        return None
    return charts.ci_bar_figure(
        names=[r.name for r in ranked],
        values=[r.scaled_pass_rate for r in ranked],
        lows=[r.ci_low for r in ranked],
        highs=[r.ci_high for r in ranked],
    )


# --------------------------------------------------------------------------- pages
def home(request: HttpRequest) -> HttpResponse:
    try:
        release = _release(request)
    except Http404:
        if request.GET.get("release"):
            raise  # an unknown ?release= is a 404 here as on every page
        release = None  # nothing published yet: the home page says so
    context: dict[str, Any] = {"table": None, "chart": None}
    if release is not None:
        table = boards.leaderboard_rows(release=release)
        context.update(
            table=table,
            chart=_ci_chart(table.rows, limit=HEADLINE_MODELS),
            top=[r for r in table.rows if r.ranked][:5],
            ranked_count=sum(1 for r in table.rows if r.ranked),
        )
    return _page(request, "leaderboard/home.html", context, nav="home", release=release)


def leaderboard(request: HttpRequest, slug: str | None = None) -> HttpResponse:
    """Overall leaderboard of a release: tiers, intervals, filters and server-side sorting."""
    release = _release(request, slug)
    query = request.GET.copy()
    query["view"] = "overall"  # the contamination window has its own page
    params, notices = leaderboard_params_parse(query)
    sort = _sort_spec(request, notices)
    table = boards.leaderboard_rows(
        release=release, view="overall", open_weights=params.open_weights, organisation=params.organisation,
        with_paper=params.with_paper, run_here=params.run_here,
    )
    if _wants_csv(request):
        return _csv(f"leaderboard-{release.slug}.csv", lb_csv.leaderboard_table_csv(table.rows))
    if params.organisation and params.organisation.lower() not in {o.lower() for o in table.organisations}:
        notices.append(f"No model of organisation {params.organisation!r} in this release.")
    rows = _sorted_rows(table.board, sort)
    pager = _table_page(request, rows, anchor="leaderboard")
    context = {
        "table": table,
        "apart": table.apart,
        "rows": pager.rows,
        "pager": pager,
        "params": params,
        "sort": {"column": sort.column, "direction": sort.direction},
        "notices": notices,
        "chart": _ci_chart(pager.rows),
        "ranked_count": sum(1 for r in rows if r.ranked),
    }
    return _page(request, "leaderboard/leaderboard.html", context, nav="leaderboard", release=release)


def per_paper(request: HttpRequest) -> HttpResponse:
    """Model x paper heatmap (chart + table) and the leaderboard of one chosen paper."""
    release = _release(request)
    notices: list[str] = []
    with_paper = _bool_param(request, "with_paper", notices)
    hm = boards.heatmap(release=release, with_paper=with_paper)
    paper_id = (request.GET.get("paper") or "").strip()
    if paper_id and paper_id not in hm.papers:
        notices.append(f"No paper {paper_id!r} in {release.name}; showing the first paper.")
        paper_id = ""
    paper_id = paper_id or (hm.papers[0] if hm.papers else "")
    board = boards.paper_leaderboard(release=release, paper_id=paper_id, with_paper=with_paper) if paper_id else None
    if _wants_csv(request):
        if request.GET.get("table") == "paper" and board is not None:
            return _csv(f"paper-{paper_id}-{release.slug}.csv", lb_csv.leaderboard_table_csv(board.rows))
        return _csv(f"heatmap-{release.slug}.csv", lb_csv.heatmap_csv(hm))
    pager = _table_page(request, list(zip(hm.models, hm.values)), anchor="heatmap-table")
    board_pager = (_table_page(request, board.rows, param="board_page", anchor="paper-leaderboard")
                   if board is not None else None)
    # cells are prepared here: a 32 x 20 table through template filters costs ~0.3 s; one short
    # class a cell (the table's CSS centres them): a page has up to 100 x papers of them
    grid = [
        {"key": key, "name": name,
         "cells": [("heat-none", "·") if v is None else (f"heat-{min(int(v // 20), 5)}", f"{v:.0f}") for v in values]}
        for (key, name), values in pager.rows
    ]
    chart = (
        charts.heatmap_figure(models=[n for (_, n), _ in pager.rows], papers=hm.papers, z=[v for _, v in pager.rows])
        if pager.rows and hm.papers else None
    )
    context = {"heatmap": hm, "grid": grid, "pager": pager, "chart": chart, "board": board, "board_pager": board_pager,
               "paper_id": paper_id, "with_paper": with_paper, "notices": notices}
    return _page(request, "leaderboard/per_paper.html", context, nav="per_paper", release=release)


def contamination(request: HttpRequest) -> HttpResponse:
    """Scores on the papers first committed inside a date window, and per model after its own cutoff."""
    release = _release(request)
    query = request.GET.copy()
    query["view"] = "contamination_safe"
    params, notices = leaderboard_params_parse(query)
    date_from, date_to = params.date_from, params.date_to
    sort = _sort_spec(request, notices)
    # a window's tiers come from a bootstrap at request time (~1 s for 32 models): cache them per
    # data version, so moving the slider back and forth stays fast and a new result still shows
    table = caching.cached(
        ("page:window", release.id, release.data_version, params.cutoff, date_from, date_to,
         params.open_weights, params.organisation, params.with_paper, params.run_here),
        lambda: boards.leaderboard_rows(
            release=release, view="contamination_safe", cutoff=params.cutoff, date_from=date_from, date_to=date_to,
            open_weights=params.open_weights, organisation=params.organisation, with_paper=params.with_paper,
            run_here=params.run_here,
        ),
        timeout=600,
    )
    per_model = boards.contamination_per_model(release=release, with_paper=params.with_paper)
    if _wants_csv(request):
        if request.GET.get("table") == "per_model":
            return _csv(f"contamination-per-model-{release.slug}.csv", lb_csv.contamination_csv(per_model))
        return _csv(f"contamination-safe-{release.slug}.csv", lb_csv.leaderboard_table_csv(table.rows))
    window = set(table.papers)
    dated = [(p, d) for p, d in table.paper_dates.items() if d is not None]
    undated = [p for p, d in table.paper_dates.items() if d is None]
    sizes = {p: (n, w) for p, n, w in ReleasePaper.objects.filter(release=release)
             .values_list("paper__paper_id", "snippet_count", "total_weight")}
    # the papers a window can count (dated, scorable here): the slider counts exactly what the server would
    not_scorable = {n["paper"] for n in table.not_scorable}
    papers_json = [{"id": p, "first_commit_date": d.isoformat(), "snippets": sizes.get(p, (0, 0))[0],
                    "weight": sizes.get(p, (0, 0))[1]} for p, d in dated if p not in not_scorable]
    # the window as one "from" date: a cutoff (the default one: the latest among ranked models) is the
    # day after it, and with a "from" date too the later one starts the window; so the form, the
    # slider, the cards and a bookmarked URL all describe the same window
    if table.cutoff is not None:
        after_cutoff = table.cutoff + dt.timedelta(days=1)
        date_from = max(date_from, after_cutoff) if date_from else after_cutoff
    timeline = (
        charts.papers_timeline_figure(
            papers=[p for p, _ in dated], dates=[d.isoformat() for _, d in dated], inside=[p in window for p, _ in dated]
        ) if dated else None
    )
    pager = _table_page(request, _sorted_rows(table.rows, sort), anchor="window-leaderboard")
    per_model_pager = _table_page(request, per_model, param="per_model_page", anchor="own-cutoff")
    context = {
        "table": table,
        "rows": pager.rows,
        "pager": pager,
        "sort": {"column": sort.column, "direction": sort.direction},
        "params": params,
        "notices": notices,
        "per_model": per_model_pager.rows,
        "per_model_pager": per_model_pager,
        "few": boards.FEW_PAPERS,
        "papers_json": papers_json,
        "undated": undated,
        "timeline": timeline,
        "chart": _ci_chart(pager.rows),
        "date_from": date_from,
        "date_to": date_to,
        "min_date": dated and min(d for _, d in dated),
        "max_date": dated and max(d for _, d in dated),
        "window_papers": [(p, table.paper_dates.get(p)) for p in table.papers],
    }
    return _page(request, "leaderboard/contamination.html", context, nav="contamination", release=release)


def errors(request: HttpRequest) -> HttpResponse:
    release = _release(request)
    notices: list[str] = []
    with_paper = _bool_param(request, "with_paper", notices)
    data = boards.error_categories(release=release, with_paper=with_paper)
    if _wants_csv(request):
        return _csv(f"error-categories-{release.slug}.csv", lb_csv.error_categories_csv(data))
    pager = _table_page(request, data.rows, anchor="errors-table")
    chart = (
        charts.error_stack_figure(
            models=[r["name"] for r in pager.rows], counts={c: [r["counts"][c] for r in pager.rows] for c in data.categories}
        ) if pager.rows and data.categories else None
    )
    context = {"data": data, "rows": pager.rows, "pager": pager, "chart": chart, "with_paper": with_paper,
               "notices": notices, "imported_failure": IMPORTED_FAILURE, "imported_note": IMPORTED_NOTE}
    return _page(request, "leaderboard/errors.html", context, nav="errors", release=release)


def cost(request: HttpRequest) -> HttpResponse:
    """Cost per snippet against scaled pass rate, with the Pareto front."""
    release = _release(request)
    points, without = boards.cost_vs_score(release=release)
    chart = charts.cost_score_figure(
        names=[p.name for p in points], costs=[p.cost for p in points], scores=[p.scaled_pass_rate for p in points],
        measured=[p.measured for p in points], front=[p.on_front for p in points],
    ) if points else None
    context = {"points": points, "without": without, "chart": chart, "tokens": boards.LISTED_TOKENS}
    return _page(request, "leaderboard/cost.html", context, nav="cost", release=release)


def hardest_snippets(request: HttpRequest) -> HttpResponse:
    """Snippets by how many models pass them, hardest first, each linked to its page."""
    release = _release(request)
    data = hardest.hardest_snippets(release=release)
    pager = _table_page(request, data.snippets, anchor="hardest-table")
    context = {"data": data, "rows": pager.rows, "pager": pager, "named_up_to": hardest.NAMED_UP_TO}
    return _page(request, "leaderboard/hardest.html", context, nav="hardest", release=release)


def ablation(request: HttpRequest) -> HttpResponse:
    release = _release(request)
    rows = boards.paper_ablation(release=release)
    if _wants_csv(request):
        return _csv(f"paper-ablation-{release.slug}.csv", lb_csv.ablation_csv(rows))
    pager = _table_page(request, rows, anchor="ablation-table")
    shown = pager.rows
    chart = (
        charts.ablation_figure(names=[r.name for r in shown], deltas=[r.diff for r in shown],
                               lows=[r.ci_low for r in shown], highs=[r.ci_high for r in shown])
        if shown else None
    )
    return _page(request, "leaderboard/ablation.html", {"rows": shown, "pager": pager, "chart": chart}, nav="ablation",
                 release=release)


def model_search(request: HttpRequest) -> HttpResponse:
    """Models found by part of their name (the header's search box)."""
    query = (request.GET.get("q") or "").strip()[:200]
    hits = compare.models_search(query=query)
    return _page(request, "leaderboard/model_search.html", {"query": query, "hits": hits}, nav="models")


def models_compare(request: HttpRequest) -> HttpResponse:
    """Two or more models of a release side by side: figures, per paper, per snippet, significance."""
    release = _release(request)
    keys = [k for value in request.GET.getlist("models") for k in value.split(",") if k.strip()]
    keys = [k.strip() for k in keys]
    comparison = compare.models_compare(release=release, keys=keys) if keys else None
    board = boards.leaderboard_rows(release=release)
    choices = [(r.model_key, r.name) for r in board.rows]
    chosen = comparison and [m["key"] for m in comparison.models]
    return _page(request, "leaderboard/compare.html", {
        "comparison": comparison, "choices": choices, "chosen": chosen or keys, "max": compare.COMPARE_MAX,
    }, nav="compare", release=release)


def api_reference(request: HttpRequest) -> HttpResponse:
    """The read and submissions API's reference, drawn in the browser from the OpenAPI document."""
    return _page(request, "leaderboard/api_reference.html", {"spec_url": reverse("leaderboard_api:openapi")}, nav="api")


def releases(request: HttpRequest) -> HttpResponse:
    items = release_info.releases_list()
    if _wants_csv(request):
        return _csv("releases.csv", lb_csv.releases_csv(items))
    return _page(request, "leaderboard/releases.html", {"items": items}, nav="releases")


def release_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """The permalink of a release: what it contains, its hash and how to cite it."""
    release = _release(request, slug)
    info = next((r for r in release_info.releases_list(include_drafts=not release.frozen) if r.slug == release.slug),
                None)
    papers = list(
        ReleasePaper.objects.filter(release=release).select_related("paper").order_by("paper__paper_id")
    )
    if _wants_csv(request):
        return _csv(f"release-{release.slug}-papers.csv", lb_csv.release_papers_csv(papers))
    permalink = request.build_absolute_uri(reverse("leaderboard:release_detail", args=[release.slug]))
    scorability = release_scorability(release=release, release_papers=papers)
    reasons = {row["paper"]: row["reason"] for row in scorability.not_scorable}
    return _page(request, "leaderboard/release_detail.html", {
        "info": info, "papers": [(rp, reasons.get(rp.paper.paper_id, "")) for rp in papers], "permalink": permalink,
        "scorability": scorability, "succession": release_succession(release=release),
        "submissions_closed": release_closed_reason(release=release) if release.frozen else "",
    }, nav="releases", release=release)


def _release_with_tasks(request: HttpRequest, slug: str) -> Release:
    """The release, when some paper of it has its code here (else a 404: no task to download; a
    held-out release's tasks are staff's only)."""
    release = _release(request, slug, content=True)
    if not ReleasePaper.objects.filter(release=release).exclude(folder="").exists():
        raise Http404(f"Release {release.name} has no paper with its code on this site: no task to download.")
    return release


def release_tasks(request: HttpRequest, slug: str) -> StreamingHttpResponse:
    """The release's tasks as JSON lines, the rows ``python -m benchmark_core tasks`` writes;
    ``?without_paper=1`` for the prompts without the paper text."""
    release = _release_with_tasks(request, slug)
    with_paper = not _bool_param(request, "without_paper", [], default=False)
    rows = (json.dumps(row, ensure_ascii=False) + "\n" for row in paper_files.release_tasks(release=release,
                                                                                       with_paper=with_paper))
    response = StreamingHttpResponse(rows, content_type="application/x-ndjson; charset=utf-8")
    suffix = "" if with_paper else "-without-paper"
    response["Content-Disposition"] = f'attachment; filename="tasks-{release.slug}{suffix}.jsonl"'
    return response


def release_tasks_dataset(request: HttpRequest, slug: str, part: str = "parquet") -> HttpResponse:
    """The release's tasks as a dataset: one Parquet row per snippet with both prompts (``tasks --format
    parquet``), or (``part="card"``) its dataset card, Markdown with the Hugging Face hub's YAML header."""
    from benchmark_core.problemset import ProblemSetError

    release = _release_with_tasks(request, slug)
    try:
        data, card = paper_files.release_dataset(release=release)
    except ProblemSetError as exc:  # a copy gone or damaged on this host: say so, not a server error
        raise Http404(f"The papers' files of release {release.name} cannot be read on this site: "
                      f"{exc.problems[0] if exc.problems else exc}") from None
    if part == "card":
        response = HttpResponse(card, content_type="text/markdown; charset=utf-8")
        name = "README.md"
    else:
        response = HttpResponse(data, content_type="application/vnd.apache.parquet")
        name = f"tasks-{release.slug}.parquet"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


def model_page(request: HttpRequest, key: str) -> HttpResponse:
    release = _release(request)
    try:
        detail = details.model_detail(key=key, release=release, viewer=request.user)
    except LLMModel.DoesNotExist:
        # answered, not raised: the page cache renders for an anonymous copy first, and an answer
        # lets it see that this one looked at the visitor (a private model's owner gets it rendered)
        return page_not_found(request, Http404(f"No model {key!r}."))
    if _wants_csv(request):
        return _csv(f"model-{detail.model.key.replace('/', '_')}-per-paper.csv", lb_csv.model_per_paper_csv(detail))
    per_model = next((r for r in boards.contamination_per_model(release=release) if r.model_key == key), None)
    context = {"detail": detail, "model": detail.model, "contamination": per_model}
    return _page(request, "leaderboard/model.html", context, nav="leaderboard", release=release)


def paper_page(request: HttpRequest, paper_id: str) -> HttpResponse:
    release = _paper_release(request, paper_id)
    try:
        detail = details.paper_detail(release=release, paper_id=paper_id)
        board = boards.paper_leaderboard(release=release, paper_id=paper_id)
    except Paper.DoesNotExist:
        raise Http404(f"No paper {paper_id!r} in {release.name}.") from None
    if _wants_csv(request):
        if request.GET.get("table") == "snippets":
            return _csv(f"snippets-{paper_id}-{release.slug}.csv", lb_csv.paper_snippets_csv(detail.snippets))
        return _csv(f"paper-{paper_id}-{release.slug}.csv", lb_csv.leaderboard_table_csv(board.rows))
    code_shown = release_content_visible(release=release, viewer=request.user)
    nodes = [
        {"node": n, "code_html": highlight_code(n.code, filename=n.file) if n.code and code_shown else ""}
        for n in detail.snippets
    ]
    context = {
        "detail": detail,
        "paper": detail.paper,
        "summary_html": render_markdown(detail.paper.summary),
        "nodes": nodes,
        "board": board,
        "board_pager": _table_page(request, board.rows, anchor="paper-leaderboard"),
        "notices": [] if release.is_default or request.GET.get("release") else [
            f"{paper_id} is not in the default release: shown from {release.name}, the latest release that has it."],
        "held_out": not code_shown,
    }
    return _page(request, "leaderboard/paper.html", context, nav="per_paper", release=release)


def _drill_submission(request: HttpRequest, drill: details.SnippetDrilldown | None) -> Any:
    """The submission a drill-down's evaluation came from, when the visitor may open it (its owner,
    reviewers): the drill-down links back to it."""
    submission = getattr(drill.evaluation, "submission", None) if drill is not None else None
    if submission is None or not submission_can_view(submission=submission, user=request.user):
        return None
    return submission


def _todo_lines(masked: str, name: str) -> list[int]:
    """1-based lines of the two TODO comments that stand for the masked snippet."""
    marker = f'# TODO: Implement block "{name}"'
    for number, line in enumerate(masked.splitlines(), start=1):
        if line.strip() == marker:
            return [number, number + 1]
    return []


def snippet_page(request: HttpRequest, paper_id: str) -> HttpResponse:
    """One snippet: reference code, the masked file the model saw, every model's verdict, and with
    ?model= a drill-down into that model's completion (diff against the reference) and test output.
    A held-out release's snippets are staff's only (their reference and masked file are the task),
    but for the owner of an evaluation, who sees its completions and test output there, without them."""
    release = _paper_release(request, paper_id)
    code_shown = release_content_visible(release=release, viewer=request.user)
    name = (request.GET.get("name") or "").strip()
    file = (request.GET.get("file") or "").strip() or None
    model_key = (request.GET.get("model") or "").strip()
    notices: list[str] = []
    with_paper = _bool_param(request, "with_paper", notices)
    if not name:
        raise Http404("Which snippet? Give ?name=.")
    qs = Snippet.objects.filter(release=release, paper__paper_id=paper_id, name=name).select_related("paper", "parent")
    if file:
        qs = qs.filter(file=file)
    found = list(qs[:2])
    if len(found) != 1:
        raise Http404(f"No snippet {name!r} in paper {paper_id!r} of {release.name}.")
    snippet = found[0]
    evaluation_id = (request.GET.get("evaluation") or "").strip()
    if not code_shown:  # held out: only an owner's look at their own evaluation (never the reference)
        try:
            own = details.evaluation_visible(evaluation_id=int(evaluation_id), user=request.user) \
                if evaluation_id.isdigit() else None
        except Evaluation.DoesNotExist:
            own = None
        if own is None or own.release_id != release.id:
            raise Http404(f"Release {release.name} is held out: its snippets are not public.")
        model_key = ""
    masked = paper_files.snippet_masked_view(release=release, paper_id=paper_id, snippet=snippet.name,
                                             file=snippet.file or None) if code_shown else ""
    drill = None
    if model_key or evaluation_id:
        try:
            # ?evaluation= names one evaluation: a public one, or the visitor's own private submission's
            own = (details.evaluation_visible(evaluation_id=int(evaluation_id), user=request.user)
                   if evaluation_id.isdigit() else None)
            if evaluation_id and own is None:
                raise Evaluation.DoesNotExist(evaluation_id)
            drill = details.snippet_drilldown(
                release=release, paper_id=paper_id, snippet=snippet.name, model_key=model_key,
                file=snippet.file or None, with_paper=with_paper, evaluation=own,
            )
        except (LLMModel.DoesNotExist, Evaluation.DoesNotExist):
            raise Http404(f"No public evaluation of model {model_key or evaluation_id!r} on {release.name}.") from None
    results = details.snippet_verdicts(snippet, with_paper=with_paper)
    if _wants_csv(request):
        return _csv(f"snippet-{paper_id}-{snippet.pk}.csv", lb_csv.snippet_verdicts_csv(results))
    samples = []
    if drill is not None:
        for r in drill.results:
            # diff what the harness inserted (the answer's last fenced block), not the prose around it
            inserted = "\n".join(completion_lines(r["completion"])) if r["completion"] else ""
            samples.append({
                **r,
                "inserted": inserted,
                "diff_rows": diff_rows(snippet.code, inserted) if code_shown else None,
                "completion_html": highlight_code(inserted, filename=snippet.file) if inserted else "",
                "raw_differs": inserted.strip() != (r["completion"] or "").strip(),
            })
    pager = _table_page(request, results, anchor="verdicts-table")
    context = {
        "paper": snippet.paper,
        "snippet": snippet,
        "code_html": highlight_code(snippet.code, filename=snippet.file) if snippet.code and code_shown else "",
        "masked_html": highlight_code(masked, filename=snippet.file, marked=_todo_lines(masked, snippet.name)) if masked else "",
        "results": pager.rows,
        "imported_rows": any(r["imported"] for r in pager.rows),
        "imported_note": IMPORTED_NOTE,
        "pager": pager,
        "drill": drill,
        "drill_submission": _drill_submission(request, drill),
        "samples": samples,
        "card": details.evaluation_card(drill.evaluation) if drill is not None else None,
        "with_paper": with_paper,
        "notices": notices,
        "held_out": not code_shown,
    }
    return _page(request, "leaderboard/snippet.html", context, nav="per_paper", release=release)
