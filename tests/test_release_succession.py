"""Release succession, errata and honest coverage, in this process (jobs run by calling the job entry point).

The worker-process version of the must-show checks is tests/test_release_errata_drill.py.
"""
from __future__ import annotations

import shutil

import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.urls import reverse
from django.utils import timezone

from accounts.services import api_token_create
from benchmark_core.problemset import load_problemset
from contributions import errata, release_services, succession
from catalog.models import Evaluation, LLMModel, Paper, Release, ReleasePaper, Snippet, SnippetResult
from catalog.aggregates import evaluation_aggregates_refresh
from scoring.results import ResultRow, evaluation_results_write
from submissions import jobs, upload
from submissions.models import PredictionSubmission, Status

from submissions_support import DEMO, demo_release_create, predictions_bytes

pytestmark = pytest.mark.django_db

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.RCB_PSET_ROOT = tmp_path / "psets"
    settings.RCB_SANDBOX_BACKEND = "bwrap"
    settings.RCB_ALLOW_LOCAL_SANDBOX = False
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    settings.RCB_HEARTBEAT_SECONDS = 3600


@pytest.fixture
def demo():
    return demo_release_create(slug="demo", papers=["rope"])


@pytest.fixture
def user():
    return User.objects.create_user("alice", "alice@example.org", "pw-alice-123!")


def _evaluation(release: Release, key: str, *, source: str, passed_every: int = 2, completions: bool = False,
                skip: int = 0) -> Evaluation:
    """A public evaluation with a verdict on every snippet but the last ``skip`` ones."""
    model = LLMModel.objects.create(key=key, display_name=key)
    ev = Evaluation.objects.create(model=model, release=release, source=source, is_public=True)
    snippets = list(Snippet.objects.filter(release=release).order_by("paper__paper_id", "position"))
    for i, s in enumerate(snippets[: len(snippets) - skip]):
        SnippetResult.objects.create(evaluation=ev, snippet=s, passed=i % passed_every == 0,
                                     category="" if i % passed_every == 0 else "logic",
                                     completion=s.code if completions else "")
    return evaluation_aggregates_refresh(evaluation=ev)


def _api_rows(client, slug: str) -> dict[str, dict]:
    body = client.get(f"/api/v1/leaderboard?release={slug}").json()
    return {row["model"]: row for row in body["rows"]}


# -- honest coverage --------------------------------------------------------------------------


def test_missing_predictions_are_not_coverage_and_not_ranked(client, demo):
    full = _evaluation(demo, "full", source=Evaluation.PUBLISHED)
    part = _evaluation(demo, "part", source=Evaluation.PUBLISHED)
    # what a job writes for a snippet without a prediction: a failed 'missing' verdict
    last = Snippet.objects.filter(release=demo).order_by("-position").first()
    SnippetResult.objects.filter(evaluation=part, snippet=last).update(passed=False, category="missing")
    evaluation_aggregates_refresh(evaluation=part)
    part.refresh_from_db()
    assert part.snippets_covered == part.snippets_total - 1 and not part.complete
    rows = _api_rows(client, "demo")
    assert rows["full"]["coverage"] == 100.0 and rows["full"]["ranked"] is True
    assert rows["part"]["coverage"] < 100.0 and rows["part"]["ranked"] is False and rows["part"]["tier"] is None


