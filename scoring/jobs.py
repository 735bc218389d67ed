"""The one job layer: attempts, heartbeat, watchdog and re-enqueue for every kind of ``Job``.

Every kind of work (a submission's paper, a contribution's checks, a release baseline) is a
``scoring.models.Job`` row and goes through the same rules here:

- an attempt is a fresh RQ id on the row (``job_requeue``), pushed to the kind's queue after the
  transaction commits; a worker may only claim a queued job holding its own RQ id
  (``job_claim``), so a stale copy of a job left in Redis does nothing;
- an attempt is run by ``job_execute``, the one attempt of every kind: claim, the kind's ``settle``,
  the heartbeat, the kind's work (``body``), the end (finished, failed, or another status the body
  ends it with: ``JobEnds``, e.g. an environment error), ``settle`` again;
- a running attempt touches its row every ``RCB_HEARTBEAT_SECONDS`` (``Heartbeat``); when the row
  is no longer its own (cancelled, or given to another attempt) the heartbeat says so and the
  work stops;
- a dropped database connection queues a new attempt on a fresh connection
  (``job_retry_after_db_loss``): never charged to what the job is for;
- ``jobs_reconcile`` (the ``reconcile`` command, the one watchdog): running attempts whose heartbeat
  stopped are queued again, failed for good after ``RCB_JOB_MAX_ATTEMPTS`` worker deaths; queued
  rows Redis lost are pushed again; kinds that retry failures get them again; each kind's own
  repair (``sweep``) runs too.

What a kind does, and what its owner learns when its job is given up, is registered by the app
that owns it (``kind_register``, from its ``AppConfig.ready``): this module imports no app above it.
"""
from __future__ import annotations

import datetime as dt
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.db.models import Q, QuerySet
from django.utils import timezone
from redis.exceptions import RedisError

from . import queue
from .models import JOB_ACTIVE, Job, JobKind, JobStatus

__all__ = [
    "KindSpec", "kind_register", "kind_spec", "job_create", "job_requeue", "job_claim", "job_end", "history_add",
    "Heartbeat", "Attempt", "JobEnds", "JobWaits", "job_execute", "job_retry_after_db_loss", "job_wait",
    "worker_losses", "WORKER_LOST", "jobs_watchdog", "jobs_lost_requeue", "jobs_failed_retry", "jobs_reconcile",
    "worker_name", "worker_answered_again",
]

logger = logging.getLogger(__name__)

#: the watchdog's word in a job's history for an attempt whose worker died (stale heartbeat)
WORKER_LOST = "stopped answering"
#: the word of a worker taken for dead that was still running (it had hung): that loss does not count
ANSWERED_AGAIN = "answered again"
#: a history event that resets the count of worker deaths (a person asked for it again)
RERUN_MARK = " re-run by "


@dataclass(frozen=True)
class KindSpec:
    """What a kind of job is: its RQ entry point (dotted path taking ``(job_id, rq_job_id)``) and
    queue, its time limit, and its owner's hooks."""

    entry: str
    queue: str
    #: seconds an attempt may run (None: the queue's default)
    timeout: Callable[[], int | None] = lambda: None
    #: the jobs of this kind the watchdog looks after (e.g. not those of a cancelled submission)
    watched: Callable[[QuerySet], QuerySet] = lambda jobs: jobs
    #: told when the watchdog gives a job up (after its worker died too often) or a job fails
    on_failed: Callable[[Job, str], None] | None = None
    #: told when a job is queued again by the watchdog or reconcile
    on_requeued: Callable[[Job], None] | None = None
    #: failed attempts of this kind queued again by reconcile, up to this many attempts in all (0: none)
    retry_failed: int = 0
    #: the kind's own repair, run by every reconcile; returns what it did (ids)
    sweep: Callable[[], list] | None = None
    #: brings what the job is for up to date with its state (e.g. its submission's status): after an
    #: attempt is claimed, after it ends, and after an environment recheck queues the job again
    settle: Callable[[Job], None] | None = None
    #: an attempt's failure is raised again for RQ's failed-job registry, where operators find the
    #: traceback (False: it is logged, and the attempt returns "failed")
    raise_failures: bool = True


