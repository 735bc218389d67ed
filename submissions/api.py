"""JSON API of the submissions: POST /api/v1/submissions (token auth), GET /api/v1/submissions/<id>.

Upload as multipart (a ``file`` part plus metadata fields) or as a JSON-lines body with the
metadata in the query string (``model_name``, ``release``, ``organisation``, ``open_weights``,
``knowledge_cutoff``, ``link``, ``without_paper``, ``temperature``, ``top_p``, ``max_tokens``,
``run_card``: the JSON run card of ``python -m benchmark_core generate``).
"""
from __future__ import annotations

import io
import json
import re
from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, JsonResponse
from django.http.multipartparser import MultiPartParser, MultiPartParserError
from django.utils.http import parse_header_parameters
from django.urls import reverse
from django.views.decorators.csrf import csrf_exempt

from accounts.roles import user_is_reviewer
from accounts.services import api_token_user
from benchmark_core.generate import RunCardError, card_parse
from benchmark_core.predictions import text_problem
from catalog.models import Release
from catalog.tables import PageNotFound, table_page, table_rows
from catalog.ranking import release_scorability
from catalog.visibility import release_get

from . import lifecycle, selectors
from . import upload as uploads
from .forms import SubmissionMetaForm
from .models import PredictionSubmission, Status

__all__ = ["submissions_endpoint", "submission_endpoint", "submission_publish_endpoint", "queue_endpoint",
           "submission_payload", "runs_endpoint", "run_endpoint", "run_cancel_endpoint", "run_payload"]

_CHUNK = 1 << 20
_TRUE = ("1", "true", "yes", "on")


def _error(status: int, message: str, **extra: Any) -> JsonResponse:
    return JsonResponse({"error": message, **extra}, status=status)