def test_partial_file_is_refused_until_confirmed_everywhere(client, user):
    release = demo_release_create(papers=["rope", "focal-loss"])
    token = api_token_create(user=user)[1]
    data = predictions_bytes(papers=["rope"])
    resp = client.post("/api/v1/submissions?model_name=M", data=data, content_type="application/x-ndjson",
                       HTTP_AUTHORIZATION=f"Token {token}")
    assert resp.status_code == 409, resp.content
    body = resp.json()
    total = Snippet.objects.filter(release=release).count()
    rope = Snippet.objects.filter(release=release, paper__paper_id="rope").count()
    missing = [{"paper": s.paper.paper_id, "file": s.file, "snippet": s.name, "samples_missing": 1}
               for s in Snippet.objects.filter(release=release, paper__paper_id="focal-loss")
               .select_related("paper").order_by("file", "position")]
    assert body["coverage"] == {"predicted": rope, "expected": total, "missing": total - rope, "snippets": total,
                                "samples": 1, "percent": round(100 * rope / total, 1), "missing_snippets": missing}
    assert f"predicts {rope} of the release's {total} snippets" in body["error"] and "not ranked" in body["error"]
    assert PredictionSubmission.objects.count() == 0  # nothing stored
    # the form says how much and offers to send it anyway
    client.force_login(user)
    from django.core.files.uploadedfile import SimpleUploadedFile

    page = client.post(reverse("submissions:submission_create"),
                       {"release": release.pk, "model_name": "F", "file": SimpleUploadedFile("p.jsonl", data)})
    assert page.status_code == 409 and b'id="allow-partial"' in page.content and b"not ranked" in page.content
    listed = page.content.decode().split('id="missing-snippets"')[1].split("</details>")[0]
    assert listed.count("<li>") == len(missing) and all(m["snippet"] in listed for m in missing)
    assert "<code>rope</code>" not in listed
    assert PredictionSubmission.objects.count() == 0
    page = client.post(reverse("submissions:submission_create"),
                       {"release": release.pk, "model_name": "F", "file": SimpleUploadedFile("p.jsonl", data),
                        "allow_partial": "1"})
    assert page.status_code == 302 and PredictionSubmission.objects.count() == 1
    # the API with allow_partial=1
    resp = client.post("/api/v1/submissions?model_name=M&allow_partial=1&publish=1",
                       data=data + b"\n", content_type="application/x-ndjson", HTTP_AUTHORIZATION=f"Token {token}")
    assert resp.status_code == 201 and resp.json()["publish_when_finished"] is True


@needs_bwrap
def test_publish_by_api_now_or_when_scoring_finishes(client, user):
    release = demo_release_create(papers=["rope"])
    token = api_token_create(user=user)[1]
    auth = {"HTTP_AUTHORIZATION": f"Token {token}"}
    resp = client.post("/api/v1/submissions?model_name=Pub", data=predictions_bytes(papers=["rope"]),
                       content_type="application/x-ndjson", **auth)
    sub = PredictionSubmission.objects.get(pk=resp.json()["id"])
    other = api_token_create(user=User.objects.create_user("bob"))[1]
    assert client.post(f"/api/v1/submissions/{sub.pk}/publish", HTTP_AUTHORIZATION=f"Token {other}").status_code == 404
    assert client.post(f"/api/v1/submissions/{sub.pk}/publish").status_code == 401
    assert client.get(f"/api/v1/submissions/{sub.pk}/publish", **auth).status_code == 405
    resp = client.post(f"/api/v1/submissions/{sub.pk}/publish", **auth)
    assert resp.status_code == 200 and resp.json()["outcome"] == "scheduled" and resp.json()["published"] is False
    for job in sub.jobs.all():
        jobs.score_paper(job.pk, job.rq_job_id)
    sub.refresh_from_db()
    assert sub.status == Status.FINISHED and sub.is_published and sub.evaluation.is_public
    assert "Pub" in {r["name"] for r in client.get(f"/api/v1/leaderboard?release={release.slug}").json()["rows"]}
    resp = client.post(f"/api/v1/submissions/{sub.pk}/withdraw", **auth)
    assert resp.status_code == 200 and resp.json()["published"] is False
    sub.evaluation.refresh_from_db()
    assert not sub.evaluation.is_public
    assert client.post(f"/api/v1/submissions/{sub.pk}/publish", **auth).json()["outcome"] == "published"


# -- succession -------------------------------------------------------------------------------


def test_a_draft_starts_from_the_default_release_with_every_paper_and_can_be_named(demo):
    figures = Paper.objects.create(paper_id="figures-only", title="Published figures only")
    ReleasePaper.objects.create(release=demo, paper=figures, folder="", snippet_count=1, total_weight=3)
    Snippet.objects.create(release=demo, paper=figures, name="only", weight=3)
    newer = Release.objects.create(name="newer", slug="newer", status=Release.PUBLISHED)  # not the default
    draft = release_services.release_draft_get_or_create(name="v2 candidate")
    assert draft.predecessor == demo and draft != newer and draft.name == "v2 candidate"
    papers = dict(ReleasePaper.objects.filter(release=draft).values_list("paper__paper_id", "folder"))
    assert set(papers) == {"rope", "figures-only"} and papers["figures-only"] == ""
    assert (release_services._release_root(draft) / "rope" / "rope.py").is_file()
    assert Snippet.objects.filter(release=draft).count() == Snippet.objects.filter(release=demo).count()
    release_services.release_draft_rename(release=draft, name="v2")
    assert Release.objects.get(pk=draft.pk).name == "v2"
    with pytest.raises(ValidationError, match="already named"):
        release_services.release_draft_rename(release=draft, name="newer")


