"""Hostile input to the site and the CLI: every case that was a 500 (or stored past a limit) before.

Each bad input gets a 4xx with a message that names the field (or the file's line), and nothing is
stored; private models are a 404 to everyone but their owner and staff; an evaluation with results
the engine flagged is not ranked until a reviewer clears it.
"""
from __future__ import annotations

import io
import json
import urllib.parse

import pytest
from django.contrib.auth.models import Group, User
from django.urls import reverse

from accounts.roles import REVIEWERS_GROUP
from accounts.services import api_token_create
from benchmark_core.cli import main as core_main
from benchmark_core.predictions import MAX_DEPTH
from benchmark_core import runner
from catalog.models import Evaluation, LLMModel, Snippet
from catalog import ranking
from leaderboard.selectors import boards
from scoring.results import evaluation_results_write, result_row_from_run
from submissions import lifecycle, upload
from scoring.models import Job
from submissions.models import PredictionSubmission, Status, SubmissionPrediction

from submissions_support import DEMO, demo_release_create, predictions_bytes


def _result_store(*, evaluation_id, snippet_id, run, completion):
    """Store one verdict the way a scoring job does (the one writer, aggregates at the job's end)."""
    evaluation_results_write(evaluation=evaluation_id, aggregates=False,
                             rows=[result_row_from_run(snippet_id=snippet_id, run=run, completion=completion)])

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    settings.RCB_HEARTBEAT_SECONDS = 3600


@pytest.fixture
def release():
    return demo_release_create(papers=["rope"])


@pytest.fixture
def user():
    return User.objects.create_user("mallory", "m@example.org", "pw-mallory-123!")


@pytest.fixture
def token(user):
    return api_token_create(user=user, name="t")[1]


def _post(client, token: str, data: bytes, **params: str):
    query = urllib.parse.urlencode({"model_name": "Hostile", "allow_partial": "1", **params})
    return client.post(f"/api/v1/submissions?{query}", data=data, content_type="application/x-ndjson",
                       HTTP_AUTHORIZATION=f"Token {token}")


def _stored() -> tuple[int, int, int, int]:
    return (PredictionSubmission.objects.count(), SubmissionPrediction.objects.count(), Evaluation.objects.count(),
            LLMModel.objects.count())


def _line(completion: str = "pass", **extra) -> dict:
    return {"paper": "rope", "snippet": "inverse frequencies", "completion": completion, **extra}


# -- metadata fields: the API checks what the form checks ---------------------------------------


@pytest.mark.parametrize(
    "params, field, words",
    [
        ({"link": "https://example.org/" + "a" * 9994}, "link", "at most 500 characters"),
        ({"model_name": "M" * 201}, "model_name", "at most 200 characters"),
        ({"organisation": "O" * 201}, "organisation", "at most 200 characters"),
        ({"notes": "n" * 5001}, "notes", "at most 5000 characters"),
        ({"knowledge_cutoff": "9" * 1000}, "knowledge_cutoff", "at most 20 characters"),
        ({"temperature": "nan"}, "temperature", "number"),
        ({"temperature": "inf"}, "temperature", "number"),
        ({"top_p": "-infinity"}, "top_p", "number"),
        ({"max_tokens": "9" * 5000}, "max_tokens", "whole number"),
        ({"link": "javascript:alert(1)"}, "link", "valid URL"),
    ],
)
def test_api_refuses_bad_metadata_with_a_400_naming_the_field(client, release, token, params, field, words):
    before = _stored()
    resp = _post(client, token, json.dumps(_line()).encode(), **params)
    assert resp.status_code == 400, resp.content
    body = resp.json()
    assert field in body["fields"] and words in " ".join(body["fields"][field]), body
    assert field in body["error"] and "nothing was stored" in body["error"]
    assert _stored() == before


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("model_name", "Evil\x00Model", "Null characters"),
        ("organisation", "a\x00", "Null characters"),
        ("notes", "\x00", "Null characters"),
        ("link", "https://example.org/\x00", "Null characters"),
        ("knowledge_cutoff", "2024\x00", "Null characters"),
        ("release", "demo\x00", "NUL byte"),
    ],
)
def test_multipart_fields_with_a_nul_byte_are_refused(client, release, token, field, value, words):
    upload = io.BytesIO(json.dumps(_line()).encode())
    upload.name = "p.jsonl"
    before = _stored()
    resp = client.post("/api/v1/submissions", {"file": upload, "model_name": "M", "allow_partial": "1", field: value},
                       HTTP_AUTHORIZATION=f"Token {token}")
    assert resp.status_code == 400 and words in " ".join(resp.json()["fields"][field]), resp.content
    assert _stored() == before


