"""JSON API under /api/v1/ (read side). Thin: parse parameters, call a selector, serialize.

Errors are JSON too: unknown release/paper/model -> 404 {"error"}, bad parameters -> 400
{"error", "messages"}. Table endpoints answer CSV with ?format=csv. Responses of the table
endpoints are cached under the release's data_version, so a write makes them stale at once.
"""
from __future__ import annotations

import datetime as dt
import hashlib
import json
from typing import Any, Callable

from django.conf import settings
from django.core.cache import cache
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.urls import reverse
from django.utils.functional import SimpleLazyObject
from django.utils.http import quote_etag
from django.views.decorators.http import require_GET
from django.views.defaults import bad_request as bad_request_page
from django.views.defaults import page_not_found

from accounts.services import api_token_user
from catalog.visibility import release_get_recent

from catalog.models import Evaluation, LLMModel, Paper, Release, Snippet

from . import csv as lb_csv
from . import openapi, page_cache
from .query import leaderboard_params_parse
from .selectors import boards, caching, compare, details, release_info

__all__ = [
    "bad_request",
    "not_found",
    "ping",
    "releases",
    "leaderboard",
    "paper_leaderboard",
    "paper_detail",
    "model_detail",
    "heatmap",
    "error_categories",
    "paper_ablation",
    "contamination",
    "evaluation_outputs",
]

FORMATS = ("json", "csv")
CACHE_SECONDS = 600


class BadRequest(Exception):
    def __init__(self, messages: list[str]):
        self.messages = messages
        super().__init__("; ".join(messages))


