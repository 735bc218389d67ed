"""Writes of the contributions app: upload, revise, validate, review.

Files and rows are stored together or not at all: an upload is unpacked into a fresh folder
before any row exists, and the folder is removed again if the rows cannot be written.
"""
from __future__ import annotations

import datetime as dt
import functools
import hashlib
import logging
import shutil
import tempfile
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.mail import send_mail
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.utils import timezone

from accounts.roles import user_is_reviewer
from benchmark_core.hashing import folder_hash as paper_folder_hash
from benchmark_core.sandbox.base import Sandbox, SandboxUnavailable
from scoring import queue
from scoring.jobs import KindSpec, job_create, job_requeue
from scoring.models import JOB_ACTIVE, Job, JobKind, JobStatus
from scoring.evaluate import tasks_run
from scoring.sandbox import PUBLIC, job_sandbox
from scoring.unzip import UnsafeArchive, UnzipLimits, safe_unpack

from .checks import CheckSettings, checks_run
from .models import ContributionRevision, PaperContribution, Review
from .papers import contribution_media_root, contribution_pset_materialize, contribution_pset_write

__all__ = [
    "ContributionData",
    "contribution_create",
    "contribution_revise",
    "contribution_validate",
    "contribution_review",
    "contribution_enqueue_validation",
    "contribution_checks_sweep",
    "CONTRIBUTION_CHECK",
    "contribution_pset_materialize",
    "contribution_sandbox",
    "UploadRefused",
]

logger = logging.getLogger(__name__)

PAPER_TEST = "paper2code_test.py"


class UploadRefused(ValidationError):
    """An upload that is not stored; the message says why."""


@dataclass(frozen=True)
class ContributionData:
    paper_id: str
    title: str
    venue: str = ""
    arxiv_url: str = ""
    code_url: str = ""
    first_commit_date: dt.date | None = None
    annotated_files: tuple[str, ...] = ()
    context_files: tuple[str, ...] = ()
    requirements: tuple[str, ...] = ()


def _unzip_limits() -> UnzipLimits:
    return UnzipLimits(
        max_files=settings.RCB_CONTRIB_MAX_FILES,
        max_total_bytes=settings.RCB_CONTRIB_MAX_UNPACKED_MB * 1024 * 1024,
        max_file_bytes=min(settings.RCB_CONTRIB_MAX_UNPACKED_MB, 50) * 1024 * 1024,
        max_ratio=settings.RCB_CONTRIB_MAX_RATIO,
    )


@dataclass
class _Stored:
    base: Path  # the upload's own folder (removed as a whole if the rows fail)
    folder: Path
    sha256: str
    size: int
    files: list[str]
    notes: dict[str, Any]


def _missing_test_advice(files: list[str]) -> str:
    """Why a zip without the paper's test at its top is refused, naming what to do about it."""
    deeper = sorted(f.rsplit("/", 1)[0] for f in files if f.endswith("/" + PAPER_TEST))
    if deeper:
        return (f"the zip has {PAPER_TEST} only inside {deeper[0]}/, not at its top: zip the folder {deeper[0]} "
                "itself (its files at the top of the zip)")
    found = sorted({f.split("/")[0] for f in files})
    shown = ", ".join(found[:10]) + (f" and {len(found) - 10} more" if len(found) > 10 else "")
    return (f"the zip has no {PAPER_TEST}, the paper's test that runs its annotated code (the zip holds: "
            f"{shown or 'nothing'}); add {PAPER_TEST} beside the code and zip again")


