"""Issue 20 on the site: a completion nested past the parser's limits is flagged at upload (never a
500) and, scored as a worker scores it, fails on its own (category ``invalid``) while the correct
samples beside it pass and the (submission, paper) job finishes."""
from __future__ import annotations

import json
import shutil
import urllib.parse

import pytest
from django.contrib.auth.models import User

from accounts.services import api_token_create
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import reference_code
from submissions import jobs
from submissions.models import PredictionSubmission, Status

from submissions_support import DEMO, bwrap_jobs_settings, demo_release_create

pytestmark = pytest.mark.django_db

NESTED = ["    out = " + "-" * 100000 + "1", "    out = x" + ".T" * 50000, "    out = " + "(" * 10000 + "x" + ")" * 10000,
          "    out = " + "[" * 10000 + "]" * 10000]


@pytest.fixture(autouse=True)
def _settings(settings):
    bwrap_jobs_settings(settings)


def _upload(client, completions: list[str]):
    user = User.objects.create_user("nester", "n@example.org", "pw-nester-123!")
    token = api_token_create(user=user, name="t")[1]
    data = "".join(json.dumps({"paper": "focal-loss", "snippet": "stable sigmoid", "sample": i, "completion": c}) + "\n"
                   for i, c in enumerate(completions)).encode()
    query = urllib.parse.urlencode({"model_name": "Nester", "allow_partial": "1"})
    return client.post(f"/api/v1/submissions?{query}", data=data, content_type="application/x-ndjson",
                       HTTP_AUTHORIZATION=f"Token {token}")


def _good() -> str:
    paper = load_problemset(DEMO).paper("focal-loss")
    return "\n".join(reference_code(paper, paper.snippet("stable sigmoid")))


def test_an_upload_of_nested_completions_is_accepted_and_flagged(client):
    demo_release_create(papers=["focal-loss"])
    resp = _upload(client, [_good()] + NESTED)
    assert resp.status_code == 201, resp.content[:500]
    submission = PredictionSubmission.objects.get(pk=resp.json()["id"])
    # the parser gives up on the first two; the tokenizer refuses the brackets (a plain syntax error)
    assert [f["sample"] for f in submission.flags["unreadable"]] == [1, 2]


def _scored(client, completions: list[str]) -> list[tuple[int, bool, str, str]]:
    """Upload the completions, run the submission's jobs as a worker does: (sample, passed,
    category, output tail) of each, once every job finished."""
    demo_release_create(papers=["focal-loss"])
    resp = _upload(client, completions)
    assert resp.status_code == 201, resp.content[:500]
    submission = PredictionSubmission.objects.get(pk=resp.json()["id"])
    outcomes = [jobs.score_paper(job.pk, job.rq_job_id) for job in submission.jobs.all()]
    submission.refresh_from_db()
    assert submission.status == Status.FINISHED, (outcomes, submission.failure_reason)
    return sorted(submission.evaluation.results.filter(snippet__name="stable sigmoid").values_list(
        "sample", "passed", "category", "output_tail"))


needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")


@pytest.mark.slow
@pytest.mark.bwrap
@needs_bwrap
def test_a_nested_completion_among_correct_samples_fails_alone(client):
    good = _good()
    rows = _scored(client, [good, good, NESTED[0], good, good])
    assert [(s, p, c) for s, p, c, _ in rows] == [(0, True, ""), (1, True, ""), (2, False, "invalid"), (3, True, ""),
                                                   (4, True, "")]
    assert "nested too deeply" in rows[2][3]


@pytest.mark.slow
@pytest.mark.bwrap
@needs_bwrap
def test_a_completion_whose_output_holds_nul_bytes_is_stored(client):
    """Its output is the run's, not the site's: NUL bytes (which PostgreSQL text cannot hold) and
    invalid UTF-8 in it cost neither that verdict nor its neighbours'."""
    good = _good()
    noisy = "    import os\n    os.write(1, b'a\\x00b\\xff\\n')\n    os.write(2, b'c\\x00d\\n')\n" + good
    rows = _scored(client, [good, noisy])
    assert [(s, p) for s, p, _, _ in rows] == [(0, True), (1, True)]
    assert "\x00" not in rows[1][3] and "a\ufffdb" in rows[1][3]