@needs_bwrap
def test_errata_retires_a_snippet_carries_and_rescores_with_previous_figures(client, demo, user):
    published = _evaluation(demo, "published-model", source=Evaluation.PUBLISHED)
    demo_model = _evaluation(demo, "demo-model", source=Evaluation.DEMO, passed_every=1, completions=True)
    before = {e.model.key: e.scaled_pass_rate for e in (published, demo_model)}
    with pytest.raises(ValidationError) as bad:
        errata.release_errata(release=demo, retire=["rope/no such", "nopaper/x", "rope"], reason="r")
    assert len(bad.value.messages) == 3 and Release.objects.count() == 1

    call_command("release_errata", "demo", "--retire", "rope/attention scores", "--reason", "passes when blanked")
    new = Release.objects.get(predecessor=demo)
    assert new.frozen and new.is_default and not Release.objects.get(pk=demo.pk).is_default
    assert [(e["paper"], e["snippet"], e["reason"]) for e in new.changelog] == [
        ("rope", "attention scores", "passes when blanked")]
    # the snippet is gone from the rows and from the new release's copy of the files, not from the old one
    assert not Snippet.objects.filter(release=new, name="attention scores").exists()
    folder = ReleasePaper.objects.get(release=new, paper__paper_id="rope").folder
    assert "attention scores" not in open(f"{folder}/rope.py").read()
    assert "attention scores" in (DEMO / "rope" / "rope.py").read_text()
    core = load_problemset(release_services._release_root(new), papers=["rope"]).paper("rope")
    assert len(core.snippets) == Snippet.objects.filter(release=new).count() == ReleasePaper.objects.get(
        release=new, paper__paper_id="rope").snippet_count
    # imported results (no completions) carry over where the snippet is unchanged
    carried = Evaluation.objects.get(release=new, model__key="published-model")
    assert carried.is_public and carried.succession["mode"] == "carried"
    assert carried.succession["carried"] == Snippet.objects.filter(release=new).count()
    # results with completions are re-scored in the normal queue and published when done
    rescore = PredictionSubmission.objects.get(release=new)
    assert rescore.publish_when_finished and rescore.status == Status.QUEUED
    assert rescore.evaluation.succession["mode"] == "rescored" and not rescore.evaluation.is_public
    assert rescore.predictions_count == Snippet.objects.filter(release=new).count()
    rows = _api_rows(client, new.slug)
    assert rows["published-model"]["previous_release"] == "demo"
    assert rows["published-model"]["previous_scaled_pass_rate"] == pytest.approx(before["published-model"], abs=0.01)
    assert "demo-model" not in rows  # not scored yet
    page = client.get(reverse("leaderboard:release_detail", args=[new.slug]))
    assert b"passes when blanked" in page.content and b"attention scores" in page.content
    for job in rescore.jobs.all():
        assert jobs.score_paper(job.pk, job.rq_job_id) == "done"
    rows = _api_rows(client, new.slug)
    assert rows["demo-model"]["scaled_pass_rate"] == 100.0 and rows["demo-model"]["ranked"] is True
    assert rows["demo-model"]["previous_scaled_pass_rate"] == pytest.approx(before["demo-model"], abs=0.01)
    assert rows["demo-model"]["succession"] == "rescored"
    # publishing again carries nothing twice
    assert succession.release_successor_populate(release=new).skipped


def test_carried_results_keep_their_flags_and_a_reviewers_clearing(demo):
    # carried verdicts go through the one writer: their flags are counted on the new evaluation, and a
    # clearing of the predecessor's flags (the same verdicts) comes along with them
    evs = {key: _evaluation(demo, key, source=Evaluation.PUBLISHED) for key in ("flagged", "cleared", "clean")}
    for key in ("flagged", "cleared"):
        first = SnippetResult.objects.filter(evaluation=evs[key]).order_by("snippet__position").first()
        evaluation_results_write(evaluation=evs[key].pk, rows=[ResultRow(
            snippet_id=first.snippet_id, sample=0, passed=False, category="logic", flags=["tampering:os.exec"])])
    Evaluation.objects.filter(pk=evs["cleared"].pk).update(flags_cleared_at=timezone.now(), flags_cleared_by="rev")
    draft = release_services.release_draft_get_or_create()
    report = succession.release_successor_populate(release=draft)
    assert len(report.carried) == 3 and not report.rescored
    carried = {e.model.key: e for e in Evaluation.objects.filter(release=draft).select_related("model")}
    assert {k: (e.flagged_results, e.flags_cleared_by) for k, e in carried.items()} == {
        "flagged": (1, ""), "cleared": (1, "rev"), "clean": (0, "")}
    assert carried["flagged"].flags_cleared_at is None and carried["cleared"].flags_cleared_at is not None
    assert SnippetResult.objects.filter(evaluation=carried["flagged"], flags=["tampering:os.exec"]).count() == 1
    for key, ev in carried.items():  # the figures were refreshed by the writer: the same as before
        assert ev.computed_at is not None and ev.scaled_pass_rate == pytest.approx(
            Evaluation.objects.get(pk=evs[key].pk).scaled_pass_rate, abs=0.01)
        assert ev.succession["carried"] == Snippet.objects.filter(release=draft).count()