def _store_upload(archive: IO[bytes], name: str) -> _Stored:
    """Copy the upload to disk (bounded), unpack it safely; raise UploadRefused, leaving nothing."""
    limit = settings.RCB_CONTRIB_MAX_UPLOAD_MB * 1024 * 1024
    root = contribution_media_root() / "contributions"
    root.mkdir(parents=True, exist_ok=True)
    base = root / uuid.uuid4().hex
    staging = Path(tempfile.mkdtemp(prefix=".upload-", dir=root))
    try:
        digest, size = hashlib.sha256(), 0
        zip_path = staging / "upload.zip"
        with open(zip_path, "wb") as out:
            for chunk in iter(lambda: archive.read(1024 * 1024), b""):
                size += len(chunk)
                if size > limit:
                    raise UploadRefused(f"the zip is larger than {settings.RCB_CONTRIB_MAX_UPLOAD_MB} MB")
                digest.update(chunk)
                out.write(chunk)
        if size == 0:
            raise UploadRefused("the uploaded file is empty")
        try:
            result = safe_unpack(zip_path, staging / "paper", limits=_unzip_limits())
        except UnsafeArchive as exc:
            raise UploadRefused(f"the zip was refused: {exc}") from None
        if PAPER_TEST not in result.files:
            raise UploadRefused(_missing_test_advice(result.files))
        # the one folder hash: reviewers are told when it equals an existing paper's
        folder_hash = paper_folder_hash(staging / "paper")
        staging.rename(base)  # atomic: the upload appears whole or not at all
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    notes = {
        "folder_hash": folder_hash,
        "original_name": name[:255],
        "stripped_prefix": result.stripped_prefix,
        "skipped": result.skipped,
        "nested_archives": result.nested_archives,
        "total_bytes": result.total_bytes,
    }
    return _Stored(base=base, folder=base / "paper", sha256=digest.hexdigest(), size=size, files=result.files, notes=notes)


def _archive_check(revision: ContributionRevision) -> dict[str, Any]:
    notes = revision.unpack_notes or {}
    details = []
    if notes.get("stripped_prefix"):
        details.append(f"top folder '{notes['stripped_prefix']}/' taken as the paper folder")
    if notes.get("skipped"):
        details.append("archiver files left out: " + ", ".join(notes["skipped"][:10]))
    if notes.get("nested_archives"):
        details.append("archives inside were stored as files, not unpacked: " + ", ".join(notes["nested_archives"][:10]))
    return {
        "key": "archive", "title": "Archive unpacked safely", "status": "ok",
        "summary": f"{len(revision.files)} files, {notes.get('total_bytes', 0):,} bytes", "details": details,
    }


def _apply_data(contribution: PaperContribution, data: ContributionData) -> None:
    contribution.paper_id = data.paper_id
    contribution.title = data.title
    contribution.venue = data.venue
    contribution.arxiv_url = data.arxiv_url
    contribution.code_url = data.code_url
    contribution.first_commit_date = data.first_commit_date
    contribution.annotated_files = list(data.annotated_files)
    contribution.context_files = list(data.context_files)
    contribution.requirements = list(data.requirements)


def _add_revision(contribution: PaperContribution, stored: _Stored, number: int) -> ContributionRevision:
    return ContributionRevision.objects.create(
        contribution=contribution,
        number=number,
        archive_name=stored.notes["original_name"],
        archive_sha256=stored.sha256,
        archive_bytes=stored.size,
        folder=str(stored.folder.relative_to(contribution_media_root())),
        files=stored.files,
        unpack_notes=stored.notes,
    )


def contribution_create(*, user: AbstractBaseUser, data: ContributionData, archive: IO[bytes], archive_name: str = "") -> PaperContribution:
    """Store a new contribution and queue its checks; UploadRefused stores nothing."""
    stored = _store_upload(archive, archive_name)
    try:
        with transaction.atomic():
            contribution = PaperContribution(contributor=user, revision=1)
            _apply_data(contribution, data)
            contribution.full_clean()
            contribution.save()
            _add_revision(contribution, stored, 1)
            contribution_enqueue_validation(contribution=contribution)
    except BaseException:
        shutil.rmtree(stored.base, ignore_errors=True)
        raise
    return contribution


