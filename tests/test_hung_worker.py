"""A worker taken for dead that answers again had hung: that loss does not count, and a job given up for it resumes."""
from __future__ import annotations

import datetime as dt

import pytest
from django.contrib.auth.models import User
from django.utils import timezone

from scoring.jobs import Heartbeat, jobs_watchdog, worker_answered_again, worker_losses, worker_name
from scoring.models import Job, JobStatus
from scoring import evaluate
from submissions import jobs as submission_jobs
from submissions import upload
from submissions.models import Status

from submissions_support import demo_release_create, in_process_scoring, predictions_bytes

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def job(settings):
    in_process_scoring(settings)
    settings.RCB_JOB_MAX_ATTEMPTS = 2
    release = demo_release_create(slug="hung", papers=["rope"])
    user = User.objects.create_user("hana", "hana@example.org", "pw-hana-123!")
    sub, _ = upload.prediction_submission_create(
        user=user, release=release, data=predictions_bytes("demo-perfect", papers=["rope"]), model_name="Hung")
    return sub.jobs.get()


def _stale(job: Job, worker: str) -> None:
    Job.objects.filter(pk=job.pk).update(status=JobStatus.RUNNING, worker=worker,
                                         heartbeat_at=timezone.now() - dt.timedelta(minutes=10))


def test_a_hung_worker_that_answers_again_is_not_a_death_and_the_job_given_up_resumes(job):
    """Taken for dead first, then a worker that died: given up at 2 of 2; the first answers again: 1 of 2, resumed."""
    _stale(job, worker_name())  # this process "hangs" on the job
    assert jobs_watchdog(stale_after=60) == {"requeued": [job.pk], "failed": []}
    _stale(job, "elsewhere:1")  # then a worker that really died
    assert jobs_watchdog(stale_after=60) == {"requeued": [], "failed": [job.pk]}
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and worker_losses(job) == 2  # the give-up's own death included
    job.submission.refresh_from_db()
    assert job.submission.status == Status.FAILED

    # the hung one comes back: it says so, its loss no longer counts, the job (1 death of 2) resumes
    assert worker_answered_again(job_id=job.pk) is True
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and worker_losses(job) == 1  # elsewhere:1 really died
    events = [h["event"] for h in job.history]
    assert any(e.startswith(f"the worker {worker_name()} answered again") for e in events)
    assert events[-1].startswith("attempt 3 queued: resumed: the worker")
    job.submission.refresh_from_db()
    assert job.submission.status in (Status.QUEUED, Status.RUNNING)
    # once per worker and job; a worker never taken for dead has nothing to say
    assert worker_answered_again(job_id=job.pk) is False
    # one more death gives it up again (1 + 1 of 2): the guard against a job that kills its worker holds
    _stale(job, "elsewhere:2")
    assert jobs_watchdog(stale_after=60) == {"requeued": [], "failed": [job.pk]}
    job.refresh_from_db()
    Job.objects.filter(pk=job.pk).update(status=JobStatus.QUEUED)  # (as a re-run would)
    job.refresh_from_db()
    assert submission_jobs.score_paper(job_id=job.pk, rq_job_id=job.rq_job_id) == "done"
    job.submission.refresh_from_db()
    assert job.submission.status == Status.FINISHED and job.submission.failure_reason == ""


def test_the_heartbeat_of_a_resumed_worker_records_it(job):
    _stale(job, worker_name())
    Job.objects.filter(pk=job.pk).update(rq_job_id="rcb-mine")
    assert jobs_watchdog(stale_after=60)["requeued"] == [job.pk]
    beat = Heartbeat(job.pk, "rcb-mine", interval=0.1)  # the hung attempt's heartbeat, running again
    beat.start()
    beat.join(10)
    assert beat.lost
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and worker_losses(job) == 0
    assert any("answered again" in h["event"] for h in job.history)


def test_a_worker_that_died_three_times_still_gives_the_job_up(job, settings):
    settings.RCB_JOB_MAX_ATTEMPTS = 3
    for n in range(3):
        _stale(job, f"dead:{n}")
        jobs_watchdog(stale_after=60)
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED and "stopped answering 3 times" in job.error
    assert worker_answered_again(job_id=job.pk) is False  # this process never ran it
    job.refresh_from_db()
    assert job.status == JobStatus.FAILED


def test_the_last_worker_of_a_job_given_up_that_answers_again_resumes_it(job):
    _stale(job, "dead:1")
    jobs_watchdog(stale_after=60)
    _stale(job, worker_name())  # the death that gives it up is this process, which had only hung
    assert jobs_watchdog(stale_after=60)["failed"] == [job.pk]
    assert worker_answered_again(job_id=job.pk) is True
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and worker_losses(job) == 1


def test_an_attempt_that_ends_on_a_dropped_connection_after_its_hang_still_says_its_worker_answered_again(job, monkeypatch):
    """The soak's case: a host stopped mid-job, its connection ended meanwhile; it resumes, its write
    meets the dropped connection (not the heartbeat): the job was given away, and its worker did not die."""
    from django.db import OperationalError

    real = evaluate.run_tasks

    def hang_then_drop(tasks, *, progress, **kwargs):
        def write(run):
            _stale(job, worker_name())  # what the watchdog sees while this host is stopped...
            Job.objects.filter(pk=job.pk).update(rq_job_id=job.rq_job_id)
            jobs_watchdog(stale_after=60)  # ...it gives the job to a new attempt
            raise OperationalError("terminating connection due to administrator command")

        return real(tasks, progress=write, **kwargs)

    monkeypatch.setattr(evaluate, "run_tasks", hang_then_drop)
    assert submission_jobs.score_paper(job_id=job.pk, rq_job_id=job.rq_job_id) == "retry"
    job.refresh_from_db()
    assert job.status == JobStatus.QUEUED and worker_losses(job) == 0
    assert any(h["event"].startswith(f"the worker {worker_name()} answered again") for h in job.history)