def _read_body(request: HttpRequest, limit: int) -> tuple[bytes, int]:
    """Read at most ``limit`` + 1 bytes and drain the rest, so the client gets our answer, not a reset."""
    parts: list[bytes] = []
    size = 0
    while size <= limit:  # a WSGI stream may return less than asked for: read until EOF or past the limit
        chunk = request.read(min(_CHUNK, limit + 1 - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    if size > limit:
        while chunk := request.read(_CHUNK):
            size += len(chunk)
    return b"".join(parts), size


def _oversized_part(request: HttpRequest, body: bytes, *, cut: bool) -> str | None:
    """Which field of a multipart body is too large, in words; None when it is the file.

    The largest field beside the file, or, when the body was ``cut`` at the limit, the part it was cut in.
    """
    boundary = parse_header_parameters(request.META.get("CONTENT_TYPE", ""))[1].get("boundary", "")
    parts = []
    for part in body.split(b"--" + boundary.encode("latin-1"))[1:] if boundary else []:
        head, found, data = part.partition(b"\r\n\r\n")
        name = re.search(rb'\bname="([^"]*)"', head) if found else None
        if name is not None:
            parts.append((name.group(1).decode("utf-8", "replace")[:100], b"filename=" in head, len(data)))
    if not parts:
        return None
    name, is_file, size = parts[-1] if cut else max((p for p in parts if not p[1]), key=lambda p: p[2], default=parts[-1])
    if is_file:
        return None
    kb = settings.DATA_UPLOAD_MAX_MEMORY_SIZE // 1024
    return (f"the field {name!r} is too large ({size // 1024} kB or more): the fields beside the file may hold "
            f"{kb} kB together")


def _default_release() -> Release | None:
    """The site's default release when it is published (a draft is nobody's default to submit to)."""
    try:
        release = release_get()
    except Release.DoesNotExist:
        return None
    return release if release.status == Release.PUBLISHED else None


def submission_payload(request: HttpRequest, submission: PredictionSubmission, *, with_results: bool = False) -> dict:
    user = request.user if getattr(request, "user", None) and request.user.is_authenticated else None
    progress = selectors.submission_progress(submission=submission)
    payload: dict[str, Any] = {
        "id": submission.pk,
        "status": submission.status,
        "failure_reason": submission.failure_reason,
        "model_name": submission.model_name,
        "release": submission.release.slug,
        "with_paper": submission.with_paper,
        "samples": len(submission.sample_ids or [0]),
        "predictions": submission.predictions_count,
        "created_at": submission.created_at.isoformat(),
        "started_at": submission.started_at.isoformat() if submission.started_at else None,
        "finished_at": submission.finished_at.isoformat() if submission.finished_at else None,
        "published": submission.is_published,
        "publish_when_finished": submission.publish_when_finished,
        "progress": progress,
        # papers of the release this site cannot score (no job for them), with the reason
        "not_scorable": release_scorability(release=submission.release).not_scorable,
        "status_url": request.build_absolute_uri(reverse("submissions:api_submission", args=[submission.pk])),
        "url": request.build_absolute_uri(reverse("submissions:submission_detail", args=[submission.pk])),
    }
    ev = submission.evaluation
    if submission.status in (Status.FINISHED, Status.FAILED) and ev is not None and ev.computed_at:
        unranked_reason = selectors.submission_unranked_reason(submission=submission)
        payload["result"] = {
            "scaled_pass_rate": ev.scaled_pass_rate,
            "pass_rate": ev.pass_rate,
            "scaled_ci95": [ev.scaled_ci_low, ev.scaled_ci_high],
            "snippets_total": ev.snippets_total,
            "snippets_covered": ev.snippets_covered,
            "coverage": round(100.0 * ev.snippets_covered / ev.snippets_total, 2) if ev.snippets_total else 0.0,
            # as the release's board would rank it once published (on its scorable papers, if partial)
            "ranked": not unranked_reason,
            "unranked_reason": unranked_reason or None,
            # results the engine flagged; the evaluation is not ranked until a reviewer clears them
            "flagged_results": ev.flagged_results,
            "flags_cleared": ev.flags_cleared_at is not None,
            "categories": ev.categories,
            "verified": ev.verified,
            "hidden": ev.hidden,
            # a failed scoring's figures count what was not scored as failed: marked, with the counts
            **selectors.submission_result_completeness(submission=submission, progress=progress),
        }
    if user is not None and user_is_reviewer(user):
        payload["flags"] = submission.flags
    if with_results:
        payload["results"] = [
            {
                "paper": r["snippet__paper__paper_id"], "file": r["snippet__file"], "snippet": r["snippet__name"],
                "sample": r["sample"], "passed": r["passed"], "category": r["category"] or None,
                "seconds": r["seconds"], "output_tail": r["output_tail"], "flags": r["flags"] or [],
            }
            for r in selectors.submission_results(submission=submission)
        ]
    return payload


class _BadFields(Exception):
    """Metadata fields the upload form would refuse: field -> messages."""

    def __init__(self, message: str, fields: dict[str, list[str]]):
        super().__init__(message)
        self.message, self.fields = message, fields


def _run_card(source: Any) -> tuple[dict | None, str]:
    """The run card sent with the upload (JSON text), reduced to what the site keeps; or the problem."""
    raw = str(source.get("run_card", "") or "").strip()
    if not raw:
        return None, ""
    try:
        return card_parse(raw), ""
    except RunCardError as exc:
        return None, str(exc)


#: what an upload takes beside its file: query parameters of a body upload, the multipart body's parts
#: (or query parameters) of a multipart one. Any other name is refused: a misspelled ``without_paper``
#: would otherwise rank a run without the paper among those with it (leaderboard/openapi.py documents them)
UPLOAD_FIELDS = frozenset((*SubmissionMetaForm.base_fields, "release", "allow_partial", "publish", "run_card",
                           "file_name"))


def _upload_source(query: Any, parts: Any = None) -> tuple[Any, dict[str, list[str]]]:
    """The upload's fields (a multipart body's parts and the query's parameters together) and what
    is wrong with their names: unknown ones, one given both ways, ``file_name`` beside a file part
    (whose own name is the file's)."""
    problems: dict[str, list[str]] = {}
    source = query.copy()
    if parts is not None:
        for name in parts:
            if name in source:
                problems[name] = ["given both as a query parameter and as a part of the body: send it once"]
            source.setlist(name, parts.getlist(name))
        if "file_name" in source:
            problems["file_name"] = ["a multipart upload's file name is its 'file' part's own"]
    known = ", ".join(sorted(UPLOAD_FIELDS))
    for name in source:
        if name not in UPLOAD_FIELDS:
            problems[name] = [f"unknown field (an upload takes: {known})"]
    return source, problems


def _meta(source: Any, problems: dict[str, list[str]] | None = None) -> dict[str, Any]:
    """Validate the metadata with the upload form's own fields (same limits, same messages), with
    ``problems`` found before (the fields' names: ``_upload_source``) reported in the same answer."""
    values: dict[str, Any] = {name: source.get(name, "") for name in SubmissionMetaForm.base_fields}
    for name in ("open_weights", "without_paper"):
        values[name] = str(values[name]).strip().lower() in _TRUE
    form = SubmissionMetaForm(data=values)
    fields: dict[str, list[str]] = dict(problems or {})
    if not form.is_valid():
        fields.update({name: [str(m) for m in messages] for name, messages in form.errors.items()})
    for name in ("release", "file_name"):  # not form fields, but stored or looked up all the same
        why = text_problem(name, str(source.get(name, "")))
        if why:
            fields[name] = [why]
    run_card, card_problem = _run_card(source)
    if card_problem:
        fields["run_card"] = [card_problem]
    if fields:
        text = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in fields.items())
        raise _BadFields(f"invalid field(s), nothing was stored: {text}", fields)
    data = form.cleaned_data
    return {
        "model_name": data["model_name"],
        "organisation": data["organisation"],
        "open_weights": data["open_weights"],
        "knowledge_cutoff": data["knowledge_cutoff"],
        "link": data["link"],
        "with_paper": not data["without_paper"],
        "decoding": form.decoding(),
        "notes": data["notes"],
        "run_card": run_card,
    }


def _submission_summary(request: HttpRequest, submission: PredictionSubmission) -> dict[str, Any]:
    """A submission in a list: what it is and where it stands (the full record at its status_url)."""
    ev = submission.evaluation
    scored = ev is not None and ev.computed_at is not None
    return {
        "id": submission.pk,
        "status": submission.status,
        "model_name": submission.model_name,
        "release": submission.release.slug,
        "with_paper": submission.with_paper,
        "created_at": submission.created_at.isoformat(),
        "finished_at": submission.finished_at.isoformat() if submission.finished_at else None,
        "published": submission.is_published,
        "scaled_pass_rate": ev.scaled_pass_rate if scored else None,
        "pass_rate": ev.pass_rate if scored else None,
        "status_url": request.build_absolute_uri(reverse("submissions:api_submission", args=[submission.pk])),
        "url": request.build_absolute_uri(reverse("submissions:submission_detail", args=[submission.pk])),
    }


def _submissions_list(request: HttpRequest) -> JsonResponse:
    """The caller's own submissions, newest first, a page at a time (?page=)."""
    user = api_token_user(request) or (request.user if request.user.is_authenticated else None)
    if user is None:
        return _error(401, "send a valid API token: 'Authorization: Token <token>'")
    unknown = sorted(set(request.GET) - {"page"})
    if unknown:
        return _error(400, f"unknown parameter(s) {', '.join(map(repr, unknown))}: this list takes only ?page=")
    try:
        page = table_page(selectors.submissions_of_user(user=user), request.GET.get("page"))
    except PageNotFound as exc:
        return _error(404, str(exc))

    def link(number: int | None) -> str | None:
        if number is None:
            return None
        return request.build_absolute_uri(f"{reverse('submissions:api_submissions')}?page={number}")

    return JsonResponse({
        "count": page.total, "page": page.number, "pages": page.pages, "page_size": table_rows(),
        "next": link(page.number + 1 if page.number < page.pages else None), "previous": link(page.previous_number),
        "results": [_submission_summary(request, s) for s in page.rows],
    })


@csrf_exempt  # writes: token authentication only, no cookie is trusted (a GET lists, with a session too)
def submissions_endpoint(request: HttpRequest) -> JsonResponse:
    if request.method == "GET":
        return _submissions_list(request)
    if request.method != "POST":
        return _error(405, "POST predictions here, GET lists your submissions; GET /api/v1/submissions/<id> for one")
    user = api_token_user(request)
    if user is None:
        return _error(401, "send a valid API token: 'Authorization: Token <token>' (create one on your profile page)")
    request.user = user
    limit = uploads.max_upload_bytes()
    too_big = f"the file is larger than the limit of {limit // 1048576} MB per submission"
    try:
        if request.content_type == "multipart/form-data":
            # read here (bounded) and parse from memory: an oversized part can then be named
            body, size = _read_body(request, limit + settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
            cut = size > limit + settings.DATA_UPLOAD_MAX_MEMORY_SIZE
            try:
                if cut:
                    raise RequestDataTooBig()
                source, files = MultiPartParser(request.META, io.BytesIO(body), request.upload_handlers,
                                                request.encoding).parse()
            except RequestDataTooBig:
                return _error(413, _oversized_part(request, body, cut=cut) or too_big)
            upload = files.get("file")
            if upload is None:
                return _error(400, "a multipart upload needs a 'file' part with the predictions")
            if upload.size > limit:
                return _error(413, too_big)
            data, file_name = upload.read(), upload.name
            source, problems = _upload_source(request.GET, source)
        else:
            data, size = _read_body(request, limit)
            if size > limit:
                return _error(413, too_big)
            source, problems = _upload_source(request.GET)
            file_name = source.get("file_name", "predictions.jsonl")
        meta = _meta(source, problems)
    except MultiPartParserError as exc:
        return _error(400, f"the multipart body cannot be read: {exc}")
    except _BadFields as exc:
        return _error(400, exc.message, fields=exc.fields)
    releases = selectors.releases_open()
    slug = str(source.get("release", "")).strip()
    # no slug: the site's default release, as the CLI's --release says, never another one silently; a
    # held-out release named is found, so that the upload is refused saying why (uploads.HeldOut)
    release = selectors.release_published_get(slug=slug) if slug else _default_release()
    slugs = ", ".join(releases.values_list("slug", flat=True)) or "none"
    if release is None:
        return _error(400, f"no such release {slug!r} (open for submissions here: {slugs})" if slug
                      else f"no release yet (open for submissions here: {slugs})")
    closed = selectors.release_closed_reason(release=release)
    if closed:
        return _error(400, f"{closed}; open for submissions here: {slugs}", release=release.slug)
    try:
        submission, created = uploads.prediction_submission_create(
            user=user, release=release, data=data, file_name=file_name, **meta,
            allow_partial=str(source.get("allow_partial", "")).strip().lower() in _TRUE,
            publish=str(source.get("publish", "")).strip().lower() in _TRUE,
        )
    except uploads.PartialCoverage as exc:
        return _error(exc.http_status, exc.message, coverage=exc.coverage,
                      hint="nothing was stored; send it again with allow_partial=1 to submit it anyway")
    except uploads.SubmissionError as exc:
        problems = [{"line": p.line, "message": p.message} for p in exc.problems]
        return _error(exc.http_status, exc.message, problems=problems)
    payload = submission_payload(request, submission)
    payload["duplicate"] = not created
    if not created:
        payload["duplicate_note"], payload["duplicate_renamed"] = uploads.submission_duplicate_note(
            submission=submission, model_name=meta.get("model_name", ""))
    return JsonResponse(payload, status=201 if created else 200)


def _owned_for(request: HttpRequest, *, session_ok: bool, load: Any, can_view: Any, missing: str,
               ) -> tuple[Any, JsonResponse | None]:
    """(object, None) when the caller (its API token, or its session if ``session_ok``) may see what
    ``load()`` gives, else (None, the error answer): 401 without credentials, 404 for someone else's."""
    user = api_token_user(request) or (request.user if session_ok and request.user.is_authenticated else None)
    if user is None:
        return None, _error(401, "send a valid API token: 'Authorization: Token <token>'")
    request.user = user
    found = load()
    if found is None or not can_view(found, user):
        return None, _error(404, missing)
    return found, None


def _submission_for(request: HttpRequest, pk: int, *, session_ok: bool) -> tuple[Any, JsonResponse | None]:
    return _owned_for(request, session_ok=session_ok, load=lambda: selectors.submission_get(pk=pk),
                      can_view=lambda s, user: selectors.submission_can_view(submission=s, user=user),
                      missing="no such submission")


def submission_endpoint(request: HttpRequest, pk: int) -> JsonResponse:
    if request.method != "GET":
        return _error(405, "GET only")
    submission, refused = _submission_for(request, pk, session_ok=True)
    if refused is not None:
        return refused
    user = request.user
    with_results = request.GET.get("results", "") in _TRUE and selectors.submission_can_see_outputs(
        submission=submission, user=user
    )
    return JsonResponse(submission_payload(request, submission, with_results=with_results))


def queue_endpoint(request: HttpRequest) -> JsonResponse:
    """GET /api/v1/queue: the queue page's rows (others' submissions anonymous)."""
    if request.method != "GET":
        return _error(405, "GET only")
    user = api_token_user(request) or request.user
    overview = selectors.scoring_queue_overview(user=user)
    for row in overview["rows"]:
        row["queued_at"] = row["queued_at"].isoformat()
    response = JsonResponse(overview)
    response["Cache-Control"] = "no-cache"
    return response


@csrf_exempt  # token authentication only, as for uploads
def submission_publish_endpoint(request: HttpRequest, pk: int, action: str) -> JsonResponse:
    """POST /api/v1/submissions/<id>/publish (now, or when scoring finishes), .../withdraw or .../cancel."""
    if action not in ("publish", "withdraw", "cancel"):
        return _error(404, f"no action {action[:40]!r} (publish, withdraw or cancel)")
    if request.method != "POST":
        return _error(405, f"POST to {action} this submission")
    submission, refused = _submission_for(request, pk, session_ok=False)  # a write: the token only, no cookie
    if refused is not None:
        return refused
    user = request.user
    try:
        if action == "publish":
            outcome = lifecycle.submission_publish(submission=submission, user=user)
        elif action == "cancel":
            if not lifecycle.submission_cancel(submission=submission, user=user):
                return _error(409, f"only a queued, running or waiting submission can be cancelled "
                                   f"(this one is {submission.status})")
            outcome = "cancelled"
        else:
            lifecycle.submission_unpublish(submission=submission, user=user)
            outcome = "withdrawn"
    except PermissionError as exc:
        return _error(403, str(exc))
    except uploads.SubmissionError as exc:
        return _error(409, exc.message)
    payload = submission_payload(request, submission)
    payload["outcome"] = outcome
    return JsonResponse(payload)


# --------------------------------------------------------------------------------------------
# Evaluations run here: POST /api/v1/runs, GET /api/v1/runs/<id>, POST /api/v1/runs/<id>/cancel

_RUN_FIELDS = ("release", "model_name", "base_url", "model", "api_key", "temperature", "top_p", "max_tokens", "seed",
               "samples", "with_paper", "max_cost_usd", "price_in", "price_out")


def run_payload(request: HttpRequest, run: Any) -> dict:
    payload = selectors.run_overview(run=run)
    payload["status_url"] = request.build_absolute_uri(reverse("submissions:api_run", args=[run.pk]))
    payload["url"] = request.build_absolute_uri(reverse("submissions:run_detail", args=[run.pk]))
    return payload


@csrf_exempt  # token authentication only: no cookie is trusted for writes here
def runs_endpoint(request: HttpRequest) -> JsonResponse:
    """POST /api/v1/runs (JSON): start an evaluation run here."""
    from .runs import RunRefused, evaluation_run_create  # noqa: PLC0415

    if request.method != "POST":
        return _error(405, "POST a JSON object here to start an evaluation; GET /api/v1/runs/<id> for one")
    user = api_token_user(request)
    if user is None:
        return _error(401, "send a valid API token: 'Authorization: Token <token>' (create one on your profile page)")
    request.user = user
    body, size = _read_body(request, settings.DATA_UPLOAD_MAX_MEMORY_SIZE)
    if size > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        return _error(413, "the request body is too large")
    try:
        data = json.loads(body or b"{}")
    except (ValueError, UnicodeDecodeError):
        return _error(400, "the body must be a JSON object")
    if not isinstance(data, dict):
        return _error(400, "the body must be a JSON object")
    unknown = sorted(set(data) - set(_RUN_FIELDS))
    if unknown:
        return _error(400, f"unknown field(s): {', '.join(str(u)[:40] for u in unknown[:10])}",
                      known=list(_RUN_FIELDS))
    for name in ("release", "model_name", "base_url", "model", "api_key"):
        if data.get(name) is not None and not isinstance(data.get(name), str):
            return _error(400, f"'{name}' must be a string")
    with_paper = data.get("with_paper", True)
    if not isinstance(with_paper, bool):
        return _error(400, "'with_paper' must be true or false")
    releases = selectors.releases_open(runs=True)
    slug = (data.get("release") or "").strip()
    release = releases.filter(slug=slug).first() if slug else releases.first()
    if release is None:
        slugs = ", ".join(releases.values_list("slug", flat=True)) or "none"
        return _error(400, f"no such published release (known: {slugs})")
    try:
        run = evaluation_run_create(
            user=user, release=release, model_name=data.get("model_name") or "", base_url=data.get("base_url") or "",
            model=data.get("model") or "", api_key=data.get("api_key") or "", temperature=data.get("temperature"),
            top_p=data.get("top_p"), max_tokens=data.get("max_tokens"), seed=data.get("seed"),
            samples=data.get("samples", 1), with_paper=with_paper, max_cost_usd=data.get("max_cost_usd"),
            price_in=data.get("price_in"), price_out=data.get("price_out"),
        )
    except RunRefused as exc:
        return _error(exc.http_status, exc.message)
    except uploads.SubmissionError as exc:  # the daily quota
        return _error(exc.http_status, exc.message)
    return JsonResponse(run_payload(request, run), status=201)


def _run_for(request: HttpRequest, pk: int, *, session_ok: bool) -> tuple[Any, JsonResponse | None]:
    return _owned_for(request, session_ok=session_ok, load=lambda: selectors.run_get(pk=pk),
                      can_view=lambda run, user: selectors.run_can_view(run=run, user=user),
                      missing="no such evaluation run")


def run_endpoint(request: HttpRequest, pk: int) -> JsonResponse:
    if request.method != "GET":
        return _error(405, "GET only")
    run, refused = _run_for(request, pk, session_ok=True)
    if refused is not None:
        return refused
    return JsonResponse(run_payload(request, run))


@csrf_exempt  # token authentication only, as for uploads
def run_cancel_endpoint(request: HttpRequest, pk: int) -> JsonResponse:
    from .runs import evaluation_run_cancel  # noqa: PLC0415

    if request.method != "POST":
        return _error(405, "POST to cancel this evaluation")
    run, refused = _run_for(request, pk, session_ok=False)
    if refused is not None:
        return refused
    try:
        cancelled = evaluation_run_cancel(run=run, user=request.user)
    except PermissionError as exc:
        return _error(403, str(exc))
    if not cancelled:
        return _error(409, f"this evaluation has ended ({selectors.run_status(run=run)}); nothing to cancel")
    payload = run_payload(request, selectors.run_get(pk=pk))
    payload["outcome"] = "cancelled"
    return JsonResponse(payload)
