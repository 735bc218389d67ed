"""The published release as a place to evaluate (issue 8, site side).

``import_published`` on the published overall_stats.json, then ``import_pset`` of a folder with the
same paper ids and snippet names for three of its papers (tests/data/published_subset: our own
NumPy code, each paper with a tagged ``*_ref.py`` copy): the copies keep their papers.yaml entries,
the release takes submissions for the papers it can score, lists the others with the reason,
offers its tasks for download, and a real RQ worker scores a CLI submission to 100 % on them.
"""
from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.urls import reverse

from accounts.services import api_token_create
from benchmark_core.cli import main as core_main
from benchmark_core.problemset import load_problemset, paper_folder_load
from catalog.models import Release, ReleasePaper, Snippet
from leaderboard.importers.published import PUBLISHED_RELEASE_SLUG
from submissions.models import PredictionSubmission, Status

from submissions_support import ROOT, RedisServer, process_group_kill, worker_env, worker_start

UPSTREAM = ROOT.parent / "shared" / "upstream" / "overall_stats.json"
SUBSET = ROOT / "tests" / "data" / "published_subset"
PAPERS = ["hyla", "Tanh-Init", "minp"]

needs_upstream = pytest.mark.skipif(not UPSTREAM.is_file(), reason="needs ../shared/upstream/overall_stats.json")
pytestmark = [needs_upstream]


@pytest.fixture(autouse=True)
def _settings(settings, tmp_path):
    settings.RCB_PSET_ROOT = tmp_path / "psets"
    settings.RCB_SANDBOX_BACKEND = "bwrap"
    settings.RCB_ALLOW_LOCAL_SANDBOX = False
    settings.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"


def _attach() -> Release:
    call_command("import_published", str(UPSTREAM), stdout=io.StringIO())
    out = io.StringIO()
    call_command("import_pset", str(SUBSET), stdout=out)
    release = Release.objects.get(slug=PUBLISHED_RELEASE_SLUG)
    assert ReleasePaper.objects.filter(release=release).exclude(folder="").count() == len(PAPERS), out.getvalue()
    return release


def _reference_predictions(release: Release) -> bytes:
    """A fenced reference completion for every snippet of the attached papers."""
    rows = Snippet.objects.filter(release=release, paper__paper_id__in=PAPERS).values_list("paper__paper_id", "name", "code")
    return b"".join(
        json.dumps({"paper": pid, "snippet": name, "completion": f"```python\n{code}\n```"}).encode() + b"\n"
        for pid, name, code in rows
    )


@pytest.mark.django_db
def test_copies_keep_their_entry_so_ref_copies_hold_no_snippet(tmp_path):
    release = _attach()
    source = load_problemset(SUBSET)
    for paper in source.papers:
        rp = ReleasePaper.objects.get(release=release, paper__paper_id=paper.id)
        copy = paper_folder_load(rp.folder)
        # the tagged *_ref.py beside the annotated file is no snippet; the paper's timeout and
        # environment travel with the copy
        assert copy.annotated_files == paper.annotated_files and len(copy.annotated_files) == 1
        assert [s.name for s in copy.snippets] == [s.name for s in paper.snippets]
        assert copy.timeout == 20.0 and copy.environment == paper.environment
        assert any(p.name.endswith("_ref.py") for p in Path(rp.folder).iterdir())
        assert rp.entry["annotated_file_paths"] == paper.annotated_files and rp.entry["timeout"] == 20.0
        # the release's published snippets got the code; the names are the published ones
        assert set(Snippet.objects.filter(release=release, paper__paper_id=paper.id).exclude(code="")
                   .values_list("name", flat=True)) == {s.name for s in paper.snippets}
    # the release folder is itself a problem set (the CLI can score it)
    assert {p.id for p in load_problemset(Path(rp.folder).parent).papers} == set(PAPERS)


@pytest.mark.django_db
def test_the_release_page_lists_what_cannot_be_scored_and_offers_the_tasks(client, tmp_path):
    call_command("import_published", str(UPSTREAM), stdout=io.StringIO())
    page = client.get(reverse("leaderboard:release_detail", args=[PUBLISHED_RELEASE_SLUG])).content.decode()
    # before the code is attached: figures only, and how an operator attaches it
    assert 'id="no-code"' in page and "import_pset" in page and 'id="tasks-with-paper"' not in page
    assert client.get(reverse("leaderboard:release_tasks", args=[PUBLISHED_RELEASE_SLUG])).status_code == 404
    release = _attach()
    page = client.get(reverse("leaderboard:release_detail", args=[release.slug])).content.decode()
    assert "3 of 20 papers" in page and 'id="tasks-with-paper"' in page
    assert page.count("its code is not attached on this site") == 17
    # the downloads are the rows of `python -m benchmark_core tasks` on the release's folder
    root = Path(ReleasePaper.objects.filter(release=release).exclude(folder="").first().folder).parent
    for query, flag in (("", []), ("?without_paper=1", ["--without-paper"])):
        resp = client.get(reverse("leaderboard:release_tasks", args=[release.slug]) + query)
        assert resp.status_code == 200 and resp["Content-Type"].startswith("application/x-ndjson")
        body = b"".join(resp.streaming_content).decode()
        out = io.StringIO()
        assert core_main(["tasks", str(root), *flag], out, io.StringIO()) == 0
        assert body == out.getvalue() and len(body.splitlines()) == 14
        assert all(json.loads(line)["with_paper"] is (not flag) for line in body.splitlines())