def _upload(name: str = "p.jsonl") -> io.BytesIO:
    upload = io.BytesIO(json.dumps(_line()).encode())
    upload.name = name
    return upload


def test_a_multipart_field_too_large_is_named_not_taken_for_the_file(client, release, token, settings):
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    before = _stored()
    # larger than Django's 2.5 MB for the fields beside the file, well below the file's 20 MB
    resp = client.post("/api/v1/submissions", {"file": _upload(), "model_name": "M", "notes": "n" * (3 << 20)}, **auth)
    assert resp.status_code == 413, resp.content
    error = resp.json()["error"]
    assert "the field 'notes' is too large" in error and "2560 kB" in error and "file" not in error.split(":")[0]
    # past the whole limit, the body is cut inside the field, and it is still the field that is named
    settings.RCB_SUBMISSION_MAX_MB = 1
    resp = client.post("/api/v1/submissions", {"file": _upload(), "model_name": "M", "run_card": "{" + " " * (6 << 20)}, **auth)
    assert resp.status_code == 413 and "the field 'run_card' is too large" in resp.json()["error"]
    # while a large file is still "the file"
    big = io.BytesIO(b"x" * (5 << 20))
    big.name = "big.jsonl"
    resp = client.post("/api/v1/submissions", {"file": big, "model_name": "M"}, **auth)
    assert resp.status_code == 413 and resp.json()["error"].startswith("the file is larger than the limit of 1 MB")
    assert _stored() == before


def test_too_many_file_parts_or_fields_are_json_errors_on_the_api(client, release, token):
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    parts = {f"file{i}": _upload(f"p{i}.jsonl") for i in range(150)}
    resp = client.post("/api/v1/submissions", {"model_name": "M", **parts}, **auth)
    assert resp.status_code == 400 and resp["Content-Type"] == "application/json"
    assert "too many file parts: a request may hold at most 100" in resp.json()["error"]

    fields = {f"field{i}": "v" for i in range(1200)}
    resp = client.post("/api/v1/submissions", {"file": _upload(), "model_name": "M", **fields}, **auth)
    assert resp.status_code == 400 and "too many fields: a request may hold at most 1000" in resp.json()["error"]
    # in the query string, which a middleware reads before any view: JSON too, on every API route
    query = "&".join(f"k{i}=v" for i in range(1200))
    resp = client.post(f"/api/v1/submissions?{query}", data=b"{}", content_type="application/x-ndjson", **auth)
    assert resp.status_code == 400 and "too many fields" in resp.json()["error"]
    assert "too many fields" in client.get(f"/api/v1/leaderboard?{query}").json()["error"]
    # the pages keep their HTML 400
    page = client.get(f"/leaderboard/?{query}")
    assert page.status_code == 400 and page["Content-Type"].startswith("text/html")


@pytest.mark.parametrize("content_type", ["multipart/form-data", "multipart/form-data; boundary="])
def test_an_unreadable_multipart_body_is_a_json_400(client, release, token, content_type):
    resp = client.generic("POST", "/api/v1/submissions", data=b"garbage", content_type=content_type,
                          HTTP_AUTHORIZATION=f"Token {token}")
    assert resp.status_code == 400 and "multipart body cannot be read" in resp.json()["error"]


