"""The OpenAPI 3.1 description of /api/v1/, served at /api/v1/openapi.json.

Written by hand, in one place: every endpoint, parameter, response and error shape of the read
API (leaderboard/api.py) and of the submissions API (submissions/api.py). Objects list the
properties a client may rely on; new properties may be added without a new API version, so
objects stay open (JSON Schema's default). tests/test_openapi.py checks that every /api/v1/ route
is described here and fuzzes the live server against this document (schemathesis).
"""
from __future__ import annotations

import copy
from typing import Any

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from .csv import ABLATION_HEADER, CONTAMINATION_HEADER, LEADERBOARD_HEADER

__all__ = ["OPENAPI_VERSION", "openapi_document", "openapi_json"]

OPENAPI_VERSION = "3.1.0"
API_VERSION = "1"

JSON = "application/json"
CSV = "text/csv"


def _nullable(kind: str, **extra: Any) -> dict[str, Any]:
    return {"type": [kind, "null"], **extra}


def _obj(required: dict[str, Any], optional: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """An object whose ``required`` properties are always there and ``optional`` ones sometimes."""
    return {"type": "object", "required": sorted(required), "properties": {**required, **(optional or {})}, **extra}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _array(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


STRING, INTEGER, NUMBER, BOOLEAN = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}
DATE = _nullable("string", format="date")
RATE = _nullable("number", description="percent, 2 decimals")
CI = _array(RATE) | {"minItems": 2, "maxItems": 2, "description": "95 % bootstrap interval [low, high]"}

SCHEMAS: dict[str, Any] = {
    "Error": _obj(
        {"error": STRING},
        {"messages": _array(STRING) | {"description": "every bad parameter, one message each"}},
        description="Every error of the read API: 400 (bad parameters, listed in messages), 404 (unknown release, "
                    "paper, model or private model) and 405.",
    ),
    "SubmissionError": _obj(
        {"error": STRING},
        {
            "problems": _array(_obj({"line": INTEGER, "message": STRING})) | {
                "description": "every bad line of the predictions file (JSON lines), 1-based"},
            "fields": {"type": "object", "additionalProperties": _array(STRING),
                       "description": "metadata field -> why it was refused"},
            "coverage": {"type": "object", "description": "409: how much of the release the file covers (predicted, expected, missing, snippets, samples, percent) and missing_snippets: [{paper, file, snippet, samples_missing}]"},
            "hint": STRING,
            "messages": _array(STRING),
        },
        description="Errors of the submissions API. Nothing was stored when one is returned.",
    ),
    "ReleaseRef": _obj({"name": STRING, "slug": STRING, "status": {"enum": ["draft", "published"]},
                        "content_hash": STRING, "date": DATE,
                        "held_out": BOOLEAN | {"description": "tasks and code staff-only; only runs here scored"}}),
    "ReleaseInfo": _obj({
        "name": STRING, "slug": STRING, "status": {"enum": ["draft", "published"]}, "content_hash": STRING,
        "date": DATE, "default": BOOLEAN, "papers": INTEGER, "snippets": INTEGER, "models": INTEGER,
        "citation": STRING,
        "held_out": BOOLEAN | {"description": "its tasks, reference code and paper files are served to staff only; "
                                              "uploads are refused; only evaluations run here are scored"},
    }),
    "Paper": _obj({
        "id": STRING, "title": STRING, "venue": STRING, "arxiv_abs": STRING, "arxiv_date": DATE,
        "arxiv_v1_date": DATE, "github_url": STRING, "first_commit_date": DATE, "last_commit_date": DATE,
    }),
    "LeaderboardRow": _obj({
        "tier": _nullable("integer", description="significance tier, 1 = best; null when not ranked"),
        "model": STRING, "name": STRING, "organisation": STRING, "open_weights": BOOLEAN,
        "scaled_pass_rate": RATE, "pass_rate": RATE, "ci95": CI,
        "ranked": BOOLEAN | {"description": "complete (on the scorable papers when only part of the release "
                                            "can be scored here), not a baseline, no engine flags awaiting review"},
        "unranked_reason": _nullable("string", description="why the row is not ranked (every reason that "
                                     "applies, joined by '; '); null when ranked"),
        "coverage": RATE, "snippets": INTEGER, "papers": INTEGER, "knowledge_cutoff": STRING,
        "input_cost": _nullable("number"), "output_cost": _nullable("number"), "samples": INTEGER,
        "baseline": {"enum": ["reference", "empty", None]}, "verified": BOOLEAN, "source": STRING,
        "with_paper": BOOLEAN,
        "run_here": BOOLEAN | {"description": "the Hub asked the model's endpoint for the answers itself (never an "
                                              "upload)"},
    }),
    "Leaderboard": _obj({
        "release": _ref("ReleaseRef"), "view": {"enum": ["overall", "contamination_safe"]}, "with_paper": BOOLEAN,
        "cutoff": DATE, "from": DATE, "to": DATE, "papers": _array(STRING), "snippets": INTEGER,
        "total_weight": INTEGER, "warning": _nullable("string"), "messages": _array(STRING),
        "rows": _array(_ref("LeaderboardRow")),
    }),
    "PaperLeaderboard": _obj({
        "release": _ref("ReleaseRef"), "paper": _ref("Paper"), "snippets": INTEGER, "total_weight": INTEGER,
        "rows": _array(_ref("LeaderboardRow")),
    }),
    "PaperDetail": _obj({
        "release": _ref("ReleaseRef"), "paper": _ref("Paper"), "content_hash": STRING, "has_code": BOOLEAN,
        "total_weight": INTEGER,
        "snippets": _array(_obj({
            "name": STRING, "file": STRING, "parent": _nullable("string"), "depth": INTEGER, "weight": INTEGER,
            "lines": {"type": ["array", "null"], "items": _nullable("integer")}, "pass_rate": RATE, "runs": INTEGER,
        })),
    }),
    "Evaluation": _obj({
        "id": INTEGER, "release": STRING, "release_name": STRING, "release_hash": STRING, "with_paper": BOOLEAN,
        "samples": INTEGER, "decoding": {"type": "object"}, "prompt_version": STRING, "harness_version": STRING,
        "source": STRING, "verified": BOOLEAN, "run_here": BOOLEAN, "scaled_pass_rate": RATE, "pass_rate": RATE,
        "ci95": CI,
        "scaled_std": RATE, "pass_std": RATE, "coverage": RATE,
        "categories": {"type": "object", "additionalProperties": INTEGER},
        "per_paper": {"type": "object", "additionalProperties": {"type": "object"}},
        "pass_at_k": {"type": "object"},
    }),
    "ModelSearch": _obj({"models": _array(_obj({
        "model": STRING, "name": STRING, "organisation": STRING,
        "releases": _array(_obj({"slug": STRING, "name": STRING})),
    }))}),
    "Model": _obj({
        "model": STRING, "name": STRING, "organisation": STRING, "open_weights": BOOLEAN, "knowledge_cutoff": STRING,
        "knowledge_cutoff_date": DATE, "input_cost": _nullable("number"), "output_cost": _nullable("number"),
        "baseline": {"enum": ["reference", "empty", None]}, "links": {"type": "object"},
        "evaluations": _array(_ref("Evaluation")),
    }),
    "Heatmap": _obj({
        "release": _ref("ReleaseRef"), "papers": _array(STRING),
        "models": _array(_obj({"model": STRING, "name": STRING})),
        "values": _array(_array(RATE)) | {"description": "values[i][j]: scaled pass rate of models[i] on papers[j]"},
    }),
    "ErrorCategories": _obj({
        "release": _ref("ReleaseRef"), "categories": _array(STRING),
        "rows": _array(_obj({"model_key": STRING, "name": STRING,
                             "counts": {"type": "object", "additionalProperties": INTEGER},
                             "failures": INTEGER, "runs": INTEGER})),
    }),
    "PaperAblation": _obj({
        "release": _ref("ReleaseRef"),
        "rows": _array(_obj({"model": STRING, "name": STRING, "with_paper": RATE, "without_paper": RATE,
                             "diff": RATE, "ci95": CI})),
    }),
    "Contamination": _obj({
        "release": _ref("ReleaseRef"),
        "rows": _array(_obj({"model": STRING, "name": STRING, "knowledge_cutoff": STRING, "papers": _array(STRING),
                             "paper_count": INTEGER, "snippets": INTEGER, "scaled_pass_rate": RATE,
                             "pass_rate": RATE, "overall_scaled_pass_rate": RATE})),
    }),
    "SubmissionSummary": _obj({
        "id": INTEGER, "status": STRING, "model_name": STRING, "release": STRING, "with_paper": BOOLEAN,
        "created_at": STRING, "finished_at": _nullable("string"), "published": BOOLEAN,
        "scaled_pass_rate": RATE, "pass_rate": RATE, "status_url": STRING, "url": STRING,
    }),
    "SubmissionList": _obj({
        "count": INTEGER, "page": INTEGER, "pages": INTEGER, "page_size": INTEGER,
        "next": _nullable("string", description="the next page's URL; null on the last"),
        "previous": _nullable("string", description="the previous page's URL; null on the first"),
        "results": _array(_ref("SubmissionSummary")),
    }),
    "Submission": _obj(
        {
            "id": INTEGER,
            "status": {"enum": ["queued", "running", "finished", "failed", "cancelled", "waiting"]},
            "failure_reason": STRING, "model_name": STRING, "release": STRING, "with_paper": BOOLEAN,
            "samples": INTEGER, "predictions": INTEGER, "created_at": {"type": "string", "format": "date-time"},
            "started_at": _nullable("string", format="date-time"),
            "finished_at": _nullable("string", format="date-time"), "published": BOOLEAN,
            "progress": _obj({"done": INTEGER, "total": INTEGER, "percent": NUMBER, "active": BOOLEAN,
                              "papers": _array({"type": "object"})}),
            "status_url": {"type": "string", "format": "uri"}, "url": {"type": "string", "format": "uri"},
        },
        {
            "result": _obj({"scaled_pass_rate": _nullable("number"), "pass_rate": _nullable("number"),
                            "scaled_ci95": _array(_nullable("number")), "snippets_total": INTEGER,
                            "snippets_covered": INTEGER, "categories": {"type": "object"}, "verified": BOOLEAN,
                            "hidden": BOOLEAN,
                            "partial": BOOLEAN | {"description": "the figures rest on fewer verdicts than the release "
                                                                 "has (scoring failed, or papers this site cannot "
                                                                 "score): the ones without count as failed"},
                            "verdicts_stored": INTEGER | {"description": "(snippet, sample) verdicts stored, a "
                                                                         "missing prediction's included"},
                            "verdicts_expected": INTEGER | {"description": "snippets of the release x samples"},
                            "partial_note": STRING | {"description": "why the figures are partial; empty if not"}},
                           {"coverage": NUMBER,
                            "ranked": BOOLEAN | {"description": "as the release's board would rank it once published"},
                            "unranked_reason": _nullable("string", description="why it would not be ranked "
                                                         "(missing snippets, flags awaiting review, ...); null if ranked"),
                            "flagged_results": INTEGER | {"description": "results the engine flagged (tampering, ...)"},
                            "flags_cleared": BOOLEAN | {"description": "a reviewer cleared them: it may be ranked"}})
            | {"description": "once scoring ended: finished, or failed (then from partial results: partial true)"},
            "flags": {"type": "object", "description": "the text checks of the completions (reviewers only)"},
            "results": _array(_obj({"paper": STRING, "file": STRING, "snippet": STRING, "sample": INTEGER,
                                    "passed": BOOLEAN, "category": _nullable("string"),
                                    "seconds": _nullable("number"), "output_tail": STRING},
                                   {"flags": _array(STRING) | {"description": "the engine's flags of this run"}})) | {
                "description": "with ?results=1, for the owner"},
            "duplicate": BOOLEAN | {"description": "uploads: the same file was sent before; this is that submission"},
            "duplicate_note": STRING | {"description": "uploads, when duplicate: which earlier submission this is, and "
                                                       "that a different model name was not taken"},
            "duplicate_renamed": BOOLEAN | {"description": "uploads, when duplicate: the upload asked for another "
                                                           "model name than the submission's (not taken)"},
            "outcome": STRING | {"description": "publish/withdraw/cancel: what was done"},
        },
    ),
    "Queue": _obj({
        "rows": _array(_obj({
            "position": INTEGER, "status": STRING, "release": STRING, "jobs_left": INTEGER, "jobs_ahead": INTEGER,
            "wait_seconds": _nullable("integer"), "queued_at": {"type": "string", "format": "date-time"},
            "done": INTEGER, "total": INTEGER, "mine": BOOLEAN, "rescoring": BOOLEAN, "id": _nullable("integer"),
            "model_name": STRING,
        })),
        "mean_job_seconds": _nullable("number"), "recent_jobs": INTEGER, "running_jobs": INTEGER,
        "queued_jobs": INTEGER,
    }),
    "Run": _obj({
        "id": INTEGER,
        "status": {"enum": ["queued", "generating", "scoring", "finished", "failed", "cancelled"]},
        "error": STRING, "model_name": STRING, "model": STRING,
        "endpoint_host": STRING | {"description": "host[:port] of the endpoint (never its path or credentials)"},
        "release": STRING, "decoding": {"type": "object"}, "samples": INTEGER, "with_paper": BOOLEAN,
        "max_cost_usd": _nullable("number"),
        "progress": _obj({"answers": INTEGER, "expected": INTEGER, "percent": RATE, "tokens_in": INTEGER,
                          "tokens_out": INTEGER, "cost_usd": _nullable("number"),
                          "scoring": {"type": ["object", "null"], "description": "done, total, percent"}}),
        "submission": _nullable("integer", description="the submission scoring its answers, once there"),
        "run_card": {"type": "object"},
        "result": {"type": ["object", "null"],
                   "description": "scaled_pass_rate, pass_rate, snippets_total, snippets_covered, run_here, evaluation"},
        "created_at": {"type": "string", "format": "date-time"},
        "finished_at": {"type": ["string", "null"], "format": "date-time"},
        "active": BOOLEAN, "status_url": STRING, "url": STRING,
    }, {"outcome": STRING}),
    "OpenAPI": {"type": "object", "required": ["openapi", "paths"]},
}


def _json(schema: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {JSON: {"schema": _ref(schema)}}}


def _error(description: str, schema: str = "Error") -> dict[str, Any]:
    return _json(schema, description)


def _table(schema: str, description: str, columns: str) -> dict[str, Any]:
    """A table endpoint: JSON, or CSV with ?format=csv (its header row: ``columns``; the pages'
    downloads of the same table have the same columns, leaderboard.csv)."""
    return {"description": description, "content": {JSON: {"schema": _ref(schema)},
                                                    CSV: {"schema": {"type": "string",
                                                                     "description": f"CSV columns: {columns}"}}}}


def _columns(header: list[str]) -> str:
    return ", ".join(header)


BOARD_COLUMNS = _columns(LEADERBOARD_HEADER) + " (an interval is ci95_low, ci95_high: the JSON's ci95)"


def _query(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": False, "description": description,
            "schema": schema or {"type": "string"}}


def _path(name: str, description: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description,
            "schema": schema or {"type": "string"}}


RELEASE = _query("release", "a release's slug or name; default: the default release; a draft is a 404 but to staff "
                            "(their session or token)")
FORMAT = _query("format", "json (default) or csv", {"enum": ["json", "csv"]})
JSON_ONLY = _query("format", "json only (csv: 400)", {"enum": ["json", "csv"]})
YES_NO = {"type": "string", "description": "1/0, true/false, yes/no, on/off"}
BAD = _error("a bad parameter: every problem in messages")
NO_RELEASE = _error("unknown release (or none loaded yet)")
TOKEN = [{"token": []}]
UNAUTHORIZED = _error("no valid API token", "SubmissionError")


def _read(summary: str, responses: dict[str, Any], parameters: list[dict[str, Any]], op_id: str) -> dict[str, Any]:
    return {"get": {"operationId": op_id, "summary": summary, "tags": ["read"], "parameters": parameters,
                    "responses": responses}}


_SUBMISSION_FIELDS = {
    "model_name": STRING | {"maxLength": 200, "description": "required: as shown on the leaderboard"},
    "release": STRING | {"description": "slug of a published release; default: the default one"},
    "organisation": STRING | {"maxLength": 200},
    "open_weights": YES_NO,
    "knowledge_cutoff": STRING | {"maxLength": 20, "description": "YYYY, YYYY-MM or YYYY-MM-DD"},
    "link": STRING | {"maxLength": 500, "description": "http(s) URL of the model card or paper"},
    "without_paper": YES_NO | {"description": "the prompts left the paper text out (ablation)"},
    "temperature": STRING | {"description": "a finite number >= 0"},
    "top_p": STRING | {"description": "a finite number in [0, 1]"},
    "max_tokens": STRING | {"description": "an integer >= 1"},
    "notes": STRING | {"maxLength": 5000},
    "allow_partial": YES_NO | {"description": "accept a file that leaves snippets without a prediction"},
    "publish": YES_NO | {"description": "publish as soon as scoring finishes"},
    "run_card": STRING | {"description": "the run card (JSON text) written beside the predictions by "
                                         "'benchmark_core generate'; the CLI's submit sends it"},
}

PATHS: dict[str, Any] = {
    "/openapi.json": _read("This document", {"200": _json("OpenAPI", "the OpenAPI 3.1 document")}, [], "openapi"),
    "/ping": _read("A trivial endpoint (load-test baseline)",
                   {"200": {"description": "always", "content": {JSON: {"schema": _obj({"ok": {"const": True}})}}}},
                   [], "ping"),
    "/releases": _read("Every release with counts and citation text",
                       {"200": {"description": "the releases", "content": {JSON: {"schema": _obj(
                           {"releases": _array(_ref("ReleaseInfo"))})}}}}, [], "releases"),
    "/leaderboard": _read(
        "The leaderboard of a release",
        {"200": _table("Leaderboard", "the rows, best first", BOARD_COLUMNS), "400": BAD, "404": NO_RELEASE},
        [RELEASE,
         _query("view", "overall (default) or contamination_safe", {"enum": ["overall", "contamination_safe"]}),
         _query("cutoff", "contamination_safe: papers first committed after this date (YYYY[-MM[-DD]])"),
         _query("from", "papers first committed on or after this date (YYYY-MM-DD or YYYY-MM)"),
         _query("to", "papers first committed on or before this date"),
         _query("open_weights", "only open-weights models (1) or only closed ones (0)", YES_NO),
         _query("organisation", "only this organisation's models"),
         _query("with_paper", "1 (default): prompts with the paper; 0: the ablation without it", YES_NO),
         _query("run_here", "only results the Hub ran itself (1) or only the others (0)", YES_NO),
         FORMAT],
        "leaderboard"),
    "/heatmap": _read("Model x paper scaled pass rates",
                      {"200": _table("Heatmap", "the matrix", "model, name, then one column per paper"), "400": BAD,
                       "404": NO_RELEASE}, [RELEASE, FORMAT], "heatmap"),
    "/error-categories": _read("Failures by category per model",
                               {"200": _table("ErrorCategories", "counts per model",
                                              "model, name, one column per category, failures, runs"),
                                "400": BAD, "404": NO_RELEASE},
                               [RELEASE, FORMAT], "error_categories"),
    "/paper-ablation": _read("With-paper minus without-paper scaled pass rate per model",
                             {"200": _table("PaperAblation", "one row per model with both", _columns(ABLATION_HEADER)),
                              "400": BAD, "404": NO_RELEASE}, [RELEASE, FORMAT], "paper_ablation"),
    "/contamination": _read("Each model on the papers first committed after its own knowledge cutoff",
                            {"200": _table("Contamination", "one row per model", _columns(CONTAMINATION_HEADER)),
                             "400": BAD, "404": NO_RELEASE},
                            [RELEASE, FORMAT], "contamination"),
    "/papers/{paper_id}": _read(
        "A paper's metadata and snippet tree, each snippet's pass rate across models",
        {"200": _json("PaperDetail", "the paper"), "400": BAD, "404": _error("unknown release or paper")},
        [_path("paper_id", "the paper's folder name, e.g. rope"), RELEASE, JSON_ONLY], "paper"),
    "/papers/{paper_id}/leaderboard": _read(
        "Every model's figures on one paper",
        {"200": _table("PaperLeaderboard", "the rows", BOARD_COLUMNS), "400": BAD,
         "404": _error("unknown release or paper")},
        [_path("paper_id", "the paper's folder name"), RELEASE, FORMAT], "paper_leaderboard"),
    "/models": _read(
        "Models whose name, key or organisation contains q, with the published releases holding their public results",
        {"200": _json("ModelSearch", "at most 50 models, by name"), "400": BAD},
        [_query("q", "part of a model's name, key or organisation (empty: no model)"), JSON_ONLY], "model_search"),
    "/models/{key}": _read(
        "A model and its public evaluations, each with its reproducibility card",
        {"200": _json("Model", "the model"), "400": BAD,
         "404": _error("unknown model, or a private one (uploads never published) of someone else")},
        [_path("key", "the model's key (may hold dots and slashes)"), RELEASE, JSON_ONLY], "model"),
    "/evaluations/{evaluation_id}/outputs.jsonl": _read(
        "Raw outputs of a public evaluation (the owner's private ones too), one JSON object per line: paper, "
        "file, snippet, sample, verdict, category, test output and the completion",
        {"200": {"description": "JSON lines", "content": {"application/x-ndjson": {"schema": {"type": "string"}}}},
         "400": BAD, "404": _error("no such evaluation, or not visible to you")},
        [_path("evaluation_id", "the evaluation's id", INTEGER), JSON_ONLY], "evaluation_outputs"),
    "/submissions": {"get": {
        "operationId": "submission_list", "tags": ["submissions"], "security": TOKEN,
        "summary": "Your own submissions, newest first, a page at a time",
        "parameters": [_query("page", "page number, from 1", {"type": "integer", "minimum": 1})],
        "responses": {"200": _json("SubmissionList", "one page of your submissions"), "401": UNAUTHORIZED,
                      "404": _error("no such page (the message names the range)", "SubmissionError")},
    }, "post": {
        "operationId": "submission_create", "tags": ["submissions"], "security": TOKEN,
        "summary": "Upload predictions (JSON lines): multipart with a 'file' part, or the file as the body",
        "description": "Every metadata field is checked as the upload form checks it, and a field of another name is "
                       "refused (a part or a query parameter alike); every bad line of the file "
                       "is listed with its number (malformed JSON, nesting deeper than 16, NaN/Infinity, NUL "
                       "bytes, lone surrogates, unknown papers or snippets, duplicates). Nothing is stored on an "
                       "error. The daily quota counts neither failed nor cancelled submissions.",
        "parameters": [_query(name, schema.get("description", name), {"type": "string"})
                       for name, schema in _SUBMISSION_FIELDS.items()]
        + [_query("file_name", "the file's name, for a body upload")],
        "requestBody": {"required": True, "content": {
            "application/x-ndjson": {"schema": {"type": "string", "description": "one JSON object per line: "
                                                "{paper, snippet, completion} and optional file, sample; instead of "
                                                "completion, the whole edited masked file (file_content) or a unified "
                                                "diff against it (patch), refused when it changes anything outside "
                                                "the snippet"}},
            "multipart/form-data": {"schema": {"type": "object", "required": ["file"],
                                               "properties": {"file": {"type": "string", "format": "binary"},
                                                              **_SUBMISSION_FIELDS}}},
        }},
        "responses": {
            "201": _json("Submission", "stored and queued for scoring"),
            "200": _json("Submission", "the same file was sent before: that submission (duplicate: true)"),
            "400": _error("bad metadata (fields) or bad lines (problems)", "SubmissionError"),
            "401": UNAUTHORIZED,
            "409": _error("the file leaves snippets without a prediction (send allow_partial=1)", "SubmissionError"),
            "413": _error("the file is larger than the limit, or a field beside it is too large (the error names it)",
                          "SubmissionError"),
            "429": _error("the daily quota is used up", "SubmissionError"),
        },
    }},
    "/submissions/{id}": {"get": {
        "operationId": "submission", "tags": ["submissions"], "security": TOKEN,
        "summary": "One submission: status, progress, result; ?results=1 adds every verdict (owner)",
        "parameters": [_path("id", "the submission's id", INTEGER), _query("results", "1: every verdict", YES_NO)],
        "responses": {"200": _json("Submission", "the submission"), "401": UNAUTHORIZED,
                      "404": _error("no such submission (or not yours)", "SubmissionError")},
    }},
    "/submissions/{id}/{action}": {"post": {
        "operationId": "submission_action", "tags": ["submissions"], "security": TOKEN,
        "summary": "Publish (now, or when scoring finishes), withdraw or cancel a submission",
        "parameters": [_path("id", "the submission's id", INTEGER),
                       _path("action", "publish, withdraw or cancel",
                             {"enum": ["publish", "withdraw", "cancel"]})],
        "responses": {"200": _json("Submission", "done; outcome says what"), "401": UNAUTHORIZED,
                      "403": _error("not the owner", "SubmissionError"),
                      "404": _error("no such submission or action", "SubmissionError"),
                      "409": _error("cannot be published (or cancelled) now", "SubmissionError")},
    }},
    "/runs": {"post": {
        "operationId": "run_create", "tags": ["runs"], "security": TOKEN,
        "summary": "Start an evaluation run here: the Hub asks the model's OpenAI-compatible endpoint itself",
        "description": "The endpoint must be http(s) and not resolve to the site's own network (loopback, private, "
                       "link-local, metadata addresses) unless the operator allowed its host. The API key is used "
                       "for this run only, kept encrypted until the answers are in, then deleted; it is never "
                       "returned. Refused up front when snippets x samples or their tokens or cost could exceed "
                       "the site's caps. Counts against the daily quota (not when cancelled or failed).",
        "requestBody": {"required": True, "content": {JSON: {"schema": _obj(
            {"model_name": STRING, "base_url": STRING, "model": STRING},
            {"release": STRING, "api_key": STRING, "temperature": _nullable("number"), "top_p": _nullable("number"),
             "max_tokens": _nullable("integer"), "seed": _nullable("integer"), "samples": INTEGER,
             "with_paper": BOOLEAN, "max_cost_usd": _nullable("number"), "price_in": _nullable("number"),
             "price_out": _nullable("number")})}}},
        "responses": {"201": _json("Run", "stored and queued"), "400": _error("refused: the message says why"),
                      "401": UNAUTHORIZED, "413": _error("the body is too large"),
                      "429": _error("the daily quota, or the runs at a time, are used up")},
    }},
    "/runs/{id}": {"get": {
        "operationId": "run", "tags": ["runs"], "security": TOKEN,
        "summary": "One evaluation run: status, answers, tokens, cost, scoring progress, result",
        "parameters": [_path("id", "the run's id", INTEGER)],
        "responses": {"200": _json("Run", "the run"), "401": UNAUTHORIZED,
                      "404": _error("no such run (or not yours)")},
    }},
    "/runs/{id}/cancel": {"post": {
        "operationId": "run_cancel", "tags": ["runs"], "security": TOKEN,
        "summary": "Cancel an evaluation run: nothing more is requested, its key is deleted, no quota is used",
        "parameters": [_path("id", "the run's id", INTEGER)],
        "responses": {"200": _json("Run", "cancelled (outcome)"), "401": UNAUTHORIZED,
                      "403": _error("not the owner"), "404": _error("no such run (or not yours)"),
                      "409": _error("the run has ended")},
    }},
    "/queue": {"get": {
        "operationId": "queue", "tags": ["submissions"],
        "summary": "Submissions waiting and running, in queue order, with estimated waits (others' anonymous)",
        "parameters": [],
        "responses": {"200": _json("Queue", "the queue")},
    }},
}

# any URL holding a NUL byte is refused before it reaches a view (leaderboard.middleware)
for _item in PATHS.values():
    for _operation in _item.values():
        _operation["responses"].setdefault("400", _error("a bad parameter (a URL holding a NUL byte, for one)"))

#: each read operation's query parameters, by its operationId (the URL name of its route): the read
#: API refuses any other (``api.api_view``), so that a filter it does not know is never silently ignored
READ_QUERY: dict[str, frozenset[str]] = {
    op["operationId"]: frozenset(p["name"] for p in op["parameters"] if p["in"] == "query")
    for item in PATHS.values() for method, op in item.items() if method == "get" and "read" in op.get("tags", ())
}

_DOCUMENT: dict[str, Any] = {
    "openapi": OPENAPI_VERSION,
    "jsonSchemaDialect": "https://spec.openapis.org/oas/3.1/dialect/base",
    "info": {
        "title": "ResearchCodeBench Hub API",
        "version": API_VERSION,
        "description": "Read the leaderboards (no authentication) and submit predictions (API token: create one on "
                       "your profile page, send it as 'Authorization: Token <token>'). Errors are JSON objects "
                       "with an 'error' message. A read endpoint refuses (400) a query parameter it does not "
                       "list here, rather than ignore a filter it does not have.",
    },
    "servers": [{"url": "/api/v1"}],
    "paths": PATHS,
    "components": {
        "schemas": SCHEMAS,
        "securitySchemes": {"token": {"type": "apiKey", "in": "header", "name": "Authorization",
                                      "description": "'Token <token>' (or 'Bearer <token>')"}},
    },
    "tags": [{"name": "read", "description": "leaderboards, papers, models"},
             {"name": "submissions", "description": "uploads and their scoring"},
             {"name": "runs", "description": "evaluations the Hub runs itself against a model's endpoint"}],
}


def openapi_document() -> dict[str, Any]:
    """A copy of the document (callers may change it)."""
    return copy.deepcopy(_DOCUMENT)


@require_GET
def openapi_json(request: HttpRequest) -> JsonResponse:
    return JsonResponse(_DOCUMENT, json_dumps_params={"indent": 1})