@pytest.mark.django_db
def test_the_submit_form_and_the_api_accept_the_published_release(client, tmp_path, settings):
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    user = User.objects.create_user("eve", "eve@example.org", "pw-eve-123456!")
    token = api_token_create(user=user)[1]
    call_command("import_published", str(UPSTREAM), stdout=io.StringIO())
    release = Release.objects.get(slug=PUBLISHED_RELEASE_SLUG)
    data = b'{"paper": "minp", "snippet": "scale min_p threshold", "completion": "x"}\n'
    url = f"/api/v1/submissions?model_name=M&allow_partial=1&release={release.slug}"
    resp = client.post(url, data=data, content_type="application/x-ndjson", HTTP_AUTHORIZATION=f"Token {token}")
    assert resp.status_code == 400 and "takes no submissions on this site until the code of its papers is attached" in resp.json()["error"]
    _attach()
    client.force_login(user)
    form = client.get(reverse("submissions:submission_create")).content.decode()
    assert f'value="{release.pk}"' in form
    resp = client.post(url, data=_reference_predictions(release), content_type="application/x-ndjson",
                       HTTP_AUTHORIZATION=f"Token {token}")
    assert resp.status_code == 201, resp.content
    sub = PredictionSubmission.objects.get(pk=resp.json()["id"])
    # one job per paper whose code is here; the 17 others are not scorable here, and the API says so
    assert sorted(sub.jobs.values_list("paper__paper_id", flat=True)) == sorted(PAPERS)
    not_scorable = resp.json()["not_scorable"]
    assert len(not_scorable) == 17 and {r["reason"] for r in not_scorable} == {"its code is not attached on this site"}
    listed = {r["slug"]: r for r in client.get("/api/v1/releases", HTTP_HOST="localhost").json()["releases"]}
    entry = listed[release.slug]
    assert entry["scorable_papers"] == 3 and len(entry["not_scorable"]) == 17
    assert entry["tasks_url"].endswith(reverse("leaderboard:release_tasks", args=[release.slug]))


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the worker and the live server use their own connections
@pytest.mark.skipif(shutil.which("redis-server") is None or shutil.which("bwrap") is None,
                    reason="needs redis-server and bubblewrap")
def test_cli_submit_to_the_published_release_is_scored_by_a_worker_to_100_percent(tmp_path, settings, live_server):
    redis = RedisServer()
    redis.start()
    settings.RQ_QUEUES = {n: {"URL": redis.url, "DEFAULT_TIMEOUT": 900} for n in ("default", "scoring", "contributions")}
    worker = None
    try:
        release = _attach()
        user = User.objects.create_user("rita", "rita@example.org", "pw-rita-123456!")
        token = api_token_create(user=user)[1]
        worker = worker_start(worker_env(redis.url, RCB_SANDBOX_BACKEND="bwrap"), name="published", log_dir=tmp_path)
        preds = tmp_path / "reference.jsonl"
        preds.write_bytes(_reference_predictions(release))
        out, err = io.StringIO(), io.StringIO()
        # the CLI in a process of its own, as a user runs it
        proc = subprocess.run(
            [sys.executable, "-m", "benchmark_core", "submit", str(preds), "--url", live_server.url, "--token", token,
             "--model-name", "Reference code", "--release", release.slug, "--wait", "--poll", "0.5", "--timeout", "300"],
            cwd=ROOT, capture_output=True, text=True, timeout=400,
        )
        out.write(proc.stdout)
        err.write(proc.stderr)
        log = (tmp_path / "published.log").read_text(errors="replace")[-3000:]
        assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}\n{log}"
        sub = PredictionSubmission.objects.get(user=user)
        assert sub.status == Status.FINISHED and sub.release == release
        per_paper = sub.evaluation.per_paper
        for pid in PAPERS:
            assert per_paper[pid]["scaled_pass_rate"] == 100.0, (pid, per_paper[pid], log)
        assert "finished" in out.getvalue()
    finally:
        if worker is not None:
            process_group_kill(worker)
        redis.stop()


@pytest.mark.django_db
def test_a_paper_in_an_unavailable_environment_is_not_scorable_from_the_import(tmp_path):
    pset = tmp_path / "pset"
    shutil.copytree(SUBSET, pset)
    import yaml

    entries = yaml.safe_load((pset / "papers.yaml").read_text())
    entries[0]["environment"] = "network"  # the test downloads a checkpoint: sandboxes have no network
    (pset / "papers.yaml").write_text(yaml.safe_dump(entries))
    call_command("import_published", str(UPSTREAM), stdout=io.StringIO())
    call_command("import_pset", str(pset), stdout=io.StringIO())
    from catalog.ranking import release_scorability

    scorability = release_scorability(release=Release.objects.get(slug=PUBLISHED_RELEASE_SLUG))
    assert scorability.scorable == ["Tanh-Init", "minp"]
    reason = next(r["reason"] for r in scorability.not_scorable if r["paper"] == entries[0]["id"])
    assert "network" in reason and "unavailable" in reason


@pytest.mark.django_db
def test_a_draft_started_from_the_release_keeps_the_entries_of_its_copies():
    """The next release's draft copies the papers with code; its generated papers.yaml keeps each
    paper's entry (timeout, annotated files), so the copies load as the originals did."""
    from contributions.release_services import release_draft_get_or_create

    release = _attach()
    draft = release_draft_get_or_create()
    rps = list(ReleasePaper.objects.filter(release=draft).exclude(folder="").select_related("paper"))
    assert sorted(rp.paper.paper_id for rp in rps) == sorted(PAPERS)
    for rp in rps:
        assert rp.folder != ReleasePaper.objects.get(release=release, paper=rp.paper).folder
        copy = paper_folder_load(rp.folder)
        assert copy.timeout == 20.0 and len(copy.annotated_files) == 1 and not copy.annotated_files[0].endswith("_ref.py")
        assert rp.entry["timeout"] == 20.0
