"""Evaluations run here: the Hub asks a model's OpenAI-compatible endpoint for every answer itself.

A run (``EvaluationRun``) is started by a signed-in user (site form or ``POST /api/v1/runs``); its one
job of the ``generation`` kind (``scoring.models.Job``, on the ``generation`` queue, under
``scoring.jobs.job_execute``: claim, heartbeat, watchdog, attempts) asks the endpoint with the engine's
``benchmark_core.generate.generate`` (resumable: the answers are appended to a file under
``RCB_GENERATION_DIR`` as they come, so a new attempt after a dead worker asks only for the missing
ones), then hands the answers to scoring as a submission of the run's user whose evaluation is
``run_here`` (the only place that flag is set).

The API key: encrypted with Fernet (``RCB_GENERATION_SECRET``) in the run's row, decrypted only in the
job, passed in memory to the engine, removed from the row when the generation ends in any way
(handed over, failed, given up, cancelled) and scrubbed from every text the run keeps (errors, run
card). The endpoint is checked before any request (``endpoint_check``): http(s) only, and no host
resolving to a loopback, private, link-local or metadata address unless the operator allowed it
(``RCB_GENERATION_ALLOWED_HOSTS``).
"""
from __future__ import annotations

import datetime as dt
import ipaddress
import json
import logging
import math
import shutil
import socket
import threading
import urllib.parse
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.db.models import Q
from django.utils import timezone
from redis.exceptions import RedisError

from benchmark_core.generate import (STOPPED, GenerateError, GenerateOptions, Progress, card_public, generate,
                                     task_from_row)
from benchmark_core.masking import task_record
from benchmark_core.predictions import text_problem
from benchmark_core.problemset import paper_folder_load
from catalog.models import Release, Snippet
from scoring import queue
from scoring.jobs import Heartbeat, KindSpec, job_create, job_execute
from scoring.models import JOB_ACTIVE, Job, JobKind, JobStatus
from scoring.paper_store import release_paper_archive_ensure, release_paper_folder

from .models import RUN_ACTIVE, EvaluationRun, RunStatus
from .lifecycle import submission_cancel
from .upload import SubmissionError, prediction_submission_create, quota_check

__all__ = [
    "RunRefused", "endpoint_check", "evaluation_run_create", "evaluation_run_cancel", "generation_job_run",
    "runs_settle", "GENERATION",
]

logger = logging.getLogger(__name__)

MAX_SAMPLES = 20
#: seconds between writes of a run's progress to its row
_PROGRESS_EVERY = 1.0


class RunRefused(SubmissionError):
    """A run that cannot be started (or go on); the message says why. Nothing was requested."""


class RunBusy(RunRefused):
    http_status = 429


def _now() -> dt.datetime:
    return timezone.now()


# --------------------------------------------------------------------------------------------
# The key


def _fernet() -> Any:
    from cryptography.fernet import Fernet  # noqa: PLC0415

    secret = settings.RCB_GENERATION_SECRET
    if not secret:
        raise RunRefused("this site cannot keep API keys: its operator has not set RCB_GENERATION_SECRET "
                         "(start the run without a key, for an endpoint that needs none)")
    try:
        return Fernet(secret.encode())
    except (ValueError, TypeError):
        raise ImproperlyConfigured("RCB_GENERATION_SECRET is not a Fernet key (32 url-safe base64-encoded bytes)") \
            from None


def _key_encrypt(api_key: str) -> bytes:
    return _fernet().encrypt(api_key.encode()) if api_key else b""


def _key_decrypt(run: EvaluationRun) -> str:
    from cryptography.fernet import InvalidToken  # noqa: PLC0415

    token = bytes(run.api_key_encrypted or b"")
    if not token:
        return ""
    try:
        return _fernet().decrypt(token).decode()
    except InvalidToken:
        raise RunRefused("the run's API key cannot be decrypted (RCB_GENERATION_SECRET changed?); start it again") \
            from None