def test_a_nul_byte_anywhere_in_a_url_is_a_400_not_a_database_error(client, release, token):
    """PostgreSQL refuses NUL in text: every lookup with one would be a 500; the URL is refused first."""
    for url in ("/api/v1/papers/rope%00", "/api/v1/models/x%00y", "/api/v1/leaderboard?release=demo%00",
                "/api/v1/leaderboard?organisation=%00", "/api/v1/submissions/1?results=%00"):
        resp = client.get(url, HTTP_AUTHORIZATION=f"Token {token}")
        assert resp.status_code == 400 and "NUL byte" in resp.json()["error"], url
    before = _stored()
    resp = _post(client, token, json.dumps(_line()).encode(), model_name="Evil\x00Model", file_name="p\x00.jsonl")
    assert resp.status_code == 400 and "NUL byte" in resp.json()["error"] and _stored() == before
    for url in ("/papers/rope%00/", "/models/x%00/", "/leaderboard/?organisation=%00"):
        assert client.get(url).status_code == 400, url
    # a URL no API route matches is answered in JSON too
    missing = client.get("/api/v1/no-such-endpoint")
    assert missing.status_code == 404 and missing["Content-Type"] == "application/json" and missing.json()["error"]


def test_a_link_of_ten_thousand_characters_is_not_stored_by_any_path(client, release, token, user):
    long_link = "https://example.org/" + "a" * 9994
    assert len(long_link) == 10_014
    assert _post(client, token, json.dumps(_line()).encode(), link=long_link).status_code == 400
    client.force_login(user)
    page = client.post(reverse("submissions:submission_create"),
                       {"release": release.pk, "model_name": "W", "link": long_link, "file": _upload(), "allow_partial": "1"})
    assert page.status_code == 400 and "at most 500 characters" in page.content.decode()
    # the service itself refuses what no caller checked
    with pytest.raises(upload.SubmissionError, match="'link' has 10014 characters; at most 500"):
        upload.prediction_submission_create(user=user, release=release, data=json.dumps(_line()).encode(),
                                              model_name="S", link=long_link, allow_partial=True)
    with pytest.raises(upload.SubmissionError, match="finite number"):
        upload.prediction_submission_create(user=user, release=release, data=json.dumps(_line()).encode(),
                                              model_name="S", decoding={"temperature": float("nan")}, allow_partial=True)
    assert PredictionSubmission.objects.count() == 0


def test_web_form_refuses_nan_temperature_and_a_huge_cutoff(client, release, user):
    client.force_login(user)
    for extra, words in (({"temperature": "nan"}, "Enter a number"),
                         ({"knowledge_cutoff": "9" * 1000}, "at most 20 characters"),
                         ({"knowledge_cutoff": "9" * 20}, "not a cutoff date")):
        upload = io.BytesIO(json.dumps(_line()).encode())
        upload.name = "p.jsonl"
        page = client.post(reverse("submissions:submission_create"),
                           {"release": release.pk, "model_name": "W", "file": upload, "allow_partial": "1", **extra})
        assert page.status_code == 400 and words in page.content.decode(), extra
    assert PredictionSubmission.objects.count() == 0


def test_a_cutoff_of_valid_length_but_no_date_is_refused_with_a_message(client, release, token):
    resp = _post(client, token, json.dumps(_line()).encode(), knowledge_cutoff="9" * 20)
    assert resp.status_code == 400 and "knowledge cutoff: not a cutoff date" in resp.json()["error"]
    resp = _post(client, token, json.dumps(_line()).encode(), knowledge_cutoff="2024-13")
    assert resp.status_code == 400 and "bad month number 13" in resp.json()["error"]


# -- the predictions file ---------------------------------------------------------------------


def _deep(n: int) -> bytes:
    return b'{"paper": "rope", "snippet": "inverse frequencies", "completion": "x", "meta": ' + b"[" * n + b"]" * n + b"}"