def _r2(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _iso(value: dt.date | None) -> str | None:
    return value.isoformat() if value else None


def _error(status: int, message: str, messages: list[str] | None = None) -> JsonResponse:
    body: dict[str, Any] = {"error": message}
    if messages is not None:
        body["messages"] = messages
    return JsonResponse(body, status=status)


def not_found(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The site's 404: JSON under /api/ (a URL no route matches), the 404 page elsewhere."""
    if request.path.startswith("/api/"):
        return _error(404, f"no such API endpoint or object: {request.path[:200]}")
    return page_not_found(request, exception)


def bad_request(request: HttpRequest, exception: Exception | None = None) -> HttpResponse:
    """The site's 400: JSON under /api/ (too many fields or file parts, fields too large: Django's
    request limits, whichever view or middleware met them), the 400 page elsewhere."""
    if not request.path.startswith("/api/"):
        return bad_request_page(request, exception)
    if isinstance(exception, TooManyFieldsSent):
        return _error(400, f"too many fields: a request may hold at most {settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} "
                           "form fields and query parameters together")
    if isinstance(exception, TooManyFilesSent):
        return _error(400, f"too many file parts: a request may hold at most {settings.DATA_UPLOAD_MAX_NUMBER_FILES} "
                           "(the predictions are one 'file' part)")
    if isinstance(exception, RequestDataTooBig):
        return _error(413, f"the request's fields are larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024} kB "
                           "together")
    return _error(400, "the request could not be understood")


def _release_json(release: Release) -> dict[str, Any]:
    return {
        "name": release.name,
        "slug": release.slug,
        "status": release.status,
        "content_hash": release.content_hash,
        "date": _iso(release.release_date),
        "held_out": release.held_out,
    }


def _viewer(request: HttpRequest) -> Any:
    """The user of the session or of an API token ('Authorization: Token ...'), else the anonymous one."""
    return api_token_user(request) or request.user


def _release(request: HttpRequest) -> Release:
    """?release= (a slug or the display name), else the default release; a draft for staff only."""
    slug = (request.GET.get("release") or "").strip() or None
    # the token is looked up only when a draft is asked for
    return release_get_recent(slug=slug, viewer=SimpleLazyObject(lambda: _viewer(request)))


def _format(request: HttpRequest) -> str:
    fmt = (request.GET.get("format") or "json").strip().lower()
    if fmt not in FORMATS:
        raise BadRequest([f"format={fmt!r} is not supported (use json or csv)"])
    return fmt


def _json_only(request: HttpRequest) -> None:
    if _format(request) != "json":
        raise BadRequest(["this endpoint answers JSON only (CSV: the table endpoints)"])


def _respond(
    request: HttpRequest,
    *,
    key: tuple,
    release: Release | None,
    build_json: Callable[[], Any],
    build_csv: Callable[[], str] | None = None,
    filename: str = "table.csv",
) -> HttpResponse:
    """Serialize once per (endpoint, release data_version, parameters); cache the bytes."""
    fmt = _format(request)
    if fmt == "csv" and build_csv is None:
        raise BadRequest(["this endpoint has no CSV form"])
    # a draft's tables are staff's: never kept by a proxy or a shared cache
    shared = release is None or release.frozen
    version = (caching.release_version(release),) if release is not None else ("-",)
    raw_key = json.dumps([*key, *version, fmt], default=str)
    cache_key = "rcb:api:" + hashlib.sha256(raw_key.encode()).hexdigest()[:40]
    # the key names the release's version and the parameters: it is the ETag (conditional GET, proxies)
    etag = quote_etag(cache_key.rsplit(":", 1)[1][:32])
    if (unchanged := page_cache.not_modified(request, etag=etag)) is not None:
        return page_cache.public_response_headers(unchanged, etag=etag, shared=shared)
    hit = cache.get(cache_key)
    if hit is None:
        if fmt == "csv":
            hit = (build_csv().encode("utf-8"), "text/csv; charset=utf-8")
        else:
            hit = (json.dumps(build_json(), separators=(",", ":")).encode("utf-8"), "application/json")
        cache.set(cache_key, hit, CACHE_SECONDS)
    body, content_type = hit
    response = HttpResponse(body, content_type=content_type)
    if fmt == "csv":
        response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return page_cache.public_response_headers(response, etag=etag, shared=shared)


def unknown_parameters(request: HttpRequest) -> list[str]:
    """A message for each query parameter that the route's operation does not document (the OpenAPI
    document's, ``openapi.READ_QUERY``): a filter misspelled or sent to an endpoint without it
    (``/contamination?cutoff=``) would otherwise be ignored, and the figures read as filtered."""
    match = request.resolver_match
    known = openapi.READ_QUERY.get(match.url_name if match is not None else "")
    if known is None:
        return []
    return [f"unknown parameter {name!r}" for name in sorted(set(request.GET) - known)]


def api_view(func: Callable[..., HttpResponse] | None = None, *,
             check: Callable[[Any], list[str]] | None = None) -> Any:
    """GET only; lookups that fail become 404 JSON, bad parameters 400 JSON: a parameter the
    operation does not document, and what ``check(request.GET)`` finds wrong (every problem listed
    in one answer)."""
    if func is None:
        return lambda f: api_view(f, check=check)

    @require_GET
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            messages = (check(request.GET) if check is not None else []) + unknown_parameters(request)
            if messages:
                raise BadRequest(messages)
            return func(request, *args, **kwargs)
        except Release.DoesNotExist:
            wanted = request.GET.get("release")
            return _error(404, f"unknown release {wanted!r}" if wanted else "no release has been loaded yet")
        except Paper.DoesNotExist as exc:
            return _error(404, str(exc) or "unknown paper")
        except Snippet.DoesNotExist as exc:
            return _error(404, str(exc) or "unknown snippet")
        except LLMModel.DoesNotExist:
            return _error(404, f"unknown model {kwargs.get('key')!r}")
        except Evaluation.DoesNotExist as exc:
            return _error(404, str(exc) or "no public evaluation")
        except BadRequest as exc:
            return _error(400, str(exc), exc.messages)

    wrapper.__name__ = func.__name__
    wrapper.__doc__ = func.__doc__
    return wrapper


def _row_json(r: boards.LeaderboardRow, *, previous: Release | None = None) -> dict[str, Any]:
    """One row; with ``previous`` (the release's predecessor) the model's figure there too."""
    return {
        "tier": r.tier,
        "model": r.model_key,
        "name": r.name,
        "organisation": r.organisation,
        "open_weights": r.open_weights,
        "scaled_pass_rate": _r2(r.scaled_pass_rate),
        "pass_rate": _r2(r.pass_rate),
        "ci95": [_r2(r.ci_low), _r2(r.ci_high)],
        "ranked": r.ranked,
        "unranked_reason": r.unranked_reason or None,  # why not ranked; null when ranked
        "coverage": _r2(r.coverage),
        "snippets": r.snippets,
        "papers": r.papers,
        "knowledge_cutoff": r.knowledge_cutoff,
        "input_cost": r.input_cost,
        "output_cost": r.output_cost,
        "cost_per_snippet": r.cost_per_snippet,  # USD, measured by the run card (None: not measured)
        "samples": r.samples,
        "baseline": r.baseline or None,
        "verified": r.verified,
        "run_here": r.run_here,
        "source": r.source,
        "with_paper": r.with_paper,
        "previous_release": previous.slug if previous is not None else None,
        "previous_scaled_pass_rate": _r2(r.previous_scaled_pass_rate),
        "succession": r.succession or None,  # "rescored" / "carried" from the previous release
        # ranked on the release's scorable subset: the figures over the whole release (else None)
        "full_scaled_pass_rate": _r2(r.full_scaled_pass_rate),
        "full_pass_rate": _r2(r.full_pass_rate),
    }


# --------------------------------------------------------------------------- endpoints
@api_view
def ping(request: HttpRequest) -> HttpResponse:
    """A trivial endpoint: the baseline of bench/web_load."""
    return JsonResponse({"ok": True})


@api_view
def model_search(request: HttpRequest) -> HttpResponse:
    """Models found by part of their name (compare.models_search)."""
    _json_only(request)
    hits = compare.models_search(query=request.GET.get("q", "")[:200])
    return JsonResponse({"models": [{"model": h.key, "name": h.name, "organisation": h.organisation,
                                     "releases": h.releases} for h in hits]})


@api_view
def releases(request: HttpRequest) -> HttpResponse:
    """Every release with counts and citation text."""
    items = [
        {
            "name": r.name,
            "slug": r.slug,
            "status": r.status,
            "content_hash": r.content_hash,
            "date": _iso(r.release_date),
            "default": r.is_default,
            "held_out": r.held_out,
            "papers": r.papers,
            "snippets": r.snippets,
            "models": r.models,
            "citation": r.citation,
            # what this site can score now; the others with the reason (no code here, a failing environment)
            "scorable_papers": r.scorable_papers,
            "not_scorable": r.not_scorable,
            # a held-out release's tasks are staff's only: none to download for the public
            "tasks_url": request.build_absolute_uri(reverse("leaderboard:release_tasks", args=[r.slug]))
            if r.scorable_papers and not r.held_out else None,
            "tasks_parquet_url": request.build_absolute_uri(reverse("leaderboard:release_tasks_parquet", args=[r.slug]))
            if r.scorable_papers and not r.held_out else None,
        }
        for r in release_info.releases_list()
    ]
    return JsonResponse({"releases": items})


@api_view(check=lambda query: leaderboard_params_parse(query)[1])
def leaderboard(request: HttpRequest) -> HttpResponse:
    """The leaderboard of a release: ?release=&view=overall|contamination_safe&cutoff=&from=&to=
    &open_weights=&organisation=&with_paper=&run_here=&format=json|csv."""
    params, _messages = leaderboard_params_parse(request.GET)  # (none: api_view's check)
    release = _release(request)

    def table() -> boards.LeaderboardTable:
        return boards.leaderboard_rows(release=release, **params.as_kwargs())

    def as_json() -> dict[str, Any]:
        t = table()
        return {
            "release": _release_json(release),
            "view": t.view,
            "with_paper": t.with_paper,
            "cutoff": _iso(t.cutoff),
            "from": _iso(t.date_from),
            "to": _iso(t.date_to),
            "papers": t.papers,
            "snippets": t.snippets,
            "total_weight": t.total_weight,
            "warning": t.warning or None,
            "messages": [],
            # only part of the release can be scored here: "papers" is that subset, rows rank on it
            "scorable_subset": t.scorable_subset,
            "not_scorable": t.not_scorable,
            "release_papers": t.release_papers,
            "release_snippets": t.release_snippets,
            "previous_release": _release_json(t.previous_release) if t.previous_release else None,
            "rows": [_row_json(r, previous=t.previous_release) for r in t.rows],
        }

    return _respond(
        request,
        key=("leaderboard", sorted(params.as_kwargs().items())),
        release=release,
        build_json=as_json,
        build_csv=lambda: lb_csv.leaderboard_table_csv(table().rows),
        filename=f"leaderboard-{release.slug}-{params.view}.csv",
    )


@api_view
def paper_leaderboard(request: HttpRequest, paper_id: str) -> HttpResponse:
    """Every model's figures on one paper."""
    release = _release(request)

    def data() -> boards.PaperLeaderboard:
        return boards.paper_leaderboard(release=release, paper_id=paper_id)

    data()  # 404 before anything is cached
    return _respond(
        request,
        key=("paper", paper_id),
        release=release,
        build_json=lambda: (lambda d: {
            "release": _release_json(release),
            "paper": _paper_json(d.paper),
            "snippets": d.snippets,
            "total_weight": d.total_weight,
            "rows": [_row_json(r) for r in d.rows],
        })(data()),
        build_csv=lambda: lb_csv.leaderboard_table_csv(data().rows),
        filename=f"paper-{paper_id}-{release.slug}.csv",
    )


def _paper_json(p: Paper) -> dict[str, Any]:
    return {
        "id": p.paper_id,
        "title": p.title,
        "venue": p.venue,
        "arxiv_abs": p.arxiv_abs,
        "arxiv_date": _iso(p.arxiv_date),
        "arxiv_v1_date": _iso(p.arxiv_v1_date),
        "github_url": p.github_url,
        "first_commit_date": _iso(p.first_commit_date),
        "last_commit_date": _iso(p.last_commit_date),
    }


@api_view
def paper_detail(request: HttpRequest, paper_id: str) -> HttpResponse:
    """A paper's metadata and snippet tree with each snippet's pass rate across models."""
    _json_only(request)
    release = _release(request)
    d = details.paper_detail(release=release, paper_id=paper_id)
    by_id = {s.id: s.name for s in d.snippets}
    return JsonResponse(
        {
            "release": _release_json(release),
            "paper": _paper_json(d.paper),
            "content_hash": d.content_hash,
            "has_code": bool(d.folder),
            "total_weight": d.total_weight,
            "snippets": [
                {
                    "name": s.name,
                    "file": s.file,
                    "parent": by_id.get(s.parent_id),
                    "depth": s.depth,
                    "weight": s.weight,
                    "lines": [s.start_line, s.end_line] if s.start_line else None,
                    "pass_rate": _r2(s.pass_rate),
                    "runs": s.runs,
                }
                for s in d.snippets
            ],
        }
    )


@api_view
def model_detail(request: HttpRequest, key: str) -> HttpResponse:
    """A model and its public evaluations, each with its reproducibility card."""
    _json_only(request)
    release = _release(request) if request.GET.get("release") else None
    d = details.model_detail(key=key, release=release, viewer=_viewer(request))
    m = d.model
    return JsonResponse(
        {
            "model": m.key,
            "name": m.display_name,
            "organisation": m.organisation,
            "open_weights": m.open_weights,
            "knowledge_cutoff": m.knowledge_cutoff,
            "knowledge_cutoff_date": _iso(m.knowledge_cutoff_date),
            "input_cost": m.input_cost,
            "output_cost": m.output_cost,
            "baseline": m.baseline or None,
            "links": m.links,
            "evaluations": [
                {
                    "id": e.id,
                    "release": e.release_slug,
                    "release_name": e.release_name,
                    "release_hash": e.release_hash,
                    "with_paper": e.with_paper,
                    "samples": e.samples,
                    "decoding": e.decoding,
                    "prompt_version": e.prompt_version,
                    "harness_version": e.harness_version,
                    "run_card": e.run_card,
                    "source": e.source,
                    "verified": e.verified,
                    "run_here": e.run_here,
                    "scaled_pass_rate": _r2(e.scaled_pass_rate),
                    "pass_rate": _r2(e.pass_rate),
                    "ci95": [_r2(e.ci_low), _r2(e.ci_high)],
                    "scaled_std": _r2(e.scaled_std),
                    "pass_std": _r2(e.pass_std),
                    "coverage": _r2(e.coverage),
                    "categories": e.categories,
                    "per_paper": {
                        p: {k: (_r2(v) if isinstance(v, float) else v) for k, v in fig.items()}
                        for p, fig in e.per_paper.items()
                    },
                    "pass_at_k": e.pass_at_k,
                }
                for e in d.evaluations
            ],
        }
    )


@api_view
def heatmap(request: HttpRequest) -> HttpResponse:
    """Model x paper scaled pass rates."""
    release = _release(request)

    def as_json() -> dict[str, Any]:
        h = boards.heatmap(release=release)
        return {
            "release": _release_json(release),
            "papers": h.papers,
            "models": [{"model": k, "name": n} for k, n in h.models],
            "values": [[_r2(v) for v in row] for row in h.values],
        }

    return _respond(
        request, key=("heatmap",), release=release, build_json=as_json,
        build_csv=lambda: lb_csv.heatmap_csv(boards.heatmap(release=release)),
        filename=f"heatmap-{release.slug}.csv",
    )


@api_view
def error_categories(request: HttpRequest) -> HttpResponse:
    """Failures by category per model."""
    release = _release(request)

    def as_json() -> dict[str, Any]:
        e = boards.error_categories(release=release)
        return {"release": _release_json(release), "categories": e.categories, "rows": e.rows}

    return _respond(
        request, key=("errors",), release=release, build_json=as_json,
        build_csv=lambda: lb_csv.error_categories_csv(boards.error_categories(release=release)),
        filename=f"error-categories-{release.slug}.csv",
    )


@api_view
def paper_ablation(request: HttpRequest) -> HttpResponse:
    """With-paper minus without-paper scaled pass rate per model."""
    release = _release(request)

    def as_json() -> dict[str, Any]:
        rows = boards.paper_ablation(release=release)
        return {
            "release": _release_json(release),
            "rows": [
                {"model": r.model_key, "name": r.name, "with_paper": _r2(r.with_paper),
                 "without_paper": _r2(r.without_paper), "diff": _r2(r.diff), "ci95": [_r2(r.ci_low), _r2(r.ci_high)]}
                for r in rows
            ],
        }

    return _respond(
        request, key=("ablation",), release=release, build_json=as_json,
        build_csv=lambda: lb_csv.ablation_csv(boards.paper_ablation(release=release)),
        filename=f"paper-ablation-{release.slug}.csv",
    )


@api_view
def evaluation_outputs(request: HttpRequest, evaluation_id: int) -> HttpResponse:
    """Raw outputs of a public evaluation (the owner's private ones too), one JSON object per line:
    paper, file, snippet, sample, verdict, category, test output and the completion."""
    _json_only(request)
    ev = details.evaluation_visible(evaluation_id=evaluation_id, user=_viewer(request))  # session or token
    header = {"evaluation": ev.pk, "model": ev.model.key, "release": ev.release.slug,
              "release_hash": ev.release.content_hash, "with_paper": ev.with_paper, "source": ev.source}
    lines = (json.dumps({**header, **row}, ensure_ascii=False) + "\n" for row in details.evaluation_outputs(evaluation=ev))
    response = StreamingHttpResponse(lines, content_type="application/x-ndjson; charset=utf-8")
    name = f"outputs-{ev.release.slug}-{ev.model.key.replace('/', '_')}-{ev.pk}.jsonl"
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    # everyone's only when anyone may fetch it (evaluation_visible's public case)
    everyone = ev.is_public and not ev.hidden and ev.release.frozen
    response["Cache-Control"] = "public, max-age=0" if everyone else "private, no-cache"
    return response


@api_view
def contamination(request: HttpRequest) -> HttpResponse:
    """Each model's figures on the papers first committed after its own knowledge cutoff."""
    release = _release(request)

    def as_json() -> dict[str, Any]:
        rows = boards.contamination_per_model(release=release)
        return {
            "release": _release_json(release),
            "rows": [
                {"model": r.model_key, "name": r.name, "knowledge_cutoff": r.knowledge_cutoff,
                 "papers": r.papers, "paper_count": len(r.papers), "snippets": r.snippets,
                 "scaled_pass_rate": _r2(r.scaled_pass_rate), "pass_rate": _r2(r.pass_rate),
                 "overall_scaled_pass_rate": _r2(r.overall_scaled_pass_rate)}
                for r in rows
            ],
        }

    return _respond(
        request, key=("contamination",), release=release, build_json=as_json,
        build_csv=lambda: lb_csv.contamination_csv(boards.contamination_per_model(release=release)),
        filename=f"contamination-{release.slug}.csv",
    )