def _key_forget(run_id: int) -> None:
    EvaluationRun.objects.filter(pk=run_id).exclude(api_key_encrypted=b"").update(api_key_encrypted=b"")


def _scrub(text: str, key: str) -> str:
    """``text`` without the key (a server may echo it in an error)."""
    if key and len(key) >= 4:
        text = text.replace(key, "[api key]")
    return text


# --------------------------------------------------------------------------------------------
# The endpoint


def _host_allowed(host: str, addresses: list[ipaddress._BaseAddress]) -> bool:
    for entry in settings.RCB_GENERATION_ALLOWED_HOSTS:
        if entry == host.lower():
            return True
        try:
            network = ipaddress.ip_network(entry, strict=False)
        except ValueError:
            continue
        if any(address in network for address in addresses):
            return True
    return False


def endpoint_check(base_url: str) -> None:
    """Refuse an endpoint the Hub must not call: not http(s), or a host on its own network.

    Every address the host resolves to must be a global one (not loopback, private, link-local
    such as the cloud metadata address 169.254.169.254, shared, reserved or multicast), unless the
    operator named the host or a network holding it in ``RCB_GENERATION_ALLOWED_HOSTS``.
    """
    if len(base_url) > 500:
        raise RunRefused("the endpoint URL is longer than 500 characters")
    why = text_problem("base_url", base_url)
    if why:
        raise RunRefused(why)
    parts = urllib.parse.urlsplit(base_url.strip())
    if parts.scheme not in ("http", "https"):
        raise RunRefused("the endpoint must be an http:// or https:// URL (e.g. https://api.example.com/v1)")
    if parts.username or parts.password:
        raise RunRefused("the endpoint URL must not hold credentials; give the API key in its own field")
    host = parts.hostname or ""
    if not host:
        raise RunRefused("the endpoint URL has no host")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise RunRefused("the endpoint URL has an invalid port") from None
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        raise RunRefused(f"the endpoint's host {host!r} cannot be resolved") from None
    addresses = []
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        addresses.append(address)
    if _host_allowed(host, addresses):
        return
    for address in addresses:
        if not address.is_global or address.is_multicast:
            raise RunRefused(
                f"the endpoint's host {host!r} resolves to {address}, an address of a loopback, private, link-local "
                "or reserved network: this site does not call its own network (an operator may allow a host with "
                "RCB_GENERATION_ALLOWED_HOSTS)"
            )


# --------------------------------------------------------------------------------------------
# Starting and cancelling


def _number(name: str, value: Any, *, minimum: float | None = None, maximum: float | None = None,
            integer: bool = False) -> Any:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise RunRefused(f"'{name}' must be a number")
    try:
        number = int(value) if integer else float(value)
    except (TypeError, ValueError):
        raise RunRefused(f"'{name}' must be {'an integer' if integer else 'a number'}, got {str(value)[:40]!r}") \
            from None
    if integer and isinstance(value, float) and value != number:
        raise RunRefused(f"'{name}' must be an integer")
    if not math.isfinite(number):
        raise RunRefused(f"'{name}' must be a finite number")
    if minimum is not None and number < minimum or maximum is not None and number > maximum:
        raise RunRefused(f"'{name}' must be between {minimum} and {maximum}")
    return number


def _release_snippets(release: Release) -> int:
    return Snippet.objects.filter(release=release, paper__release_papers__release=release).exclude(
        paper__release_papers__folder="").count()


