"""Contribution jobs are never stuck or lost: a failing job says why; lost jobs come back by reconcile."""
from __future__ import annotations

import datetime as dt
import os
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.db import transaction
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from contributions.models import PaperContribution
from contributions.services import contribution_validate
from scoring.jobs import jobs_failed_retry, jobs_watchdog
from scoring.models import Job, JobKind, JobStatus
from contributions_support import contribution_env, run_worker, weak_paper_zip, zip_files, WEAK_MODULE

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

STRONG = {"calc.py": WEAK_MODULE, "paper2code_paper.md": "# Calc\n",
          "paper2code_test.py": "import calc\nassert calc.add(2, 3) == 5\nassert calc.mul(2, 3) == 6\n"}


@pytest.fixture
def env(tmp_path):
    with contribution_env(tmp_path) as conn:
        yield conn


@pytest.fixture
def contributor(client):
    user = User.objects.create_user("carla", password="pw")
    client.force_login(user)
    return user


def upload(client, data: bytes, paper_id: str = "calc"):
    response = client.post(reverse("contributions:new"), {
        "paper_id": paper_id, "title": "Calc", "archive": SimpleUploadedFile("calc.zip", data),
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    return PaperContribution.objects.get(paper_id=paper_id)


def test_a_job_that_raises_ends_in_an_error_state_with_the_reason(env, client, contributor):
    contribution = upload(client, zip_files(STRONG))
    with override_settings(RCB_SANDBOX_BACKEND="no-such-backend"):
        assert run_worker() == 1  # RQ records the failure too
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.ERROR
    assert "no-such-backend" in contribution.report["error"]
    page = client.get(reverse("contributions:detail", args=[contribution.pk])).content.decode()
    assert "the checks could not run" in page and "no-such-backend" in page
    # the contributor (or an admin) can try again: a revision goes through normally
    response = client.post(reverse("contributions:revise", args=[contribution.pk]), {
        "paper_id": "calc", "title": "Calc", "archive": SimpleUploadedFile("calc.zip", zip_files(STRONG)),
    })
    assert response.status_code == 302
    assert run_worker() == 0
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.AWAITING_REVIEW and contribution.revision == 2


def test_local_backend_is_refused_for_untrusted_code(env, client, contributor):
    contribution = upload(client, zip_files(STRONG))
    with override_settings(RCB_SANDBOX_BACKEND="local", RCB_ALLOW_LOCAL_SANDBOX=False):
        assert run_worker() == 1
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.ERROR
    assert "isolates nothing" in contribution.report["error"]


def test_jobs_lost_by_redis_are_queued_again_by_reconcile(env, client, contributor):
    first = upload(client, zip_files(STRONG), "calc-one")
    second = upload(client, weak_paper_zip(), "calc-two")
    env.flushdb()  # Redis lost everything (our own database index)
    assert run_worker() == 0
    first.refresh_from_db()
    assert first.status == PaperContribution.SUBMITTED  # nothing ran: the jobs are gone
    # a third one got stuck 'validating' long ago (its worker died)
    second.status = PaperContribution.VALIDATING
    second.status_changed_at = timezone.now() - dt.timedelta(days=1)
    second.save()

    # a while later (a push after commit may be under way for a second: reconcile leaves those alone)
    Job.objects.update(enqueued_at=timezone.now() - dt.timedelta(minutes=1))
    out = StringIO()
    call_command("reconcile", stdout=out)
    assert "re-enqueued (lost by Redis): 2" in out.getvalue()
    second.refresh_from_db()
    assert second.status == PaperContribution.SUBMITTED  # its checks wait again, with a fresh clock
    out = StringIO()
    call_command("reconcile", stdout=out)  # idempotent: the jobs are queued now
    assert "re-enqueued (lost by Redis): 0" in out.getvalue()

    assert run_worker() == 0
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == PaperContribution.AWAITING_REVIEW
    assert second.status == PaperContribution.CHANGES_REQUESTED
    assert "multiply numbers" in second.report["checks"][3]["summary"]


def test_a_job_for_an_older_revision_does_nothing(env, client, contributor):
    contribution = upload(client, zip_files(STRONG))
    PaperContribution.objects.filter(pk=contribution.pk).update(revision=2)
    assert contribution_validate(contribution_id=contribution.pk, revision=1) is None
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.SUBMITTED and contribution.report == {}


def test_a_revision_uploaded_before_the_checks_ran_overtakes_them(env, client, contributor):
    from contributions.services import contribution_enqueue_validation

    contribution = upload(client, weak_paper_zip())
    assert run_worker() == 0
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.CHANGES_REQUESTED
    # an admin asks for the checks again (the admin action), and before they run the contributor uploads a fix
    with transaction.atomic():
        contribution_enqueue_validation(contribution=contribution, note="asked again by an admin")
    first = Job.objects.get(kind=JobKind.CONTRIBUTION_CHECK, contribution=contribution, revision=1)
    assert (first.status, first.attempt) == (JobStatus.QUEUED, 2)
    response = client.post(reverse("contributions:revise", args=[contribution.pk]), {
        "paper_id": "calc", "title": "Calc", "archive": SimpleUploadedFile("calc.zip", zip_files(STRONG)),
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    first.refresh_from_db()
    assert (first.status, first.error) == (JobStatus.CANCELLED, "overtaken by revision 2")
    second = Job.objects.get(kind=JobKind.CONTRIBUTION_CHECK, contribution=contribution, revision=2)
    assert second.status == JobStatus.QUEUED
    assert run_worker() == 0  # revision 1's RQ job finds its row cancelled and does nothing
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.AWAITING_REVIEW and contribution.report["revision"] == 2
    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, second.status) == (JobStatus.CANCELLED, JobStatus.FINISHED)


def test_lost_baseline_jobs_are_queued_again(env, client, contributor):
    from django.contrib.auth.models import Group

    from contributions.release_services import release_publish
    from contributions.services import contribution_review
    from catalog.models import Evaluation

    contribution = upload(client, zip_files(STRONG))
    assert run_worker() == 0
    reviewer = User.objects.create_user("rita", password="pw", is_staff=True)
    reviewer.groups.add(Group.objects.get_or_create(name="reviewers")[0])
    contribution.refresh_from_db()
    contribution_review(contribution=contribution, reviewer=reviewer, decision="approve")
    contribution.refresh_from_db()
    release = contribution.release_paper.release
    release_publish(release=release, by=reviewer)
    env.flushdb()
    assert run_worker() == 0
    assert all(not ev.complete for ev in Evaluation.objects.filter(release=release))
    assert Job.objects.filter(kind=JobKind.RELEASE_BASELINE, status=JobStatus.QUEUED).count() == 2
    Job.objects.update(enqueued_at=timezone.now() - dt.timedelta(minutes=1))
    out = StringIO()
    call_command("reconcile", stdout=out)
    assert "re-enqueued (lost by Redis): 2" in out.getvalue()
    assert run_worker() == 0
    rates = {ev.model.baseline: ev.scaled_pass_rate for ev in Evaluation.objects.filter(release=release)}
    assert rates == {"reference": 100.0, "empty": 0.0}


SLOW_TEST = "import time\nimport calc\ntime.sleep(1.0)\nassert calc.add(2, 3) == 5\nassert calc.mul(2, 3) == 6\n"


def test_worker_killed_mid_check_the_contribution_still_finishes(env, client, contributor, tmp_path):
    """SIGKILL a real worker process while it runs the checks; reconcile and a new worker finish them."""
    import signal
    import subprocess
    import sys
    import time

    from django.conf import settings

    from contributions_support import ROOT, redis_url
    from submissions_support import database_url, process_group_kill, wait_for

    contribution = upload(client, zip_files({**STRONG, "paper2code_test.py": SLOW_TEST}))
    worker_env = {
        **os.environ, "DJANGO_DEBUG": "1", "DATABASE_URL": database_url(), "REDIS_URL": redis_url(),
        "DATABASE_CONN_MAX_AGE": "0", "RCB_MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "RCB_PSET_ROOT": str(settings.RCB_PSET_ROOT), "RCB_SANDBOX_BACKEND": settings.RCB_SANDBOX_BACKEND,
        "RCB_ALLOW_LOCAL_SANDBOX": "1" if getattr(settings, "RCB_ALLOW_LOCAL_SANDBOX", False) else "0",
        "RCB_SCORING_THREADS": "1",
    }

    def start(*extra: str) -> subprocess.Popen:
        log = open(tmp_path / f"worker-{time.time_ns()}.log", "wb")
        return subprocess.Popen([sys.executable, "manage.py", "rqworker", "contributions", *extra], cwd=ROOT,
                                env=worker_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def status() -> str:
        return PaperContribution.objects.values_list("status", flat=True).get(pk=contribution.pk)

    worker = start()
    try:
        wait_for(lambda: status() == PaperContribution.VALIDATING, timeout=60, what="the worker to start the checks")
        def progress() -> dict:
            return PaperContribution.objects.get(pk=contribution.pk).report.get("progress") or {}

        # live progress on the way (each run sleeps 1 s): the worker is in the middle of the checks
        wait_for(lambda: progress().get("done", 0) >= 1, timeout=60, what="the first test runs to be reported")
        assert progress()["done"] < progress()["total"] == 5  # 3 reference runs + 2 snippets blanked
        page = client.get(reverse("contributions:detail", args=[contribution.pk])).content.decode()
        assert "test runs done" in page
        process_group_kill(worker, signal.SIGKILL)
    finally:
        process_group_kill(worker, signal.SIGKILL)
    assert status() == PaperContribution.VALIDATING  # stranded: its worker is gone

    # the job stays 'started' in Redis until RQ notices the dead worker; its row's heartbeat stopped with it
    job = Job.objects.get(kind=JobKind.CONTRIBUTION_CHECK, contribution=contribution)
    assert job.status == JobStatus.RUNNING and job.attempt == 1
    assert jobs_watchdog(stale_after=0) == {"requeued": [job.pk], "failed": []}
    assert status() == PaperContribution.SUBMITTED
    survivor = start("--burst")
    try:
        survivor.wait(180)
    finally:
        process_group_kill(survivor, signal.SIGKILL)
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.AWAITING_REVIEW, contribution.report
    assert contribution.report["passed"] and contribution.report["revision"] == 1
    assert contribution.revisions.count() == 1


def test_a_baseline_job_that_keeps_failing_is_not_retried_forever(env, client, contributor):
    import shutil
    from pathlib import Path

    from django.contrib.auth.models import Group

    from contributions.release_services import MAX_BASELINE_ATTEMPTS, release_publish
    from contributions.services import contribution_review

    contribution = upload(client, zip_files(STRONG))
    assert run_worker() == 0
    reviewer = User.objects.create_user("rita", password="pw", is_staff=True)
    reviewer.groups.add(Group.objects.get_or_create(name="reviewers")[0])
    contribution.refresh_from_db()
    contribution_review(contribution=contribution, reviewer=reviewer, decision="approve")
    contribution.refresh_from_db()
    release = contribution.release_paper.release
    release_publish(release=release, by=reviewer)
    # the files vanished: from the release folder, the papers storage and this worker's cache
    from django.conf import settings
    from django.core.files.storage import storages

    from scoring import paper_store

    rp = contribution.release_paper
    rp.refresh_from_db()
    shutil.rmtree(Path(rp.folder))
    if rp.archive:
        storages[paper_store.STORAGE_ALIAS].delete(paper_store._name(rp.archive))
        shutil.rmtree(Path(settings.RCB_PAPER_CACHE) / rp.archive, ignore_errors=True)
    assert run_worker() == 2  # both baselines fail, with the reason on their rows and in RQ's failed registry
    jobs = Job.objects.filter(kind=JobKind.RELEASE_BASELINE, evaluation__release=release)
    assert sorted(jobs.values_list("status", flat=True)) == [JobStatus.FAILED] * 2
    assert all(job.error for job in jobs)  # the reason, for the operators
    for _ in range(MAX_BASELINE_ATTEMPTS - 1):
        assert len(jobs_failed_retry()) == 2
        assert run_worker() == 2
    assert jobs_failed_retry() == []  # given up after three attempts: a human has to look
    assert set(jobs.values_list("attempt", flat=True)) == {MAX_BASELINE_ATTEMPTS}


def test_checks_that_keep_killing_their_worker_end_in_an_error_after_three_attempts(env, client, contributor):
    from django.conf import settings

    contribution = upload(client, zip_files(STRONG))
    job = Job.objects.get(kind=JobKind.CONTRIBUTION_CHECK, contribution=contribution, revision=1)
    long_ago = timezone.now() - dt.timedelta(hours=1)
    for attempt in range(1, settings.RCB_JOB_MAX_ATTEMPTS + 1):
        job.refresh_from_db()
        assert job.attempt == attempt and job.status == JobStatus.QUEUED
        # what a worker dying mid-check leaves: the row running with a heartbeat that stopped long ago
        Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, heartbeat_at=long_ago, worker=f"dead:{attempt}")
        PaperContribution.objects.filter(pk=contribution.pk).update(status=PaperContribution.VALIDATING)
        report = jobs_watchdog(stale_after=60)
        last = attempt == settings.RCB_JOB_MAX_ATTEMPTS
        assert report == {"requeued": [] if last else [job.pk], "failed": [job.pk] if last else []}
    contribution.refresh_from_db()
    assert contribution.status == PaperContribution.ERROR
    assert "stopped answering 3 times" in contribution.report["error"]
    assert "an administrator has to look" in contribution.report["error"]
