"""The scoring queue in Redis: a pointer per job attempt, never the truth (that is the database)."""
from __future__ import annotations

import datetime as dt

import django_rq
from django.conf import settings
from rq import Queue
from rq.exceptions import NoSuchJobError
from rq.job import Job

__all__ = ["QUEUE_NAME", "scoring_queue", "scoring_job_push", "rq_job_state", "rq_job_cancel", "queued_rq_ids"]

QUEUE_NAME = "scoring"


def scoring_queue() -> Queue:
    # a plain rq Queue: enqueueing after commit is done by the services, explicitly
    return Queue(QUEUE_NAME, connection=django_rq.get_connection(QUEUE_NAME))


def scoring_job_push(*, job_id: int, rq_job_id: str) -> None:
    """Put one attempt of a scoring job on the queue."""
    timeout = int(settings.RQ_QUEUES.get(QUEUE_NAME, {}).get("DEFAULT_TIMEOUT", 3600))
    scoring_queue().enqueue_call(
        "submissions.jobs.score_paper",
        args=(job_id, rq_job_id),
        job_id=rq_job_id,
        timeout=timeout,
        result_ttl=24 * 3600,
        failure_ttl=7 * 24 * 3600,
        description=f"score paper (scoring job {job_id})",
    )


def rq_job_state(*, rq_job_id: str) -> tuple[str | None, dt.datetime | None]:
    """The RQ status of a job and when it started, or (None, None) when Redis does not know it."""
    queue = scoring_queue()
    try:
        job = Job.fetch(rq_job_id, connection=queue.connection)
    except NoSuchJobError:
        return None, None
    status = job.get_status(refresh=False)
    started = job.started_at
    if started is not None and started.tzinfo is None:
        started = started.replace(tzinfo=dt.timezone.utc)
    return (status.value if status is not None else None), started


def queued_rq_ids() -> set[str]:
    return set(scoring_queue().get_job_ids())


def rq_job_cancel(*, rq_job_id: str) -> None:
    queue = scoring_queue()
    try:
        Job.fetch(rq_job_id, connection=queue.connection).cancel()
    except NoSuchJobError:
        pass