def _caps_check(*, release: Release, samples: int, max_tokens: int, price_in: float | None,
                price_out: float | None, max_cost: float) -> int:
    """Refuse a run that could exceed the per-run caps; return the answers it will ask for."""
    snippets = _release_snippets(release)
    if not snippets:
        raise RunRefused(f"release {release.name} cannot score anything here: no paper's code is attached")
    requests = snippets * samples
    if requests > settings.RCB_RUN_MAX_REQUESTS:
        raise RunRefused(f"{snippets} snippets x {samples} samples = {requests} requests, more than this site's cap "
                         f"of {settings.RCB_RUN_MAX_REQUESTS} per run")
    tokens = requests * max_tokens
    if tokens > settings.RCB_RUN_MAX_TOKENS:
        raise RunRefused(f"{requests} requests x max_tokens {max_tokens} = {tokens} output tokens at most, more than "
                         f"this site's cap of {settings.RCB_RUN_MAX_TOKENS} per run; lower max_tokens or samples")
    if price_out is not None or price_in is not None:
        worst = tokens * (price_out or 0) / 1e6
        if worst > max_cost:
            raise RunRefused(f"the output alone may cost up to ${worst:.2f} ({tokens} tokens at ${price_out}/M), more "
                             f"than the cap of ${max_cost:.2f} for this run")
    return requests


def evaluation_run_create(*, user: Any, release: Release, model_name: str, base_url: str, model: str,
                          api_key: str = "", temperature: Any = None, top_p: Any = None, max_tokens: Any = None,
                          seed: Any = None, samples: Any = 1, with_paper: bool = True, max_cost_usd: Any = None,
                          price_in: Any = None, price_out: Any = None) -> EvaluationRun:
    """Check and store a run, and queue its generation job after commit. Raises RunRefused (nothing stored)."""
    if not getattr(user, "is_authenticated", False):
        raise RunRefused("sign in to start an evaluation")
    for name, value in (("model_name", model_name), ("model", model), ("api_key", api_key)):
        why = text_problem(name, value or "")
        if why:
            raise RunRefused(why)
    model_name = " ".join((model_name or "").split())
    if not model_name or len(model_name) > 200:
        raise RunRefused("a model name of at most 200 characters is required")
    model = (model or "").strip()
    if not model or len(model) > 200:
        raise RunRefused("the model id (as the endpoint knows it) is required, at most 200 characters")
    if len(api_key or "") > 1000:
        raise RunRefused("the API key is longer than 1000 characters")
    if not release.frozen:
        raise RunRefused(f"release {release.name} is not published")
    samples = _number("samples", samples if samples not in (None, "") else 1, minimum=1, maximum=MAX_SAMPLES,
                      integer=True)
    max_tokens = _number("max_tokens", max_tokens, minimum=1, maximum=1_000_000, integer=True) \
        or settings.RCB_RUN_DEFAULT_MAX_TOKENS
    temperature = _number("temperature", temperature, minimum=0, maximum=2)
    top_p = _number("top_p", top_p, minimum=0, maximum=1)
    seed = _number("seed", seed, minimum=-(2**63), maximum=2**63 - 1, integer=True)
    price_in = _number("price_in", price_in, minimum=0, maximum=10_000)
    price_out = _number("price_out", price_out, minimum=0, maximum=10_000)
    cap = settings.RCB_RUN_MAX_COST_USD
    max_cost = _number("max_cost_usd", max_cost_usd, minimum=0, maximum=cap)
    max_cost = cap if max_cost is None else max_cost
    endpoint_check(base_url)
    expected = _caps_check(release=release, samples=samples, max_tokens=max_tokens, price_in=price_in,
                           price_out=price_out, max_cost=max_cost)
    encrypted = _key_encrypt(api_key or "")
    from django.contrib.auth import get_user_model  # noqa: PLC0415

    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()  # this user's starts in turn
        active = EvaluationRun.objects.filter(user=user, status__in=RUN_ACTIVE).count()
        if not user.is_staff and active >= settings.RCB_RUNS_ACTIVE_PER_USER:
            raise RunBusy(f"you have {active} evaluations generating; at most {settings.RCB_RUNS_ACTIVE_PER_USER} "
                          "at a time: wait for one, or cancel it")
        quota_check(user)
        run = EvaluationRun.objects.create(
            user=user, release=release, model_name=model_name, base_url=base_url.strip(), model_id=model,
            temperature=temperature, top_p=top_p, max_tokens=max_tokens, seed=seed, samples=samples,
            with_paper=with_paper, price_in=price_in, price_out=price_out, max_cost_usd=max_cost,
            api_key_encrypted=encrypted, expected=expected,
        )
        for release_paper in release.release_papers.exclude(folder=""):
            release_paper_archive_ensure(release_paper=release_paper)  # this host has the folders; workers the hash
        job_create(kind=JobKind.GENERATION, note=f"started by {user.get_username()}", run=run)
    return run