def contribution_revise(
    *, contribution: PaperContribution, user: AbstractBaseUser, archive: IO[bytes], archive_name: str = "",
    data: ContributionData | None = None,
) -> PaperContribution:
    """Upload a new zip (and metadata) for a contribution; the checks run again."""
    if contribution.contributor_id != user.pk:
        raise PermissionDenied("only the contributor can upload a revision")
    if contribution.status not in PaperContribution.REVISABLE:
        raise UploadRefused(f"a revision cannot be uploaded while the contribution is {contribution.get_status_display()}")
    stored = _store_upload(archive, archive_name)
    try:
        with transaction.atomic():
            locked = PaperContribution.objects.select_for_update().get(pk=contribution.pk)
            if locked.status not in PaperContribution.REVISABLE:
                raise UploadRefused(f"a revision cannot be uploaded while the contribution is {locked.get_status_display()}")
            if data is not None:
                _apply_data(locked, data)
                locked.full_clean()
            locked.revision += 1
            locked.status = PaperContribution.SUBMITTED
            locked.status_changed_at = timezone.now()
            locked.report = {}
            locked.save()
            _add_revision(locked, stored, locked.revision)
            contribution_enqueue_validation(contribution=locked)
    except BaseException:
        shutil.rmtree(stored.base, ignore_errors=True)
        raise
    return locked


def contribution_enqueue_validation(*, contribution: PaperContribution, note: str = "uploaded") -> Job:
    """Queue the checks of the contribution's current revision (a ``Job`` row, pushed after commit).

    The revision's job is made once; asking again (an admin's "run the checks again") starts a new
    attempt of it unless one is waiting or running.
    """
    revision = contribution.revision
    checks = Job.objects.filter(kind=JobKind.CONTRIBUTION_CHECK, contribution=contribution)
    # an older revision's checks waiting or running are overtaken: they would store nothing
    checks.filter(revision__lt=revision, status__in=JOB_ACTIVE).update(
        status=JobStatus.CANCELLED, finished_at=timezone.now(), error=f"overtaken by revision {revision}")
    job = checks.filter(revision=revision).first()
    if job is None:
        return job_create(kind=JobKind.CONTRIBUTION_CHECK, note=note, contribution=contribution, revision=revision)
    job_requeue(job, expect=~Q(status__in=JOB_ACTIVE), note=note)
    return job


@contextmanager
def contribution_sandbox() -> Iterator[Sandbox]:
    """The sandbox for contributed (untrusted) code: the one sandbox of scoring at its 'public' level
    (``scoring.sandbox.job_sandbox``), each paper in its environment's interpreter, as it will be scored."""
    try:
        with job_sandbox(trust=PUBLIC) as sandbox:
            yield sandbox
    except SandboxUnavailable as exc:
        raise SandboxUnavailable(f"no sandbox can run contributed code: {exc}") from exc


def _image_builder(sandbox: Sandbox):
    """For the docker backend: build (or reuse) the environment image of the requirements."""
    sandbox = getattr(sandbox, "inner", sandbox)  # (a warm pool's backend)
    if sandbox.name != "docker":
        return None
    from benchmark_core.sandbox.docker_images import env_image_ensure

    return lambda reqs: env_image_ensure(sandbox.client, list(reqs), base=sandbox.base)


def _check_settings(backend: str) -> CheckSettings:
    return CheckSettings(
        runtime_budget=settings.RCB_CONTRIB_RUNTIME_BUDGET,
        timeout=max(settings.RCB_RUN_TIMEOUT, settings.RCB_CONTRIB_RUNTIME_BUDGET),
        python=settings.RCB_PYTHON or None,
        backend=backend,
    )


def _set_status(contribution_id: int, revision: int, status: str, report: dict[str, Any] | None = None) -> bool:
    """Move a contribution on, unless a newer revision or a decision overtook this run."""
    with transaction.atomic():
        row = PaperContribution.objects.select_for_update().get(pk=contribution_id)
        if row.revision != revision or row.status in PaperContribution.FINAL:
            return False
        row.status = status
        row.status_changed_at = timezone.now()
        if report is not None:
            row.report = report
            ContributionRevision.objects.filter(contribution=row, number=revision).update(report=report)
        row.save()
    return True


