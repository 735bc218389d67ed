"""Provenance: owners see the drill-downs of their private submissions, raw outputs as JSON lines,
badges that mean one thing each, the published run's date, the citation and links."""
from __future__ import annotations

import datetime as dt
import io
import json
import shutil

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from catalog.models import Evaluation, Release
from leaderboard.importers.published import PUBLISHED_RELEASE_SLUG
from submissions import jobs, lifecycle, upload

from submissions_support import bwrap_jobs_settings, demo_release_create, predictions_bytes

pytestmark = pytest.mark.django_db

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture(autouse=True)
def _settings(settings):
    bwrap_jobs_settings(settings)


@pytest.fixture
def scored(db):
    """A finished, private submission of the demo-imperfect answers on rope."""
    release = demo_release_create(papers=["rope"])
    owner = User.objects.create_user("olga", "olga@example.org", "pw-olga-123456!")
    sub, _ = upload.prediction_submission_create(user=owner, release=release, model_name="Olga model",
                                                   data=predictions_bytes("demo-imperfect", papers=["rope"]))
    for job in sub.jobs.all():
        assert jobs.score_paper(job.pk, job.rq_job_id) == "done"
    sub.refresh_from_db()
    return sub


@needs_bwrap
def test_owner_sees_private_drilldowns_raw_outputs_and_a_failures_filter(client, scored):
    sub, ev = scored, scored.evaluation
    failed = ev.results.filter(passed=False).select_related("snippet").first()
    assert failed is not None and ev.results.filter(passed=True).exists()
    drill = (reverse("leaderboard:snippet", args=["rope"]) +
             f"?release={sub.release.slug}&name={failed.snippet.name}&evaluation={ev.pk}")
    outputs = reverse("leaderboard_api:evaluation_outputs", args=[ev.pk])
    # strangers: nothing, as if it did not exist
    assert client.get(drill).status_code == 404 and client.get(outputs).status_code == 404
    client.force_login(User.objects.create_user("mallory"))
    assert client.get(drill).status_code == 404 and client.get(outputs).status_code == 404
    client.force_login(sub.user)
    page = client.get(drill)
    assert page.status_code == 200 and b'id="private-drill"' in page.content
    # the drill-down links back to its submission (for those who may open it)
    back = f'id="drill-submission" href="{reverse("submissions:submission_detail", args=[sub.pk])}"'
    assert back in page.content.decode()
    assert b"Completion against the reference" in page.content or b"diff" in page.content
    # the submission page: every row links to its drill-down; failures only on request
    detail = client.get(reverse("submissions:submission_detail", args=[sub.pk])).content.decode()
    assert detail.count('class="js-drill"') == ev.results.count()
    only = client.get(reverse("submissions:submission_detail", args=[sub.pk]) + "?failures=1").content.decode()
    assert only.count('class="js-drill"') == ev.results.filter(passed=False).count() and "Failures only" in only
    # raw outputs: one line per snippet and sample, with what the page shows
    resp = client.get(outputs)
    assert resp.status_code == 200 and resp["Content-Type"].startswith("application/x-ndjson")
    lines = [json.loads(ln) for ln in b"".join(resp.streaming_content).decode().splitlines()]
    assert len(lines) == ev.results.count()
    row = next(r for r in lines if r["snippet"] == failed.snippet.name)
    assert row["passed"] is False and row["category"] == failed.category and row["test_output"] == failed.output_tail
    assert row["completion"] == failed.completion and row["model"] == sub.model.key and row["evaluation"] == ev.pk
    # published: anybody may download them
    lifecycle.submission_publish(submission=sub, user=sub.user)
    client.logout()
    assert client.get(outputs).status_code == 200


def test_imported_results_say_published_not_verified_and_carry_the_run_date(client, shared_upstream):
    call_command("import_published", str(shared_upstream / "overall_stats.json"), stdout=io.StringIO())
    release = Release.objects.get(slug=PUBLISHED_RELEASE_SLUG)
    evs = Evaluation.objects.filter(release=release)
    assert evs.exists() and not evs.filter(verified=True).exists()
    assert set(evs.values_list("run_date", flat=True)) == {dt.date(2025, 5, 12)}
    board = client.get(reverse("leaderboard:leaderboard") + f"?release={release.slug}").content.decode()
    assert board.count("badge-published") >= evs.count() and "badge-verified" not in board
    model = evs.first().model
    card = client.get(reverse("leaderboard:model", args=[model.key]) + f"?release={release.slug}").content.decode()
    assert "2025-05-12" in card and "the published run" in card
    call_command("import_published", str(shared_upstream / "overall_stats.json"), "--run-date", "2025-05-13",
                 stdout=io.StringIO())
    assert set(evs.values_list("run_date", flat=True)) == {dt.date(2025, 5, 13)}


def test_citation_names_the_authors_and_pages_link_the_paper_and_repository(client):
    demo_release_create(slug="demo")
    api = client.get("/api/v1/releases").json()["releases"][0]["citation"]
    assert "Hua" in api and "2506.02314" in api
    for url in (reverse("leaderboard:home"), reverse("leaderboard:releases")):
        page = client.get(url).content.decode()
        assert "https://arxiv.org/abs/2506.02314" in page and "https://github.com/PatrickHua/ResearchCodeBench" in page
        assert "Hua et al., 2025" in page