def _can_manage(run: EvaluationRun, user: Any) -> bool:
    return bool(user.is_authenticated and (run.user_id == user.pk or user.is_staff))


def evaluation_run_cancel(*, run: EvaluationRun, user: Any) -> bool:
    """Cancel a run at any stage: nothing more is requested (the running job stops within a
    heartbeat), its key is forgotten, its scoring is cancelled; it is not charged to the quota."""
    if not _can_manage(run, user):
        raise PermissionError("only the owner can cancel this evaluation")
    with transaction.atomic():
        locked = EvaluationRun.objects.select_for_update().get(pk=run.pk)
        if locked.status in RUN_ACTIVE:
            rq_ids = list(locked.jobs.filter(status__in=JOB_ACTIVE).values_list("rq_job_id", flat=True))
            locked.jobs.filter(status__in=JOB_ACTIVE).update(status=JobStatus.CANCELLED, finished_at=_now())

            def drop() -> None:
                for rq_id in rq_ids:
                    try:
                        queue.rq_job_cancel(rq_job_id=rq_id, queue=queue.GENERATION)
                    except (RedisError, ValueError) as exc:  # the claim check makes a leftover harmless
                        logger.info("could not cancel RQ job %s: %s", rq_id, exc)

            transaction.on_commit(drop)
        elif locked.status == RunStatus.SCORING and locked.submission is not None:
            if not submission_cancel(submission=locked.submission, user=user):
                return False
        else:
            return False
        EvaluationRun.objects.filter(pk=run.pk).update(status=RunStatus.CANCELLED, api_key_encrypted=b"",
                                                       finished_at=_now())
    run.refresh_from_db()
    return True


# --------------------------------------------------------------------------------------------
# The generation kind of job


def _run_fail(run_id: int, reason: str) -> None:
    EvaluationRun.objects.filter(pk=run_id, status__in=RUN_ACTIVE).update(
        status=RunStatus.FAILED, error=reason[:2000], finished_at=_now())
    _key_forget(run_id)
    _workdir_remove(run_id)


def _workdir(run_id: int) -> Path:
    return Path(settings.RCB_GENERATION_DIR) / f"run-{run_id}"


def _workdir_remove(run_id: int) -> None:
    shutil.rmtree(_workdir(run_id), ignore_errors=True)


def _tasks(release: Release, *, with_paper: bool) -> list:
    """The release's prompts, built from the paper versions the papers storage holds (as ``tasks`` writes them)."""
    tasks = []
    for release_paper in release.release_papers.exclude(folder="").select_related("paper"):
        paper = paper_folder_load(release_paper_folder(release_paper=release_paper))
        tasks.extend(task_from_row(task_record(paper, snip, with_paper=with_paper)) for snip in paper.snippets)
    return tasks