_KINDS: dict[str, KindSpec] = {}


def kind_register(kind: str, spec: KindSpec) -> None:
    """Say what ``kind`` of job does (called once per kind by the owning app's ``ready``)."""
    if kind not in JobKind.values:
        raise ValueError(f"unknown kind of job: {kind!r}")
    _KINDS[kind] = spec


def kind_spec(kind: str) -> KindSpec:
    try:
        return _KINDS[kind]
    except KeyError:
        raise LookupError(f"no app registered the kind of job {kind!r} (is it in INSTALLED_APPS?)") from None


def _now() -> dt.datetime:
    return timezone.now()


def worker_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def history_add(job_id: int, event: str) -> None:
    """Append an event to the job's history (the last 50 kept): what operators read."""
    job = Job.objects.filter(pk=job_id).only("history").first()
    if job is None:
        return
    history = (job.history or [])[-49:] + [{"at": _now().isoformat(timespec="seconds"), "event": event}]
    Job.objects.filter(pk=job_id).update(history=history)


def _describe(job: Job) -> str:
    return f"{job.get_kind_display()} (job {job.pk})"


def _push_after_commit(job: Job, rq_job_id: str) -> None:
    spec = kind_spec(job.kind)
    job_id, job_queue, description = job.pk, job.queue, _describe(job)

    def push() -> None:
        try:
            queue.job_push(queue=job_queue, func=spec.entry, args=(job_id, rq_job_id), rq_job_id=rq_job_id,
                           timeout=spec.timeout(), description=description)
        except RedisError as exc:
            # the row stays queued: reconcile (run periodically) puts it on the queue when Redis is back
            logger.warning("job %s not enqueued (%s); reconcile will enqueue it", job_id, exc)

    transaction.on_commit(push)


def job_requeue(job: Job, *, expect: Q, note: str) -> bool:
    """Start a new attempt of ``job`` if its row is still as ``expect`` says; push it after commit."""
    attempt = job.attempt + 1
    rq_job_id = f"rcb-{job.kind.split('_')[0]}-{job.pk}-{attempt}-{secrets.token_hex(3)}"
    changed = Job.objects.filter(Q(pk=job.pk, rq_job_id=job.rq_job_id) & expect).update(
        status=JobStatus.QUEUED, attempt=attempt, rq_job_id=rq_job_id, enqueued_at=_now(), heartbeat_at=None,
        started_at=None, finished_at=None, worker="", error="",
    )
    if not changed:
        return False
    job.attempt, job.rq_job_id, job.status = attempt, rq_job_id, JobStatus.QUEUED
    history_add(job.pk, f"attempt {attempt} queued: {note}")
    _push_after_commit(job, rq_job_id)
    return True


def job_create(*, kind: str, note: str, **links: Any) -> Job:
    """A new job of ``kind`` for what ``links`` name, its first attempt queued after commit."""
    spec = kind_spec(kind)
    job = Job.objects.create(kind=kind, queue=spec.queue, **links)
    job_requeue(job, expect=Q(status=JobStatus.QUEUED), note=note)
    return job


def job_claim(*, job_id: int, rq_job_id: str) -> Job | None:
    """Take the queued attempt ``rq_job_id`` of the job for this worker; None when it is not that."""
    now = _now()
    claimed = Job.objects.filter(pk=job_id, rq_job_id=rq_job_id, status=JobStatus.QUEUED).update(
        status=JobStatus.RUNNING, started_at=now, heartbeat_at=now, worker=worker_name(), error=""
    )
    if not claimed:
        logger.info("job %s: RQ job %s is not its current queued attempt; nothing to do", job_id, rq_job_id)
        return None
    job = Job.objects.get(pk=job_id)
    history_add(job_id, f"attempt {job.attempt} started on {job.worker}")
    return job