def test_default_switch_warns_when_fewer_models_would_be_ranked(demo):
    _evaluation(demo, "ranked-model", source=Evaluation.PUBLISHED)
    draft = release_services.release_draft_get_or_create()
    warning = succession.release_default_switch_warning(release=draft)
    assert "ranks 0 model(s), the current default" in warning and "ranks 1" in warning
    assert succession.release_default_switch_warning(release=demo) == ""


# -- the queue --------------------------------------------------------------------------------


def test_queue_page_positions_waits_and_privacy(client, user):
    import datetime as dt

    from django.utils import timezone

    release = demo_release_create(papers=["rope", "focal-loss"])
    bob = User.objects.create_user("bob")
    first, _ = upload.prediction_submission_create(user=bob, release=release, data=predictions_bytes(papers=["rope"]),
                                                     model_name="Secret model", allow_partial=True)
    second, _ = upload.prediction_submission_create(user=user, release=release,
                                                      data=predictions_bytes(papers=["focal-loss"]),
                                                      model_name="Mine", allow_partial=True)
    # one job of the first submission finished in 30 s: the pace of the estimate
    job = first.jobs.order_by("id").first()
    now = timezone.now()
    type(job).objects.filter(pk=job.pk).update(status=Status.FINISHED, started_at=now - dt.timedelta(seconds=30),
                                               finished_at=now)
    body = client.get("/api/v1/queue").json()
    assert body["mean_job_seconds"] == 30.0 and body["queued_jobs"] == 3 and body["running_jobs"] == 0
    assert [(r["position"], r["jobs_left"], r["jobs_ahead"], r["wait_seconds"]) for r in body["rows"]] == [
        (1, 1, 0, 30), (2, 2, 1, 90)]
    assert all(r["model_name"] == "" and r["id"] is None for r in body["rows"])  # anonymous to strangers
    client.force_login(user)
    page = client.get(reverse("leaderboard:queue"))
    assert page.status_code == 200 and b"Secret model" not in page.content
    assert f"#{second.pk} Mine".encode() in page.content and b"about 2 min" in page.content
    assert "no-cache" in page["Cache-Control"] or "max-age=0" in page["Cache-Control"]


# -- the staff pages --------------------------------------------------------------------------


