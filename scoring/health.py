"""Environment health: whether each paper's reference code passes in its environment here.

Before a paper's completions count, its reference code runs in its environment (the engine's health
gate, in ``scoring.evaluate``). What a scoring saw is recorded on the release paper
(``environment_record``: ``ReleasePaper.environment_ok/_error/_checked_at``, ``reference_seconds``);
when the environment newly breaks the staff get one e-mail (``environment_alert``); the jobs that
ended as ``environment`` wait until ``environment_jobs_requeue`` (the ``environment_recheck``
command) queues them again after a repair; ``environments_overview`` is the staff's page. A paper
whose environment fails is not scorable here (``catalog.ranking.release_scorability``).
"""
from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Count, Q
from django.utils import timezone

from benchmark_core.environments import environment_get
from catalog.aggregates import release_touch
from catalog.models import Release, ReleasePaper

from .jobs import job_requeue, kind_spec
from .models import Job, JobStatus

__all__ = [
    "environment_alert",
    "environment_import_fields",
    "environment_jobs_requeue",
    "environment_record",
    "environments_overview",
]

logger = logging.getLogger(__name__)


def environment_import_fields(name: Any) -> dict[str, Any]:
    """What an imported paper's row says of an environment known to be unavailable here ({} otherwise)."""
    env = environment_get(str(name)) if name else None
    if env is None or not env.unavailable:
        return {}
    return {"environment_ok": False, "environment_error": f"environment {env.name!r} is unavailable: {env.unavailable}",
            "environment_checked_at": timezone.now()}


def environment_record(*, release_paper_id: int, environment: str, ok: bool, reason: str = "",
                       seconds: float | None = None) -> bool:
    """Store what a scoring saw of the paper's environment; True when it newly broke (or broke differently)."""
    values: dict[str, Any] = dict(environment=environment[:100], environment_ok=ok, environment_error=reason,
                                  environment_checked_at=timezone.now())
    if seconds is not None:
        values["reference_seconds"] = round(seconds, 3)
    rows = ReleasePaper.objects.filter(pk=release_paper_id)
    # one conditional update: of two scorings that find the same breakage, one alerts
    if not rows.exclude(environment_ok=ok, environment_error=reason).update(**values):
        rows.update(**values)  # the same verdict again: only the time of the check moves
        return False
    # what the release's pages say about its scorable papers changed: cached pages go stale
    release_touch(release_id=rows.values_list("release_id", flat=True).get())
    return not ok


def environment_alert(*, release_paper_id: int, reason: str) -> None:
    """Tell the staff that a paper's environment broke (once per new reason, not once per job)."""
    rp = ReleasePaper.objects.select_related("release", "paper").get(pk=release_paper_id)
    emails = list(get_user_model().objects.filter(is_staff=True, is_active=True).exclude(email="")
                  .values_list("email", flat=True))
    if not emails:
        return
    url = settings.RCB_SITE_URL.rstrip("/") + "/staff/environments/"
    waiting = Job.objects.filter(release_paper_id=release_paper_id, status=JobStatus.ENVIRONMENT).count()
    subject = f"Environment error: {rp.paper.paper_id} ({rp.release.name})"
    body = (
        f"The reference code of paper {rp.paper.paper_id} does not pass in its environment, so its completions "
        f"cannot be judged. No model is blamed: {waiting} scoring job(s) wait.\n\n{reason}\n\n"
        f"Repair the environment, then run `python manage.py environment_recheck --paper {rp.paper.paper_id}`.\n"
        f"Environments: {url}\n"
    )
    try:
        send_mail(subject, body, None, emails)
    except Exception:  # a mail server problem must not fail the job that found the error
        logger.exception("could not send the environment alert of %s", rp.paper.paper_id)


def environment_jobs_requeue(*, paper_id: str | None = None, release: Release | None = None) -> list[int]:
    """Queue again the jobs that ended in an environment error (after a repair); return their ids.

    Jobs of every kind (a submission's paper, a release baseline) whose kind still looks after them
    (e.g. not those of a cancelled submission); each kind's owner is told (``on_requeued``).
    """
    jobs = Job.objects.filter(status=JobStatus.ENVIRONMENT)
    if paper_id:
        jobs = jobs.filter(paper__paper_id=paper_id)
    if release is not None:
        jobs = jobs.filter(release_paper__release=release)
    requeued: list[Job] = []
    for kind in sorted(set(jobs.values_list("kind", flat=True))):
        spec = kind_spec(kind)
        for job in spec.watched(jobs.filter(kind=kind)).order_by("pk"):
            with transaction.atomic():
                if job_requeue(job, expect=Q(status=JobStatus.ENVIRONMENT), note="environment recheck"):
                    requeued.append(job)
    for job in requeued:
        spec = kind_spec(job.kind)
        if spec.on_requeued is not None:
            spec.on_requeued(job)
    return [job.pk for job in requeued]


def environments_overview() -> list[dict[str, Any]]:
    """Per paper with code, per release: its environment, the reference's status and time, the last
    check and the jobs waiting for it (2 queries)."""
    waiting = dict(
        Job.objects.filter(status=JobStatus.ENVIRONMENT)
        .values("release_paper_id").annotate(n=Count("id")).values_list("release_paper_id", "n")
    )
    rows = []
    for rp in (ReleasePaper.objects.exclude(folder="").select_related("release", "paper")
               .order_by("environment_ok", "paper__paper_id", "release__name")):
        status = {True: "passes", False: "fails", None: "not checked"}[rp.environment_ok]
        rows.append({"release": rp.release, "paper": rp.paper.paper_id, "environment": rp.environment or "default",
                     "status": status, "ok": rp.environment_ok, "error": rp.environment_error,
                     "seconds": rp.reference_seconds, "checked_at": rp.environment_checked_at,
                     "waiting": waiting.get(rp.pk, 0)})
    return rows
