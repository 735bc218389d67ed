"""The fd-forging cheat through the site: a submission of it at every demo snippet is never ranked.

The cheat writes a forged proof of run ({"completed": true, "tests_run": 1000}) to every fd from
200 to 255 (where the runner's proof channel was inherited) and leaves with os.execv('/bin/true'),
so the test script never reports anything. Scored as a worker scores it (the job entry point RQ
calls, in the bwrap sandbox), then published by its owner: it must score 0 % or carry engine
flags, and in either case stay off the ranked board.
"""
from __future__ import annotations

import json
import shutil

import pytest
from django.contrib.auth.models import User

from benchmark_core.masking import snippet_base_indent
from benchmark_core.problemset import load_problemset
from benchmark_core.tamper import review_flags
from leaderboard.selectors import boards
from submissions import jobs, lifecycle, upload
from submissions.models import PredictionSubmission, Status

from submissions_support import DEMO, bwrap_jobs_settings, demo_release_create

pytestmark = [pytest.mark.django_db, pytest.mark.slow, pytest.mark.bwrap,
              pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")]

CHEAT = """import os as _os, json as _json
for _fd in range(200, 256):
    try:
        _os.write(_fd, _json.dumps({"completed": True, "tests_run": 1000}).encode() + b"\\n")
    except OSError:
        pass
_os.execv("/bin/true", ["/bin/true"])"""


def _cheat_file() -> bytes:
    """The cheat at every snippet of the demo, indented as each snippet's body is."""
    lines = []
    for paper in load_problemset(DEMO).papers:
        for snip in paper.snippets:
            indent = snippet_base_indent(paper.files[snip.file].lines, snip)
            code = "\n".join(indent + line for line in CHEAT.splitlines())
            lines.append(json.dumps({"paper": paper.id, "file": snip.file, "snippet": snip.name, "completion": code}))
    return "\n".join(lines).encode()


@pytest.fixture(autouse=True)
def _settings(settings):
    bwrap_jobs_settings(settings)


def test_the_fd_forging_cheat_at_every_demo_snippet_is_never_ranked():
    release = demo_release_create()
    user = User.objects.create_user("forger", "f@example.org", "pw-forger-123!")
    data = _cheat_file()
    submission, created = upload.prediction_submission_create(
        user=user, release=release, data=data, model_name="Forger", file_name="forged.jsonl"
    )
    assert created and submission.predictions_count == len(data.splitlines()) >= 50
    outcomes = [jobs.score_paper(job.pk, job.rq_job_id) for job in submission.jobs.all()]
    submission = PredictionSubmission.objects.select_related("evaluation", "model").get(pk=submission.pk)
    evaluation = submission.evaluation
    # every cheat really ran (not a vacuous pass: an environment error would leave no verdict)
    assert submission.status == Status.FINISHED, (outcomes, submission.failure_reason)
    assert evaluation.results.count() == submission.predictions_count
    passed = evaluation.results.filter(passed=True).count()
    flagged = sum(1 for flags in evaluation.results.values_list("flags", flat=True) if review_flags(flags))
    assert passed == 0 or flagged >= passed, f"{passed} forged runs passed, only {flagged} flagged"
    assert evaluation.flagged_results == flagged
    lifecycle.submission_publish(submission=submission, user=user)
    board = boards.leaderboard_rows(release=release)
    row = next((r for r in board.rows if r.model_key == submission.model.key), None)
    assert row is None or (not row.ranked and row.tier is None), row
    assert all(r.model_key != submission.model.key for r in board.rows if r.ranked)