@pytest.mark.parametrize(
    "line, words",
    [
        (b"[" * 100_000 + b"]" * 100_000, f"nested deeper than {MAX_DEPTH} levels"),
        (_deep(MAX_DEPTH), f"nested deeper than {MAX_DEPTH} levels"),
        (json.dumps(_line(temperature=float("nan"))).encode(), "NaN is not a number"),
        (b'{"paper": "rope", "snippet": "inverse frequencies", "completion": "x", "t": 1e999}', "not finite"),
        (b'{"paper": "rope", "snippet": "inverse frequencies", "completion": "x", "t": -Infinity}', "-Infinity"),
        (json.dumps(_line("def f():\x00 pass")).encode(), "'completion' holds a NUL byte"),
        (json.dumps(_line("x = '\ud800'")).encode(), "'completion' holds a lone surrogate (\\ud800)"),
        (json.dumps({"paper": "rope\x00", "snippet": "s", "completion": "x"}).encode(), "'paper' holds a NUL byte"),
        (b'{"paper": "rope", "snippet": "inverse frequencies", "completion": "x", "sample": ' + b"9" * 5000 + b"}",
         "cannot read this JSON"),
        (json.dumps(_line(sample=2**40)).encode(), "'sample' must be an integer from 0 to 9999"),
    ],
)
def test_bad_prediction_lines_are_refused_with_their_line_number(client, release, token, line, words):
    good = predictions_bytes(papers=["rope"]).splitlines()[0]
    before = _stored()
    resp = _post(client, token, good + b"\n" + line + b"\n")
    assert resp.status_code == 400, resp.content
    problems = resp.json()["problems"]
    assert [p["line"] for p in problems] == [2] and words in problems[0]["message"], problems
    assert _stored() == before


def test_a_depth_within_the_limit_is_accepted(client, release, token):
    assert _post(client, token, _deep(MAX_DEPTH - 1)).status_code == 201


def test_the_cli_reports_the_same_problems_instead_of_crashing(tmp_path):
    preds = tmp_path / "p.jsonl"
    preds.write_bytes(b"[" * 100_000 + b"]" * 100_000 + b"\n"
                      + json.dumps({"paper": "rope", "snippet": "inverse frequencies", "completion": "\ud800"}).encode()
                      + b"\n" + b'{"paper": "rope", "snippet": "inverse frequencies", "completion": "x", "t": NaN}\n')
    out, err = io.StringIO(), io.StringIO()
    code = core_main(["score", str(DEMO), str(preds), "--papers", "rope", "--backend", "local", "--quiet"], out, err)
    text = err.getvalue()
    assert code != 0 and "Traceback" not in text
    assert f"{preds}:1: JSON nested deeper than {MAX_DEPTH} levels" in text
    assert f"{preds}:2: 'completion' holds a lone surrogate" in text and f"{preds}:3: NaN" in text


# -- query parameters ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["cutoff", "from", "to"])
def test_a_cutoff_of_53_nines_is_a_400_on_the_api_and_a_notice_on_the_pages(client, release, name):
    nines = "9" * 53
    for value in (nines, f"{nines}-01", f"{nines}-01-01"):
        resp = client.get(f"/api/v1/leaderboard?view=contamination_safe&{name}={value}")
        assert resp.status_code == 400, (value, resp.content)
        assert any(f"{name}=" in m and "is not a date" in m for m in resp.json()["messages"])
        for page in ("leaderboard:contamination", "leaderboard:leaderboard"):
            html = client.get(reverse(page) + f"?{name}={value}")
            # the pages keep their rule: the default view with a notice that names the parameter
            assert html.status_code == 200 and "is not a date" in html.content.decode(), (page, value)


# -- private models ---------------------------------------------------------------------------


def test_a_private_model_is_a_404_to_everyone_but_its_owner_and_staff(client, release, token, user):
    resp = _post(client, token, json.dumps(_line()).encode(), model_name="Secret Model")
    assert resp.status_code == 201
    sub = PredictionSubmission.objects.get(pk=resp.json()["id"])
    key = sub.model.key
    page, api = reverse("leaderboard:model", args=[key]), f"/api/v1/models/{key}"
    unknown_page, unknown_api = reverse("leaderboard:model", args=["u999-nothing"]), "/api/v1/models/u999-nothing"
    # anonymous and another user: exactly what an unknown key answers
    other = User.objects.create_user("bob", "b@example.org", "pw-bob-123!")
    for who in (None, other):
        client.logout()
        if who is not None:
            client.force_login(who)
        assert client.get(page).status_code == 404 == client.get(unknown_page).status_code
        r, u = client.get(api), client.get(unknown_api)
        assert r.status_code == 404 and r.json()["error"] == f"unknown model {key!r}"
        assert u.status_code == 404
    other_token = api_token_create(user=other)[1]
    assert client.get(api, HTTP_AUTHORIZATION=f"Token {other_token}").status_code == 404
    # the owner (session or token) and staff see it
    client.logout()
    assert client.get(api, HTTP_AUTHORIZATION=f"Token {token}").status_code == 200
    client.force_login(user)
    assert client.get(page).status_code == 200 and client.get(api).json()["name"] == "Secret Model"
    staff = User.objects.create_user("admin", "a@example.org", "pw-admin-123!", is_staff=True)
    client.force_login(staff)
    assert client.get(page).status_code == 200 and client.get(api).status_code == 200
    # once an evaluation of it is public, everyone sees it
    Evaluation.objects.filter(pk=sub.evaluation_id).update(is_public=True)
    client.logout()
    assert client.get(page).status_code == 200 and client.get(api).status_code == 200