def job_end(*, job_id: int, rq_job_id: str, status: str, error: str = "", note: str = "") -> bool:
    """End the running attempt ``rq_job_id`` as ``status``; False when it was no longer ours."""
    ended = Job.objects.filter(pk=job_id, rq_job_id=rq_job_id, status=JobStatus.RUNNING).update(
        status=status, error=error[:2000], finished_at=_now()
    )
    if ended and note:
        history_add(job_id, note)
    return bool(ended)


class Heartbeat(threading.Thread):
    """Touch the job row every few seconds while it runs; notice when the job is no longer ours."""

    def __init__(self, job_id: int, rq_job_id: str, interval: float | None = None):
        interval = settings.RCB_HEARTBEAT_SECONDS if interval is None else interval
        super().__init__(name=f"heartbeat-{job_id}", daemon=True)
        self.job_id, self.rq_job_id, self.interval = job_id, rq_job_id, interval
        self.halt = threading.Event()
        self.lost = False
        #: called once when the job is no longer ours: it ends the running work (closes its session)
        self.on_lost: Any = None

    def run(self) -> None:
        try:
            while not self.halt.wait(self.interval):
                try:
                    alive = Job.objects.filter(
                        pk=self.job_id, rq_job_id=self.rq_job_id, status=JobStatus.RUNNING
                    ).update(heartbeat_at=_now())
                except DatabaseError as exc:  # a database blip must not end the job; the next beat retries
                    logger.warning("heartbeat of job %s failed: %s", self.job_id, exc)
                    close_old_connections()
                    continue
                if not alive:  # cancelled, or the watchdog gave the job to another attempt
                    self.lost = True
                    try:
                        worker_answered_again(job_id=self.job_id)
                    except DatabaseError as exc:
                        logger.warning("job %s: could not record that its worker answered again: %s", self.job_id, exc)
                    if self.on_lost is not None:
                        try:
                            self.on_lost()
                        except Exception:  # the work is ending anyway; its result is not written
                            logger.warning("job %s: stopping its running work failed", self.job_id, exc_info=True)
                    return
        finally:
            connection.close()

    def stop(self) -> None:
        self.halt.set()
        self.join(timeout=self.interval + 5)


def reason_of(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:2000]


def job_retry_after_db_loss(*, job_id: int, rq_job_id: str, reason: str, tries: int = 10) -> None:
    """Queue the job again on a fresh connection; if the database stays away, the watchdog will.

    The attempt is ours while the row holds our RQ id, running or (the loss came while claiming it)
    still queued; a new attempt does not count as a lost worker (``worker_losses``).
    """
    ours = Q(status__in=JOB_ACTIVE)
    for n in range(tries):
        if not connection.in_atomic_block:  # (a test's transaction keeps its connection)
            connection.close()  # the dead connection goes; the next query opens a new one
        try:
            with transaction.atomic():
                job = Job.objects.filter(ours, pk=job_id, rq_job_id=rq_job_id).first()
                if job is None or job_requeue(job, expect=ours,
                                              note=f"the database connection was lost ({reason[:120]})"):
                    return
        except DatabaseError as exc:
            logger.warning("job %s: database still unreachable (%s)", job_id, exc)
        time.sleep(min(0.5 * (n + 1), 3))
    logger.error("job %s: database unreachable; left running for the watchdog", job_id)