def _progress_writer(contribution_id: int, revision: int, every: float = 1.0):
    """Store 'runs done / total' for the status page, at most once a second (the last one always)."""
    import time

    last = [0.0]

    def write(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < every:
            return
        last[0] = now
        PaperContribution.objects.filter(pk=contribution_id, revision=revision,
                                         status=PaperContribution.VALIDATING).update(
            report={"progress": {"done": done, "total": total}})

    return write


def contribution_validate(*, contribution_id: int, revision: int) -> dict[str, Any] | None:
    """Run the automatic checks of one revision and store the report (the validation job's body)."""
    contribution = PaperContribution.objects.get(pk=contribution_id)
    if contribution.revision != revision or contribution.status in PaperContribution.FINAL:
        return None  # overtaken: a newer upload has its own job
    rev = ContributionRevision.objects.get(contribution=contribution, number=revision)
    if not _set_status(contribution_id, revision, PaperContribution.VALIDATING):
        return None
    started_at = timezone.now()
    try:
        with contribution_sandbox() as sandbox, tempfile.TemporaryDirectory(prefix="rcb-contrib-") as tmp:
            root = Path(tmp)
            contribution_pset_write(contribution=contribution, revision=rev, root=root)
            report = checks_run(
                root, contribution.paper_id,
                run=functools.partial(tasks_run, sandbox=sandbox),
                settings=_check_settings(getattr(sandbox, "inner", sandbox).describe()),
                archive_check=_archive_check(rev),
                requirements=list(contribution.requirements) or None,
                image_builder=_image_builder(sandbox),
                progress=_progress_writer(contribution_id, revision),
            )
    except Exception as exc:
        report = {"passed": False, "error": f"the checks could not run: {exc}", "checks": [_archive_check(rev)],
                  "snippets": [], "revision": revision, "started_at": started_at.isoformat()}
        _set_status(contribution_id, revision, PaperContribution.ERROR, report)
        raise
    report["revision"] = revision
    report["started_at"] = started_at.isoformat()
    status = PaperContribution.AWAITING_REVIEW if report["passed"] else PaperContribution.CHANGES_REQUESTED
    if _set_status(contribution_id, revision, status, report):
        failed = [c["title"] for c in report["checks"] if c["status"] == "failed"]
        _notify(contribution, f"checks {'passed' if report['passed'] else 'failed'}",
                "All automatic checks passed; a reviewer will look at it." if report["passed"] else
                "These checks failed: " + "; ".join(failed) + ".\nFix them and upload a revision.")
    return report


def _notify(contribution: PaperContribution, what: str, text: str) -> None:
    """Tell the contributor by e-mail; a mail problem never fails the job or the review."""
    email = contribution.contributor.email
    if not email:
        return
    url = getattr(settings, "RCB_SITE_URL", "").rstrip("/") + f"/contribute/{contribution.pk}/"
    subject = f"Paper contribution {contribution.paper_id} (revision {contribution.revision}): {what}"
    try:
        send_mail(subject, f"{text}\n\nDetails: {url}\n", None, [email])
    except Exception:
        logger.exception("could not send the notification of contribution %s", contribution.pk)


def contribution_review(*, contribution: PaperContribution, reviewer: AbstractBaseUser, decision: str, comment: str = "") -> Review:
    """Record a reviewer's decision; an approval adds the paper to the draft of the next release."""
    from .release_services import release_draft_paper_add

    if not user_is_reviewer(reviewer):
        raise PermissionDenied("only reviewers can review contributions")
    if decision not in dict(Review.DECISIONS):
        raise ValidationError(f"unknown decision {decision!r}")
    comment = comment.strip()
    if decision != Review.APPROVE and not comment:
        raise ValidationError("say what has to change (or why it is rejected) in the comment")
    with transaction.atomic():
        row = PaperContribution.objects.select_for_update().get(pk=contribution.pk)
        if row.status in PaperContribution.FINAL:
            raise ValidationError(f"this contribution is already {row.get_status_display()}")
        if decision == Review.APPROVE:
            if row.status != PaperContribution.AWAITING_REVIEW or not row.checks_passed:
                raise ValidationError("only a contribution whose automatic checks passed can be approved")
            if row.contributor_id == reviewer.pk and not reviewer.is_staff:
                raise PermissionDenied("reviewers cannot approve their own contribution")
        review = Review.objects.create(
            contribution=row, reviewer=reviewer, revision=row.revision, decision=decision, comment=comment
        )
        row.status = {
            Review.APPROVE: PaperContribution.APPROVED,
            Review.REJECT: PaperContribution.REJECTED,
            Review.REQUEST_CHANGES: PaperContribution.CHANGES_REQUESTED,
        }[decision]
        row.status_changed_at = timezone.now()
        if decision == Review.APPROVE:
            row.release_paper = release_draft_paper_add(contribution=row, by=reviewer)
        row.save()
    contribution.refresh_from_db()
    _notify(contribution, review.get_decision_display(), f"A reviewer decided: {review.get_decision_display()}."
            + (f"\n\n{comment}" if comment else ""))
    return review


def _checks_watched(jobs: QuerySet) -> QuerySet:
    """Check jobs of a contribution's current revision still waiting for them (not overtaken, not decided)."""
    return jobs.filter(revision=F("contribution__revision"),
                       contribution__status__in=[PaperContribution.SUBMITTED, PaperContribution.VALIDATING])


def _checks_requeued(job: Job) -> None:
    # back to 'submitted' with a fresh clock: the status page says the checks wait again
    PaperContribution.objects.filter(pk=job.contribution_id, revision=job.revision,
                                     status=PaperContribution.VALIDATING).update(
        status=PaperContribution.SUBMITTED, status_changed_at=timezone.now())


def _checks_given_up(job: Job, reason: str) -> None:
    """The job failed for good: a contribution still waiting for its checks says why, in its report."""
    current = PaperContribution.objects.filter(
        pk=job.contribution_id, revision=job.revision,
        status__in=[PaperContribution.SUBMITTED, PaperContribution.VALIDATING])
    if not current.exists():
        return  # the checks ended the contribution themselves (contribution_validate), or it moved on
    report = {"passed": False, "checks": [], "snippets": [], "revision": job.revision,
              "error": f"the checks could not finish: {reason}; an administrator has to look"}
    _set_status(job.contribution_id, job.revision, PaperContribution.ERROR, report)


def contribution_checks_sweep() -> list[int]:
    """Give a job to every contribution waiting for checks that has none for its revision (made before jobs
    were rows, or whose row was lost with a rolled-back upload); returns the contributions."""
    swept = []
    waiting = PaperContribution.objects.filter(status__in=[PaperContribution.SUBMITTED, PaperContribution.VALIDATING])
    has_job = Job.objects.filter(kind=JobKind.CONTRIBUTION_CHECK, contribution=OuterRef("pk"), revision=OuterRef("revision"))
    for contribution in waiting.exclude(Exists(has_job)):
        with transaction.atomic():
            contribution_enqueue_validation(contribution=contribution, note="no job on record: queued by reconcile")
        swept.append(contribution.pk)
    return swept


CONTRIBUTION_CHECK = KindSpec(
    entry="contributions.jobs.validate_contribution", queue=queue.CONTRIBUTIONS,
    timeout=lambda: settings.RCB_CONTRIB_JOB_TIMEOUT, watched=_checks_watched,
    on_failed=_checks_given_up, on_requeued=_checks_requeued, sweep=contribution_checks_sweep,
)