class _Watch(threading.Thread):
    """The run's progress written to its row once a second, and the caps checked as answers come.

    The engine calls it (``on_answer``) from its event loop, where no query may run: it notes the
    figures; this thread writes them.
    """

    def __init__(self, run: EvaluationRun, stop: threading.Event):
        super().__init__(name=f"run-progress-{run.pk}", daemon=True)
        self.of, self.stop = run, stop
        self.over = ""  # the cap the run went past
        self.figures: dict[str, Any] | None = None
        self.done = threading.Event()

    def __call__(self, progress: Progress) -> None:
        tokens = progress.tokens_in + progress.tokens_out
        if tokens > settings.RCB_RUN_MAX_TOKENS:
            self.over = f"the run used {tokens} tokens, past this site's cap of {settings.RCB_RUN_MAX_TOKENS}"
        elif progress.cost is not None and self.of.max_cost_usd is not None and progress.cost > self.of.max_cost_usd:
            self.over = f"the run cost ${progress.cost:.4f}, past its cap of ${self.of.max_cost_usd:.2f}"
        if self.over:
            self.stop.set()
        self.figures = {"answers": progress.done, "tokens_in": progress.tokens_in, "tokens_out": progress.tokens_out,
                        "cost_usd": progress.cost}

    def _write(self) -> None:
        figures, self.figures = self.figures, None
        if figures is not None:
            EvaluationRun.objects.filter(pk=self.of.pk, status=RunStatus.GENERATING).update(**figures)

    def run(self) -> None:  # noqa: D102  (threading's)
        from django.db import DatabaseError, connection  # noqa: PLC0415

        try:
            while not self.done.wait(_PROGRESS_EVERY):
                try:
                    self._write()
                except DatabaseError as exc:  # progress is for people; the next beat tries again
                    logger.warning("run %s: progress not written (%s)", self.of.pk, exc)
            self._write()
        finally:
            connection.close()

    def finish(self) -> None:
        self.done.set()
        self.join(timeout=30)


def _predictions_data(output: Path) -> bytes:
    """The answers as an upload holds them (the usage and timing of each request stay in the run card)."""
    lines = []
    for raw in output.read_text(encoding="utf-8").splitlines():
        if raw.strip():
            row = json.loads(raw)
            lines.append(json.dumps({k: row[k] for k in ("paper", "file", "snippet", "sample", "completion") if k in row},
                                    ensure_ascii=False))
    return ("\n".join(lines) + "\n").encode("utf-8")


def _generate(job: Job, beat: Heartbeat, run: EvaluationRun, key: str) -> str:
    stop = threading.Event()
    beat.on_lost = stop.set  # a cancel: no request more
    if beat.lost:
        stop.set()
    if not EvaluationRun.objects.filter(pk=run.pk, status__in=RUN_ACTIVE).update(status=RunStatus.GENERATING):
        return "cancelled"
    endpoint_check(run.base_url)  # again: what the host resolves to may have changed since the start
    tasks = _tasks(run.release, with_paper=run.with_paper)
    options = GenerateOptions(
        base_url=run.base_url, model=run.model_id, api_key=key or "EMPTY", samples=run.samples,
        temperature=run.temperature, top_p=run.top_p, max_tokens=run.max_tokens, seed=run.seed,
        with_paper=run.with_paper, concurrency=settings.RCB_GENERATION_CONCURRENCY,
        timeout=settings.RCB_GENERATION_REQUEST_TIMEOUT, price_in=run.price_in, price_out=run.price_out,
        max_retries=settings.RCB_GENERATION_MAX_RETRIES, follow_redirects=False,  # (endpoint_check checked this host)
    )
    output = _workdir(run.pk) / "predictions.jsonl"
    source = {"kind": "release", "release": run.release.slug, "hash": run.release.content_hash}
    watch = _Watch(run, stop)
    watch.start()
    outcome = None
    try:
        for _ in range(3):  # requests that failed after their retries are asked for again, twice
            outcome = generate(tasks=tasks, options=options, output=output, source=source, stop=stop.is_set,
                               on_answer=watch,
                               log=lambda message: logger.info("run %s: %s", run.pk, _scrub(message, key)))
            if stop.is_set() or outcome.fatal or not outcome.failed:
                break
    finally:
        watch.finish()
    assert outcome is not None
    card = outcome.card
    counts = card.get("counts") or {}
    EvaluationRun.objects.filter(pk=run.pk, status=RunStatus.GENERATING).update(
        answers=int(counts.get("answered") or 0), tokens_in=int((card.get("tokens") or {}).get("input") or 0),
        tokens_out=int((card.get("tokens") or {}).get("output") or 0), cost_usd=card.get("cost_usd"))
    if beat.lost:
        return "cancelled"
    if watch.over:
        raise RunRefused(f"stopped: {watch.over}")
    if outcome.fatal and outcome.fatal != STOPPED:
        raise RunRefused(f"the endpoint stopped the run: {outcome.fatal}")
    if not counts.get("answered"):
        raise RunRefused("the endpoint gave no answer")
    public = json.loads(_scrub(json.dumps(card_public(card)), key))
    with transaction.atomic():
        locked = EvaluationRun.objects.select_for_update().get(pk=run.pk)
        if locked.status != RunStatus.GENERATING:  # cancelled meanwhile: nothing is handed over
            return "cancelled"
        decoding = {k: v for k, v in options.decoding().items() if v is not None}
        submission, _ = prediction_submission_create(
            user=run.user, release=run.release, data=_predictions_data(output), model_name=run.model_name,
            file_name=f"run-{run.pk}.jsonl", with_paper=run.with_paper, decoding=decoding, allow_partial=True,
            run_card=public, run_here=True,
        )
        locked.status, locked.submission, locked.run_card = RunStatus.SCORING, submission, public
        locked.api_key_encrypted = b""
        locked.save(update_fields=["status", "submission", "run_card", "api_key_encrypted"])
    _workdir_remove(run.pk)
    return "scoring"