def job_wait(*, job_id: int, rq_job_id: str, reason: str) -> bool:
    """Give the running attempt back to the queue *later*: something outside the job is away (the
    papers storage, room on this host) and an immediate retry would meet it again.

    The row becomes a new queued attempt with ``reason`` as its error (what its owner reads) and is
    not pushed: the watchdog's next round finds a queued job Redis does not hold and pushes it
    (``jobs_lost_requeue``), so a fault that lasts is retried once per round, never failed for good.
    Like a lost database connection, it does not count as a dead worker (``worker_losses``).
    False when the attempt was no longer ours.
    """
    attempt_id = f"rcb-wait-{job_id}-{secrets.token_hex(4)}"  # in no queue: the watchdog pushes it
    ours = Job.objects.filter(pk=job_id, rq_job_id=rq_job_id, status=JobStatus.RUNNING)
    attempt = ours.values_list("attempt", flat=True).first()
    # one conditional update: a cancel or the watchdog that came first keeps the row
    if attempt is None or not ours.update(
        status=JobStatus.QUEUED, attempt=attempt + 1, rq_job_id=attempt_id, enqueued_at=_now(),
        heartbeat_at=None, started_at=None, finished_at=None, worker="", error=reason[:2000],
    ):
        return False
    history_add(job_id, f"attempt {attempt + 1} waits: {reason[:200]}; the watchdog queues it at its next round")
    return True


#: what an attempt came to (``Attempt.outcome``): its work done, failed, ended with another status by
#: the work (``JobEnds``: e.g. "environment"), lost (cancelled or re-assigned meanwhile), not ours to
#: run ("skipped": a stale RQ job, or the job is not queued), queued again after a dropped database
#: connection ("retry")
DONE, FAILED, LOST, SKIPPED, RETRY = "done", "failed", "lost", "skipped", "retry"
#: ... or given back to wait for something outside the job that is away for now (``JobWaits``: the
#: papers storage, room on this host, the sandbox engine): queued again by the watchdog's next round
WAIT = "wait"


@dataclass(frozen=True)
class Attempt:
    """What ``job_execute`` made of one attempt: its outcome and what the work returned (done only)."""

    outcome: str
    result: Any = None


class JobWaits(Exception):
    """Raised (or subclassed) by a job's work when something outside the job is away for now: the
    attempt is given back to wait (``job_wait``), never failed for good nor charged to the job;
    ``wait_reason()`` says so in words its owner reads (the job's error while it waits)."""

    def wait_reason(self) -> str:
        return f"waiting: {self}; this resumes by itself when it is back, nothing is lost or charged"


class JobEnds(Exception):
    """Raised by a job's work to end its attempt with ``status`` (not finished, not failed), e.g. an
    environment error: the job waits for a repair. ``after`` runs once the row says so."""

    def __init__(self, status: str, reason: str, *, after: Callable[[], None] | None = None):
        super().__init__(reason)
        self.status, self.reason, self.after = status, reason, after


def job_execute(*, job_id: int, rq_job_id: str, body: Callable[[Job, Heartbeat], Any]) -> Attempt:
    """Run one attempt of a job whose work is ``body(job, beat)``: the one attempt of every kind.

    Claim the attempt (not ours: "skipped"), settle the kind's owner (``KindSpec.settle``), beat
    while ``body`` runs, end the row: finished ("done"), ``JobEnds``' status, or failed with the
    reason (the kind's owner told; raised again for RQ unless the kind says otherwise); a job no
    longer ours meanwhile is left alone ("lost"). Then settle again. A dropped database connection,
    while claiming, working or settling, queues a new attempt on a fresh connection ("retry"):
    never charged to what the job is for.
    """
    from django.db import InterfaceError, OperationalError  # noqa: PLC0415  (subclasses of DatabaseError)

    try:
        job = job_claim(job_id=job_id, rq_job_id=rq_job_id)
        if job is None:
            return Attempt(SKIPPED)
        spec = kind_spec(job.kind)
        if spec.settle is not None:
            spec.settle(job)
    except (InterfaceError, OperationalError) as exc:
        logger.warning("job %s: database connection lost while claiming it (%s); queued again", job_id, exc)
        job_retry_after_db_loss(job_id=job_id, rq_job_id=rq_job_id, reason=reason_of(exc))
        return Attempt(RETRY)
    outcome, result = _attempt_run(job, rq_job_id, body, spec)
    try:
        if outcome == DONE:
            job_end(job_id=job_id, rq_job_id=rq_job_id, status=JobStatus.FINISHED,
                    note=f"attempt {job.attempt} finished")
        # whatever ended the attempt, a worker still running it that was taken for dead meanwhile
        # had hung: it says so, and that loss does not count (its job given up for it resumes)
        worker_answered_again(job_id=job_id)
        if spec.settle is not None:
            spec.settle(job)
    except (InterfaceError, OperationalError) as exc:
        # lost while settling: the same remedy, not the RQ failure that would leave the row for the watchdog
        logger.warning("job %s: database connection lost while settling it (%s); queued again", job_id, exc)
        job_retry_after_db_loss(job_id=job_id, rq_job_id=rq_job_id, reason=reason_of(exc))
        return Attempt(RETRY)
    return Attempt(outcome, result if outcome == DONE else None)