def test_staff_name_a_draft_publish_with_the_default_warning_and_errata(client, demo):
    _evaluation(demo, "ranked-model", source=Evaluation.PUBLISHED)
    staff = User.objects.create_user("root", "root@example.org", "pw-root-123456!", is_staff=True)
    client.force_login(staff)
    draft = release_services.release_draft_get_or_create()
    url = reverse("contributions:release", args=[draft.slug])
    page = client.get(url).content.decode()
    assert 'id="rename-form"' in page and 'id="default-warning"' in page and "ranks 0 model(s)" in page
    old_root = release_services._release_root(draft)
    assert draft.slug.startswith("release-") and (old_root / "rope" / "rope.py").is_file()
    resp = client.post(url, {"action": "rename", "rename-name": "v1.1"})
    renamed = Release.objects.get(pk=draft.pk)
    # a draft's slug follows its name, its folder here moves with it, and the staff page says so
    assert renamed.name == "v1.1" and renamed.slug == "v1-1" and resp["Location"].endswith("/v1-1/")
    assert not old_root.exists() and (release_services._release_root(renamed) / "rope" / "rope.py").is_file()
    folder = ReleasePaper.objects.get(release=renamed, paper__paper_id="rope").folder
    assert folder == str(release_services._release_root(renamed) / "rope")
    assert "stays once it is published" in client.get(resp["Location"]).content.decode()
    url = reverse("contributions:release", args=[renamed.slug])
    # asked to become the default while it ranks fewer models: refused until confirmed
    resp = client.post(url, {"action": "publish", "confirm": "on", "make_default": "on"})
    assert resp.status_code == 400 and "Tick this box to switch anyway" in resp.content.decode()
    assert not Release.objects.get(pk=draft.pk).frozen
    resp = client.post(url, {"action": "publish", "confirm": "on", "make_default": "on", "accept_fewer": "on"})
    assert resp.status_code == 302 and Release.objects.get(pk=draft.pk).is_default
    new = Release.objects.get(pk=draft.pk)
    assert new.slug == "v1-1"  # published: the slug stays (citable URLs), and the name is frozen
    with pytest.raises(ValidationError, match="is published"):
        release_services.release_draft_rename(release=new, name="v1.2")
    assert Release.objects.get(pk=draft.pk).slug == "v1-1"
    carried = Evaluation.objects.get(release=new, model__key="ranked-model")
    assert carried.succession["mode"] == "carried" and carried.is_public
    # errata from the staff page: bad input is named, nothing is made
    url = reverse("contributions:release", args=[new.slug])
    resp = client.post(url, {"action": "errata", "errata-retire": "rope/nope", "errata-reason": "x",
                             "errata-confirm": "on"})
    assert resp.status_code == 400 and "no snippet" in resp.content.decode() and Release.objects.count() == 2
    resp = client.post(url, {"action": "errata", "errata-retire": "rope/attention scores\n",
                             "errata-reason": "passes blanked", "errata-confirm": "on"})
    errata = Release.objects.get(predecessor=new)
    assert resp.status_code == 302 and resp["Location"].endswith(f"/{errata.slug}/")
    assert errata.changelog[-1]["snippet"] == "attention scores" and errata.changelog[-1]["by"] == "root"


def test_admin_action_make_default_warns_when_fewer_models_are_ranked(client, demo):
    _evaluation(demo, "ranked-model", source=Evaluation.PUBLISHED)
    empty = Release.objects.create(name="Empty", slug="empty", status=Release.PUBLISHED)
    client.force_login(User.objects.create_superuser("admin", "admin@example.org", "pw-admin-123456!"))
    resp = client.post(reverse("admin:catalog_release_changelist"),
                       {"action": "make_default", "_selected_action": [empty.pk]}, follow=True)
    assert Release.objects.get(pk=empty.pk).is_default
    assert "Empty ranks 0 model(s), the current default Demo demo ranks 1" in resp.content.decode()


def test_cli_warns_how_much_is_missing_before_sending_and_can_refuse(user, tmp_path, live_server):
    import io

    from benchmark_core.cli import main as core_main

    release = demo_release_create(papers=["rope", "focal-loss"])
    token = api_token_create(user=user)[1]
    partial = tmp_path / "rope-only.jsonl"
    partial.write_bytes(predictions_bytes(papers=["rope"]))
    args = ["submit", "--url", live_server.url, "--token", token, "--model-name", "M", "--release", release.slug]
    err = io.StringIO()
    assert core_main([*args, "--complete-only", str(partial)], io.StringIO(), err) == 1
    total = Snippet.objects.filter(release=release).count()
    rope = Snippet.objects.filter(release=release, paper__paper_id="rope").count()
    assert f"warning: the file predicts {rope} of the release's {total} snippets" in err.getvalue()
    assert "not sent (--complete-only)" in err.getvalue() and PredictionSubmission.objects.count() == 0
    first = Snippet.objects.filter(release=release, paper__paper_id="focal-loss").order_by("file", "position").first()
    assert f"  no prediction: focal-loss/{first.file}: {first.name}" in err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert core_main([*args, "--publish", str(partial)], out, err) == 0
    assert "sending it anyway" in err.getvalue() and "published when scoring finishes" in out.getvalue()
    sub = PredictionSubmission.objects.get()
    assert sub.predictions_count == rope and sub.publish_when_finished


def test_errata_rebases_the_open_draft_on_the_new_release(demo):
    draft = release_services.release_draft_get_or_create()
    assert draft.predecessor == demo and Snippet.objects.filter(release=draft, name="attention scores").exists()
    new = errata.release_errata(release=demo, retire=["rope/attention scores"], reason="passes blanked")
    draft.refresh_from_db()
    assert draft.predecessor == new and not draft.frozen
    assert not Snippet.objects.filter(release=draft, name="attention scores").exists()
    folder = ReleasePaper.objects.get(release=draft, paper__paper_id="rope").folder
    assert "attention scores" not in open(f"{folder}/rope.py").read()