def _body(job: Job, beat: Heartbeat) -> str:
    run = EvaluationRun.objects.select_related("release", "user").get(pk=job.run_id)
    if run.status not in RUN_ACTIVE:
        return "cancelled"
    key = ""
    try:
        key = _key_decrypt(run)
        return _generate(job, beat, run, key)
    except RunRefused as exc:
        raise RunRefused(_scrub(exc.message, key)) from None
    except GenerateError as exc:
        raise RunRefused(_scrub(str(exc), key)) from None
    except (SubmissionError,) as exc:
        raise RunRefused(_scrub(exc.message, key)) from None
    except Exception as exc:  # whatever it says, without the key; the traceback goes with it to RQ
        if key and key in f"{exc!r}{exc}":
            raise RuntimeError(_scrub(f"{type(exc).__name__}: {exc}", key)) from None
        raise


def generation_job_run(*, job_id: int, rq_job_id: str) -> Any:
    """One attempt of a run's generation (the RQ entry point calls this)."""
    return job_execute(job_id=job_id, rq_job_id=rq_job_id, body=_body).result


def _run_given_up(job: Job, reason: str) -> None:
    _run_fail(job.run_id, reason)


def runs_settle() -> list[int]:
    """Runs whose generation ended without their row saying so (a crash between the two); keys of ended runs."""
    settled = []
    for run in EvaluationRun.objects.filter(status__in=RUN_ACTIVE).exclude(jobs__status__in=JOB_ACTIVE):
        job = run.jobs.order_by("-pk").first()
        if job is None or job.status in (JobStatus.FAILED, JobStatus.CANCELLED):
            _run_fail(run.pk, (job.error if job is not None else "") or "its generation job ended")
            settled.append(run.pk)
    for run_id in EvaluationRun.objects.exclude(status__in=RUN_ACTIVE).exclude(api_key_encrypted=b"").values_list(
            "pk", flat=True):
        _key_forget(run_id)
    return settled


GENERATION = KindSpec(
    entry="submissions.jobs.generate_answers", queue=queue.GENERATION,
    timeout=lambda: settings.RCB_GENERATION_JOB_TIMEOUT,
    watched=lambda jobs: jobs.exclude(run__status=RunStatus.CANCELLED),
    on_failed=_run_given_up, sweep=runs_settle,
)