def _attempt_run(job: Job, rq_job_id: str, body: Callable[[Job, Heartbeat], Any], spec: KindSpec) -> tuple[str, Any]:
    """The work of an attempt under its heartbeat: (outcome, what ``body`` returned)."""
    from django.db import InterfaceError, OperationalError  # noqa: PLC0415

    beat = Heartbeat(job.pk, rq_job_id)
    beat.start()
    try:
        result = body(job, beat)
        return (LOST if beat.lost else DONE), result
    except JobEnds as end:
        label = JobStatus(end.status).label if end.status in JobStatus.values else end.status
        job_end(job_id=job.pk, rq_job_id=rq_job_id, status=end.status, error=end.reason[:2000],
                note=f"attempt {job.attempt}: {label}: {end.reason[:200]}")
        if end.after is not None:
            end.after()
        return end.status, None
    except (InterfaceError, OperationalError) as exc:
        logger.warning("job %s: database connection lost (%s); queued again", job.pk, exc)
        job_retry_after_db_loss(job_id=job.pk, rq_job_id=rq_job_id, reason=reason_of(exc))
        return RETRY, None
    except BaseException as exc:
        if _waits(exc):
            # not the job's fault, and not for good: the watchdog queues it again at its next round
            logger.warning("job %s: %s; waiting for the watchdog's next round", job.pk, exc)
            job_wait(job_id=job.pk, rq_job_id=rq_job_id, reason=_wait_reason(exc))
            return WAIT, None
        if not (spec.raise_failures or isinstance(exc, Exception)):
            raise  # the process is exiting: the row stays running, for the watchdog
        reason = reason_of(exc)
        if not spec.raise_failures:
            logger.exception("job %s failed", job.pk)
        if job_end(job_id=job.pk, rq_job_id=rq_job_id, status=JobStatus.FAILED, error=reason,
                   note=f"attempt {job.attempt} failed: {reason[:200]}"):
            _tell_failed(job, reason)
        if spec.raise_failures:
            raise
        return FAILED, None
    finally:
        beat.stop()


def _waits(exc: BaseException) -> bool:
    """Whether ``exc`` says something outside the job is away for now (``JobWaits``), or the sandbox's
    engine does not answer right now (``SandboxAway``: a stopped Docker engine), itself or as the
    cause of what the job raised; any other sandbox that cannot be had (refused by the configuration,
    an unknown backend, no binary) is a failure its owner must read, not a wait."""
    from benchmark_core.sandbox.base import SandboxAway  # noqa: PLC0415

    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, (JobWaits, SandboxAway)):
            return True
        seen.add(id(exc))
        exc = exc.__cause__  # what it was raised from (explicit chaining only)
    return False


def _wait_reason(exc: BaseException) -> str:
    if isinstance(exc, JobWaits):
        return exc.wait_reason()
    return (f"waiting: no sandbox can be opened on this host right now ({exc}); scoring resumes by itself "
            "when one can, nothing is lost or charged")


def _tell_failed(job: Job, reason: str) -> None:
    spec = kind_spec(job.kind)
    if spec.on_failed is not None:
        job.refresh_from_db()
        spec.on_failed(job, reason)


