"""The one door to RQ (django-rq): every enqueue, lookup and cancel of the site goes through here.

Redis only carries pointers (an RQ job id per attempt of a ``scoring.models.Job``); the database
says what is to be done, so whatever Redis loses is rebuilt from the rows (``scoring.jobs``). No other module of the site imports
``rq`` or ``django_rq``.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import django_rq
from django.conf import settings
from rq import Queue, Worker
from rq.defaults import DEFAULT_WORKER_TTL
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.worker import WorkerStatus

__all__ = [
    "SCORING", "CONTRIBUTIONS", "GENERATION", "URLS_MODULE", "HOME_URL_NAME", "queue_get", "job_push", "rq_job_state",
    "rq_job_cancel", "queued_rq_ids", "ScoringWorker",
]

SCORING = "scoring"
CONTRIBUTIONS = "contributions"
#: the queue of evaluations run here: requests to models' endpoints (submissions.runs)
GENERATION = "generation"
#: the operators' queue pages (django-rq's dashboard), mounted by rcbsite.urls
URLS_MODULE = "django_rq.urls"
HOME_URL_NAME = "django_rq:home"


def queue_get(name: str = SCORING) -> Queue:
    """A plain RQ queue (enqueueing after commit is the services' business, done explicitly)."""
    return Queue(name, connection=django_rq.get_connection(name))


def _timeout(name: str) -> int:
    return int(settings.RQ_QUEUES.get(name, {}).get("DEFAULT_TIMEOUT", 3600))


def job_push(*, queue: str, func: str, args: tuple, rq_job_id: str, timeout: int | None = None,
             description: str = "", meta: dict[str, Any] | None = None) -> None:
    """Put one attempt of a job on ``queue``: ``func`` is the dotted path of an entry point taking ids."""
    queue_get(queue).enqueue_call(
        func, args=args, job_id=rq_job_id, timeout=timeout or _timeout(queue), result_ttl=24 * 3600,
        failure_ttl=7 * 24 * 3600, description=description or None, meta=meta or {},
    )


def rq_job_state(*, rq_job_id: str, queue: str = SCORING) -> tuple[str | None, dt.datetime | None]:
    """The RQ status of a job and when it started, or (None, None) when Redis does not know it."""
    try:
        job = Job.fetch(rq_job_id, connection=queue_get(queue).connection)
    except NoSuchJobError:
        return None, None
    status = job.get_status(refresh=False)
    started = job.started_at
    if started is not None and started.tzinfo is None:
        started = started.replace(tzinfo=dt.timezone.utc)
    return (status.value if status is not None else None), started


def queued_rq_ids(queue: str = SCORING) -> set[str]:
    """The RQ ids waiting on ``queue``."""
    return set(queue_get(queue).get_job_ids())


def rq_job_cancel(*, rq_job_id: str, queue: str = SCORING) -> None:
    """Take a waiting job off the queue (a running one stops through its heartbeat)."""
    try:
        Job.fetch(rq_job_id, connection=queue_get(queue).connection).cancel()
    except NoSuchJobError:
        pass


class ScoringWorker(Worker):
    """The site's RQ worker (settings.RQ["WORKER_CLASS"]): a scoring job runs in the worker process
    itself, not in a work horse forked for it, so the warm sandboxes the process keeps
    (``scoring.sandbox.job_sandbox``) serve its next jobs; other queues' jobs get their horse as usual.

    What the horse gave a scoring job is kept: its own database connections (closed around each
    job), RQ's job timeout (SIGALRM in this process), a heartbeat in Redis for the job's whole time
    limit. A worker killed mid-job leaves the job's row running without a heartbeat: the watchdog
    (``reconcile``) queues it again; a cancel reaches the running test through the row's heartbeat.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        from .sandbox import sandboxes_keep, sandboxes_warm  # noqa: PLC0415

        sandboxes_keep()
        if SCORING in self.queue_names():  # what every scoring job needs, ready before the first one comes
            from benchmark_core.scoring import bootstrap_ci  # noqa: PLC0415

            sandboxes_warm()
            bootstrap_ci({"paper": (1.0, 2.0)}, n_boot=10)  # the parts of numpy a job's aggregates use

    def execute_job(self, job: Job, queue: Queue) -> None:
        if job.origin != SCORING:
            return super().execute_job(job, queue)
        from django.db import connections  # noqa: PLC0415

        execution = self.prepare_execution(job)
        connections.close_all()  # fresh connections, as a horse's: one the database dropped is not reused
        try:
            self.perform_job(job, queue, execution)
        finally:
            connections.close_all()
            self.set_state(WorkerStatus.IDLE)
        return None

    def get_heartbeat_ttl(self, job: Job, working_time: float = 0.0) -> int:
        if job.origin != SCORING:
            return super().get_heartbeat_ttl(job, working_time)
        # nobody refreshes it while the job runs here: it covers the job's whole time limit
        return DEFAULT_WORKER_TTL if job.timeout == -1 else int(job.timeout or DEFAULT_WORKER_TTL) + 60