# -- engine flags keep an evaluation off the ranked board until a reviewer clears it -----------


def _flagged_run(snippet: Snippet, *, flags: list[str]) -> runner.TestRun:
    return runner.TestRun(paper=snippet.paper.paper_id, file=snippet.file, snippet=snippet.name, sample=0,
                          weight=snippet.weight, passed=True, category=None, exit_code=0, seconds=0.1, flags=flags)


def test_a_flagged_evaluation_is_not_ranked_until_a_reviewer_clears_it(client, release, token, user):
    lines = [json.dumps({"paper": s.paper.paper_id, "file": s.file, "snippet": s.name, "completion": "pass"})
             for s in Snippet.objects.filter(release=release)]
    resp = _post(client, token, "\n".join(lines).encode(), model_name="Forger")
    sub = PredictionSubmission.objects.get(pk=resp.json()["id"])
    snippets = list(Snippet.objects.filter(release=release))
    for n, snip in enumerate(snippets):
        _result_store(evaluation_id=sub.evaluation_id, snippet_id=snip.pk,
                                      run=_flagged_run(snip, flags=["tampering:fd-write"] if n == 0 else []),
                                      completion="pass")
    Job.objects.filter(submission=sub).update(status=Status.FINISHED)
    lifecycle.submission_status_refresh(submission_id=sub.pk)
    sub.refresh_from_db()
    assert sub.status == Status.FINISHED and sub.evaluation.flagged_results == 1
    lifecycle.submission_publish(submission=sub, user=user)

    def row():
        table = boards.leaderboard_rows(release=release)
        return next(r for r in table.rows if r.model_key == sub.model.key)

    assert row().ranked is False and row().tier is None
    assert row().unranked_reason == "1 result(s) flagged by the engine await a reviewer"
    # the owner sees why; a user who is not a reviewer cannot clear it
    client.force_login(user)
    page = client.get(reverse("submissions:submission_detail", args=[sub.pk])).content.decode()
    assert 'id="engine-flags"' in page and "tampering:fd-write" in page and "not ranked" in page
    assert 'id="unranked-reason"' in page and "flagged by the engine await a reviewer" in page
    # publishing through the page says the flag keeps it off the ranked board
    client.post(reverse("submissions:submission_action", args=[sub.pk, "unpublish"]))
    page = client.post(reverse("submissions:submission_action", args=[sub.pk, "publish"]), follow=True)
    assert ("It is shown on the leaderboard but not ranked: 1 result(s) flagged by the engine await a reviewer"
            in page.content.decode())
    assert 'id="clear-flags"' not in page
    api = client.get(f"/api/v1/submissions/{sub.pk}?results=1").json()
    assert api["result"]["ranked"] is False and api["result"]["flagged_results"] == 1
    assert api["result"]["unranked_reason"] == "1 result(s) flagged by the engine await a reviewer"
    assert [r["flags"] for r in api["results"] if r["flags"]] == [["tampering:fd-write"]]
    assert client.post(reverse("submissions:submission_action", args=[sub.pk, "clear-flags"])).status_code == 403
    assert row().ranked is False
    # a reviewer sees it first on the review page and clears it
    reviewer = User.objects.create_user("rita", "r@example.org", "pw-rita-123!")
    reviewer.groups.add(Group.objects.get_or_create(name=REVIEWERS_GROUP)[0])
    client.force_login(reviewer)
    review = client.get(reverse("submissions:review_queue")).content.decode()
    assert 'data-engine-flags="1"' in review
    assert client.post(reverse("submissions:submission_action", args=[sub.pk, "clear-flags"])).status_code == 302
    sub.evaluation.refresh_from_db()
    assert sub.evaluation.flags_cleared_by == "rita" and row().ranked is True
    # a new flag after the clearing undoes it, a flag of the completion's code (ast:*) as well: the
    # cheats the audit trail cannot see in time need such a capability
    _result_store(evaluation_id=sub.evaluation_id, snippet_id=snippets[1].pk,
                                  run=_flagged_run(snippets[1], flags=["ast:dynamic-getattr"]), completion="pass")
    sub.evaluation.refresh_from_db()
    assert sub.evaluation.flagged_results == 2 and sub.evaluation.flags_cleared_at is None
    assert row().ranked is False