def worker_losses(job: Job) -> int:
    """Attempts of the job whose worker died since it was last re-run by hand.

    Only these count against RCB_JOB_MAX_ATTEMPTS (a job that keeps killing its worker gives up);
    new attempts after a dropped database connection, an environment repair or a lost queue entry
    are not the job's doing.
    """
    history = [str(entry.get("event", "")) for entry in job.history or []]
    reruns = [n for n, event in enumerate(history) if RERUN_MARK in event]
    history = history[reruns[-1] + 1:] if reruns else history
    # a worker taken for dead that answered again had hung (a stopped host, a long pause): it did not die
    revived = {event.split(" ", 2)[2].split(" ", 1)[0] for event in history if event.startswith("the worker ")
               and ANSWERED_AGAIN in event}
    return sum(1 for event in history if _lost_worker(event) and _lost_worker(event) not in revived)


def _lost_worker(event: str) -> str:
    """The worker whose death the history ``event`` records ('' for any other event): the watchdog's
    "attempt N queued: the worker HOST:PID stopped answering" or its give-up "... last on HOST:PID"."""
    if event.startswith("attempt ") and WORKER_LOST in event and "the worker " in event:
        return event.split("the worker ", 1)[1].split(" ", 1)[0]
    if event.startswith(f"its worker {WORKER_LOST} ") and "; last on " in event:
        return event.rsplit("; last on ", 1)[1].strip()
    return ""


def worker_answered_again(*, job_id: int) -> bool:
    """This worker was taken for dead on ``job_id`` (its heartbeat went stale) yet runs: it had hung.

    Called by an attempt that finds its job given to another attempt. The job's history says so,
    that loss no longer counts towards ``RCB_JOB_MAX_ATTEMPTS``, and a job the watchdog gave up for
    too many deaths is queued again when, without this one, it had not run out of them. True when
    it said so (once per worker and job; a job given up again after it is resumed again all the same).
    """
    me = worker_name()
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return False
    events = [str(entry.get("event", "")) for entry in job.history or []]
    if not any(_lost_worker(e) == me for e in events):
        return False
    said = any(e.startswith(f"the worker {me} ") and ANSWERED_AGAIN in e for e in events)
    if not said:
        history_add(job_id, f"the worker {me} {ANSWERED_AGAIN}: it had hung, it did not die (not counted as a death)")
    job.refresh_from_db()
    given_up = job.status == JobStatus.FAILED and job.error.startswith(f"its worker {WORKER_LOST} ")
    if given_up and worker_losses(job) < settings.RCB_JOB_MAX_ATTEMPTS:
        with transaction.atomic():
            requeued = job_requeue(job, expect=Q(status=JobStatus.FAILED, error=job.error),
                                   note=f"resumed: the worker {me} had hung, not died")
        if requeued:
            _tell_requeued(job)
    return not said


def _watched(jobs: QuerySet) -> list[Job]:
    """The jobs of ``jobs`` their kinds look after (kinds no app registered are left alone)."""
    out: list[Job] = []
    for kind, spec in _KINDS.items():
        out.extend(spec.watched(jobs.filter(kind=kind)))
    return sorted(out, key=lambda job: job.pk)


def jobs_watchdog(*, stale_after: float | None = None) -> dict[str, list[int]]:
    """Queue again running jobs whose heartbeat stopped (their worker died); fail them after too many tries."""
    stale_after = settings.RCB_HEARTBEAT_STALE_SECONDS if stale_after is None else stale_after
    cutoff = _now() - dt.timedelta(seconds=stale_after)
    report: dict[str, list[int]] = {"requeued": [], "failed": []}
    stale = Q(status=JobStatus.RUNNING, heartbeat_at__lt=cutoff)
    for job in _watched(Job.objects.filter(stale)):
        given_up = ""
        with transaction.atomic():
            losses = worker_losses(job) + 1  # this one included
            if losses >= settings.RCB_JOB_MAX_ATTEMPTS:
                given_up = (f"its worker {WORKER_LOST} {losses} times (killed, or out of memory?) while running "
                            f"this job; last on {job.worker or '?'}")
                if Job.objects.filter(stale, pk=job.pk, rq_job_id=job.rq_job_id).update(
                    status=JobStatus.FAILED, error=given_up, finished_at=_now()
                ):
                    history_add(job.pk, given_up)
                    report["failed"].append(job.pk)
                else:
                    given_up = ""
            elif job_requeue(job, expect=stale, note=f"the worker {job.worker or '?'} {WORKER_LOST}"):
                report["requeued"].append(job.pk)
                _tell_requeued(job)
        if given_up:
            _tell_failed(job, given_up)
    return report


