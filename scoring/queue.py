"""The one door to RQ (django-rq): every enqueue, lookup and cancel of the site goes through here.

Redis only carries pointers (an RQ job id per attempt); the database says what is to be done, so
whatever Redis loses is rebuilt from the rows (``reconcile``). No other module of the site imports
``rq`` or ``django_rq``.
"""
from __future__ import annotations

import datetime as dt
from typing import Any

import django_rq
from django.conf import settings
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job
from rq.registry import StartedJobRegistry

__all__ = [
    "SCORING", "CONTRIBUTIONS", "URLS_MODULE", "HOME_URL_NAME", "queue_get", "job_push", "rq_job_state",
    "rq_job_cancel", "queued_rq_ids", "job_alive", "job_forget", "job_attempt", "scoring_job_push",
]

SCORING = "scoring"
CONTRIBUTIONS = "contributions"
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


def scoring_job_push(*, job_id: int, rq_job_id: str) -> None:
    """Put one attempt of a submission's paper-scoring job on the scoring queue."""
    job_push(queue=SCORING, func="submissions.jobs.score_paper", args=(job_id, rq_job_id), rq_job_id=rq_job_id,
             description=f"score paper (scoring job {job_id})")


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


def job_alive(*, queue: str, rq_job_id: str) -> bool:
    """Is the job waiting or running in Redis? (A worker that died leaves it 'started' until RQ's cleanup.)"""
    q = queue_get(queue)
    StartedJobRegistry(queue=q).cleanup()  # moves jobs of workers that stopped heart-beating to 'failed'
    try:
        status = Job.fetch(rq_job_id, connection=q.connection).get_status(refresh=True)
    except NoSuchJobError:
        return False
    return status in ("queued", "started", "deferred", "scheduled")


def job_forget(*, queue: str, rq_job_id: str) -> None:
    """Drop what Redis still holds of a job (failed or stuck) so it can be queued again under its id."""
    try:
        Job.fetch(rq_job_id, connection=queue_get(queue).connection).delete()
    except NoSuchJobError:
        pass


def job_attempt(*, queue: str, rq_job_id: str) -> int:
    """How many times the job was queued, from its RQ meta (0 when Redis has no trace of it)."""
    try:
        return int(Job.fetch(rq_job_id, connection=queue_get(queue).connection).meta.get("attempt", 1))
    except NoSuchJobError:
        return 0