def test_staff_clear_flags_with_the_admin_action(client, release, token, user):
    resp = _post(client, token, json.dumps(_line()).encode(), model_name="Flagged")
    sub = PredictionSubmission.objects.get(pk=resp.json()["id"])
    snip = Snippet.objects.get(release=release, name="inverse frequencies")
    _result_store(evaluation_id=sub.evaluation_id, snippet_id=snip.pk,
                                  run=_flagged_run(snip, flags=["tampering:exec"]), completion="pass")
    admin = User.objects.create_superuser("boss", "boss@example.org", "pw-boss-123!")
    client.force_login(admin)
    changelist = reverse("admin:submissions_predictionsubmission_changelist")
    assert "1: awaiting review" in client.get(changelist).content.decode()
    resp = client.post(changelist, {"action": "clear_flags", "_selected_action": [sub.pk]})
    assert resp.status_code == 302
    sub.evaluation.refresh_from_db()
    assert sub.evaluation.flags_cleared_by == "boss" and not ranking.evaluation_flags_pending(sub.evaluation)


def test_a_flagged_evaluation_without_a_submission_says_so_and_reaches_the_review_page(client, release, user):
    """The demo's flagged evaluation (no submission carries it): the board says the flag, not missing
    snippets, and a reviewer finds it on /review/submissions/ and clears it there."""
    model = LLMModel.objects.create(key="demo-imperfect", display_name="Demo Imperfect")
    ev = Evaluation.objects.create(model=model, release=release, source=Evaluation.DEMO, is_public=True)
    snippets = list(Snippet.objects.filter(release=release))
    evaluation_results_write(evaluation=ev, rows=[result_row_from_run(
        snippet_id=s.pk, run=_flagged_run(s, flags=["ast:dynamic-getattr"] if n == 0 else []), completion="pass")
        for n, s in enumerate(snippets)])
    ev.refresh_from_db()
    assert ev.complete and ev.flagged_results == 1
    row = next(r for r in boards.leaderboard_rows(release=release).rows if r.model_key == "demo-imperfect")
    assert row.coverage == 100.0 and not row.ranked
    assert row.unranked_reason == "1 result(s) flagged by the engine await a reviewer"
    board = client.get(f"/leaderboard/?release={release.slug}").content.decode()
    assert 'title="Not ranked: 1 result(s) flagged by the engine await a reviewer"' in board
    assert "results are missing" not in board
    api = {r["model"]: r for r in client.get(f"/api/v1/leaderboard?release={release.slug}").json()["rows"]}
    assert api["demo-imperfect"]["unranked_reason"] == row.unranked_reason
    # not a reviewer: no clearing
    client.force_login(user)
    assert client.post(reverse("submissions:evaluation_flags_clear", args=[ev.pk])).status_code == 403
    reviewer = User.objects.create_user("rita", "r@example.org", "pw-rita-123!")
    reviewer.groups.add(Group.objects.get_or_create(name=REVIEWERS_GROUP)[0])
    client.force_login(reviewer)
    review = client.get(reverse("submissions:review_queue")).content.decode()
    assert f'data-evaluation="{ev.pk}"' in review and "Demo Imperfect" in review and 'data-engine-flags="1"' in review
    assert client.post(reverse("submissions:evaluation_flags_clear", args=[ev.pk])).status_code == 302
    ev.refresh_from_db()
    assert ev.flags_cleared_by == "rita"
    row = next(r for r in boards.leaderboard_rows(release=release).rows if r.model_key == "demo-imperfect")
    assert row.ranked and row.unranked_reason == ""