def _tell_requeued(job: Job) -> None:
    spec = kind_spec(job.kind)
    if spec.on_requeued is not None:
        spec.on_requeued(job)


def _queued_ids() -> dict[str, set[str]]:
    names = set(Job.objects.filter(status=JobStatus.QUEUED).values_list("queue", flat=True).distinct())
    return {name: queue.queued_rq_ids(name) for name in names}


def jobs_lost_requeue(*, stale_after: float | None = None) -> list[int]:
    """Make Redis hold what the database says is waiting: push again every queued job it lost."""
    stale_after = settings.RCB_HEARTBEAT_STALE_SECONDS if stale_after is None else stale_after
    in_queue = _queued_ids()
    now = _now()
    requeued: list[int] = []
    for job in _watched(Job.objects.filter(status=JobStatus.QUEUED)):
        if job.rq_job_id in in_queue.get(job.queue, ()):
            continue
        state, started = queue.rq_job_state(rq_job_id=job.rq_job_id, queue=job.queue)
        if state in ("queued", "deferred", "scheduled"):
            # off the list but not started: a worker may be between taking it and marking it started
            time.sleep(0.5)
            state, started = queue.rq_job_state(rq_job_id=job.rq_job_id, queue=job.queue)
            if state in ("queued", "deferred", "scheduled"):
                if job.rq_job_id in queue.queued_rq_ids(job.queue):
                    continue
                state = "lost from the queue list"
        if state == "started" and started is not None and (now - started).total_seconds() < stale_after:
            continue  # a worker took it a moment ago and is about to claim it
        if state is None and job.enqueued_at and (now - job.enqueued_at).total_seconds() < 1:
            continue  # committed a moment ago: its push after commit is on its way
        with transaction.atomic():
            if not job_requeue(job, expect=Q(status=JobStatus.QUEUED),
                               note=f"the queue had lost it ({state or 'unknown to Redis'})"):
                continue
            requeued.append(job.pk)
        _tell_requeued(job)
    return requeued


def jobs_failed_retry() -> list[int]:
    """Queue again the failed jobs of kinds that retry failures, until their attempts run out."""
    requeued: list[int] = []
    for kind, spec in _KINDS.items():
        if spec.retry_failed <= 0:
            continue
        failed = Job.objects.filter(kind=kind, status=JobStatus.FAILED)
        for job in spec.watched(failed):
            if job.attempt >= spec.retry_failed:
                continue  # it keeps failing (its reason on the row, the traceback in RQ): a human has to look
            with transaction.atomic():
                if job_requeue(job, expect=Q(status=JobStatus.FAILED),
                               note=f"failed before ({(job.error or '?')[:120]}); trying again"):
                    requeued.append(job.pk)
    return requeued


def jobs_reconcile(*, stale_after: float | None = None) -> dict[str, Any]:
    """The watchdog of every kind of job: what it repaired, by what it did (ids)."""
    report: dict[str, Any] = jobs_watchdog(stale_after=stale_after)
    report["reenqueued"] = jobs_lost_requeue(stale_after=stale_after)
    report["retried"] = jobs_failed_retry()
    for kind, spec in sorted(_KINDS.items()):
        if spec.sweep is not None:
            report[f"swept:{kind}"] = spec.sweep()
    return report
