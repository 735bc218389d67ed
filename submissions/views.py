"""Pages of the submissions app: upload, my submissions, a submission's progress and results, review."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, RequestDataTooBig
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from accounts.roles import user_is_reviewer
from scoring.health import environments_overview
from catalog.ranking import evaluation_flags_pending

from . import lifecycle, selectors
from . import upload as uploads
from .flags import FLAG_KINDS
from .forms import RunForm, SubmissionForm
from .models import ACTIVE_STATUSES, Status

__all__ = [
    "submission_create", "submission_list", "submission_detail", "submission_action", "review_queue",
    "evaluation_flags_clear", "environments_page", "queue_page", "run_create", "run_detail", "run_cancel",
]

RESULTS_SHOWN = 2000  # a page with more rows gets slow; the API has them all
#: the public queue page is cached (leaderboard.page_cache, a live page: leaderboard/urls.py routes it):
#: a job changing state shows on the next request; progress counts and estimated waits are at most
#: this many seconds old
QUEUE_PAGE_SECONDS = 5


def _upload_form(request: HttpRequest) -> tuple[SubmissionForm, str | None]:
    """Bind the form; a body too big for Django's limits becomes a message, not a 400 page."""
    try:
        return SubmissionForm(request.POST, request.FILES), None
    except RequestDataTooBig:
        return SubmissionForm(), f"the upload is too large; the limit is {uploads.max_upload_bytes() // 1048576} MB"


@login_required
def submission_create(request: HttpRequest) -> HttpResponse:
    context = {"nav": "submit", "quota": selectors.submission_quota(user=request.user),
               "max_mb": uploads.max_upload_bytes() // 1048576}
    if request.method != "POST":
        # ?release= (the header's Submit link from a release's pages) picks that release, when open;
        # a published one that is not open says why instead of the form silently offering others
        asked = selectors.release_published_get(slug=(request.GET.get("release") or "").strip())
        closed = selectors.release_closed_reason(release=asked) if asked is not None else ""
        chosen = asked if asked is not None and not closed else None
        form = SubmissionForm(initial={"release": chosen} if chosen else None)
        return render(request, "submissions/create.html", {**context, "form": form, "release": asked,
                                                           "release_closed": closed})
    form, error = _upload_form(request)
    status = 400
    problems: list = []
    if error is None and form.is_valid():
        upload = form.cleaned_data["file"]
        if upload.size > uploads.max_upload_bytes():
            error, status = (
                f"the file has {upload.size / 1048576:.1f} MB; the limit is {uploads.max_upload_bytes() // 1048576} MB",
                413,
            )
        else:
            try:
                submission, created = uploads.prediction_submission_create(
                    user=request.user,
                    release=form.cleaned_data["release"],
                    data=upload.read(),
                    file_name=upload.name,
                    model_name=form.cleaned_data["model_name"],
                    organisation=form.cleaned_data["organisation"],
                    open_weights=form.cleaned_data["open_weights"],
                    knowledge_cutoff=form.cleaned_data["knowledge_cutoff"],
                    link=form.cleaned_data["link"],
                    with_paper=not form.cleaned_data["without_paper"],
                    decoding=form.decoding(),
                    notes=form.cleaned_data["notes"],
                    allow_partial=request.POST.get("allow_partial") == "1",
                    publish=request.POST.get("publish") == "1",
                    run_card=form.cleaned_data.get("run_card"),
                )
            except uploads.PartialCoverage as exc:
                # not an error: the user confirms (ticks the box and sends the file again) or completes it
                return render(request, "submissions/create.html", {**context, "form": form, "partial": exc.coverage,
                                                                   "partial_warning": exc.message}, status=409)
            except uploads.SubmissionError as exc:
                error, problems, status = exc.message, exc.problems, exc.http_status
            else:
                if created:
                    messages.success(request, f"Submission #{submission.pk} is queued for scoring.")
                    return redirect("submissions:submission_detail", pk=submission.pk)
                note, renamed = uploads.submission_duplicate_note(submission=submission,
                                                                   model_name=form.cleaned_data["model_name"])
                if not renamed:
                    messages.info(request, note)
                    return redirect("submissions:submission_detail", pk=submission.pk)
                # another name: say it was not taken, and offer the earlier submission
                return render(request, "submissions/create.html",
                              {**context, "form": form, "duplicate": submission, "duplicate_note": note})
    return render(
        request, "submissions/create.html", {**context, "form": form, "error": error, "problems": problems[:500],
                                            "problems_total": len(problems)}, status=status,
    )


@login_required
def submission_list(request: HttpRequest) -> HttpResponse:
    return render(
        request,
        "submissions/list.html",
        {"nav": "submit", "submissions": selectors.submissions_of_user(user=request.user),
         "runs": [selectors.run_overview(run=run) for run in selectors.runs_of_user(user=request.user)[:50]],
         "quota": selectors.submission_quota(user=request.user)},
    )


def _get_visible(request: HttpRequest, pk: int):
    submission = selectors.submission_get(pk=pk)
    # a private submission is invisible, not forbidden, to others: its existence is private too
    if submission is None or not selectors.submission_can_view(submission=submission, user=request.user):
        raise Http404("no such submission")
    return submission


@login_required
def submission_detail(request: HttpRequest, pk: int) -> HttpResponse:
    submission = _get_visible(request, pk)
    owner = selectors.submission_can_see_outputs(submission=submission, user=request.user)
    results = selectors.submission_results(submission=submission) if owner else []
    failures_only = request.GET.get("failures") == "1"
    shown = [r for r in results if not r["passed"]] if failures_only else results
    progress = selectors.submission_progress(submission=submission)
    ev = submission.evaluation
    return render(
        request,
        "submissions/detail.html",
        {
            "nav": "submit",
            "submission": submission,
            "release": submission.release,  # the header's leaderboard links follow the submission's release
            "progress": progress,
            # figures once scoring ended; a failed scoring's are shown as partial (the API's "partial")
            "show_result": ev is not None and ev.computed_at is not None
            and submission.status in (Status.FINISHED, Status.FAILED),
            "completeness": selectors.submission_result_completeness(submission=submission, progress=progress),
            "unranked_reason": selectors.submission_unranked_reason(submission=submission),
            "owner": owner,
            "reviewer": user_is_reviewer(request.user),
            # the engine's flags: the owner and reviewers see what kept the evaluation off the board
            "engine_flags": (
                selectors.submission_engine_flags(submission=submission)
                if owner or user_is_reviewer(request.user) else None
            ),
            "results": shown[:RESULTS_SHOWN],
            "results_total": len(shown),
            "failures_only": failures_only,
            "failures_total": sum(1 for r in results if not r["passed"]),
            "all_total": len(results),
            "active": submission.status in ACTIVE_STATUSES,
            "api_url": reverse("submissions:api_submission", args=[submission.pk]),
        },
    )


ACTIONS = {
    "cancel": (lifecycle.submission_cancel, "Submission #{pk} is cancelled."),
    "rerun": (lifecycle.submission_rerun, "Submission #{pk} is queued again."),
    "publish": (lifecycle.submission_publish, "Submission #{pk} is public: it appears on the leaderboard."),
    "unpublish": (lifecycle.submission_unpublish, "Submission #{pk} is private again."),
    "clear-flags": (lifecycle.submission_flags_clear, "The flags of submission #{pk} are cleared: it may be ranked."),
}


@login_required
@require_POST
def submission_action(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    submission = _get_visible(request, pk)
    if action not in ACTIONS:
        raise Http404("no such action")
    service, done = ACTIONS[action]
    if action == "publish" and submission.status in ACTIVE_STATUSES:
        done = "Submission #{pk} will be published as soon as its scoring finishes."
    try:
        result = service(submission=submission, user=request.user)
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from None
    except uploads.SubmissionError as exc:
        messages.error(request, exc.message)
    else:
        if result is False:
            messages.warning(request, f"Nothing to do: the submission is {submission.status}.")
        else:
            messages.success(request, done.format(pk=submission.pk))
            reason = selectors.submission_unranked_reason(submission=submission) if action == "publish" else ""
            if reason:
                messages.warning(request, f"It is shown on the leaderboard but not ranked: {reason}.")
    return redirect("submissions:submission_detail", pk=submission.pk)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown (no job has finished yet)"
    if seconds < 60:
        return "under a minute"
    minutes = round(seconds / 60)
    return f"about {minutes} min" if minutes < 90 else f"about {minutes / 60:.1f} h"


def queue_page(request: HttpRequest) -> HttpResponse:
    """Public: the submissions waiting and running, each one's position and estimated wait.

    From the page cache as a live page (leaderboard/urls.py wraps it): anonymous visitors share one rendering, which the queue's
    stamp (its jobs' states) and a QUEUE_PAGE_SECONDS period keep current; a visitor with rows of
    their own (a logged-in submitter) gets the page rendered for them (page_cache: it looked at
    the user)."""
    overview = selectors.scoring_queue_overview(user=request.user)
    for row in overview["rows"]:
        row["wait"] = _duration(row["wait_seconds"])
    return render(request, "submissions/queue.html", {"nav": "queue", **overview})


@login_required
def review_queue(request: HttpRequest) -> HttpResponse:
    if not user_is_reviewer(request.user):
        raise PermissionDenied("reviewers only")
    rows = []
    for sub in selectors.submissions_for_review()[:200]:
        flags = sub.flags or {}
        flagged = sum(len(flags.get(k, [])) for k in FLAG_KINDS)
        ev = sub.evaluation
        engine = ev.flagged_results if ev is not None else 0
        pending = ev is not None and evaluation_flags_pending(ev)
        rows.append({"submission": sub, "flagged": flagged, "identical_share": flags.get("identical_share", 0.0),
                     "engine_flagged": engine, "pending": pending})
    for ev in selectors.evaluations_for_review()[:200]:
        rows.append({"evaluation": ev, "flagged": 0, "identical_share": 0.0, "engine_flagged": ev.flagged_results,
                     "pending": evaluation_flags_pending(ev)})
    rows.sort(key=lambda r: (not r["pending"], -r["engine_flagged"], -r["flagged"], -r["identical_share"]))
    return render(request, "submissions/review.html", {"nav": "submit", "rows": rows})


@login_required
@require_POST
def evaluation_flags_clear(request: HttpRequest, pk: int) -> HttpResponse:
    """A reviewer clears the engine flags of an evaluation that no submission carries."""
    evaluation = selectors.evaluations_for_review().filter(pk=pk).first()
    if evaluation is None:
        raise Http404("no flagged evaluation without a submission")
    try:
        cleared = lifecycle.evaluation_flags_clear(evaluation=evaluation, user=request.user)
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from None
    if cleared:
        messages.success(request, f"The flags of {evaluation.model.display_name} on {evaluation.release.name} "
                                  "are cleared: it may be ranked.")
    else:
        messages.warning(request, "Nothing to do: no flag awaits review.")
    return redirect("submissions:review_queue")


@login_required
def environments_page(request: HttpRequest) -> HttpResponse:
    """Staff: each paper's environment and whether its reference code passes there."""
    if not request.user.is_staff:
        raise PermissionDenied("staff only")
    rows = environments_overview()
    return render(request, "submissions/environments.html", {
        "nav": "submit", "rows": rows, "broken": sum(1 for r in rows if r["ok"] is False),
    })


# --------------------------------------------------------------------------------------------
# Evaluations run here


@login_required
def run_create(request: HttpRequest) -> HttpResponse:
    from .runs import RunRefused, evaluation_run_create  # noqa: PLC0415

    context = {"nav": "submit", "quota": selectors.submission_quota(user=request.user)}
    if request.method != "POST":
        return render(request, "submissions/run_create.html", {**context, "form": RunForm()})
    form = RunForm(request.POST)
    error, status = None, 400
    if form.is_valid():
        data = form.cleaned_data
        try:
            run = evaluation_run_create(
                user=request.user, release=data["release"], model_name=data["model_name"], base_url=data["base_url"],
                model=data["model"], api_key=data["api_key"], temperature=data["temperature"], top_p=data["top_p"],
                max_tokens=data["max_tokens"], seed=data["seed"], samples=data["samples"] or 1,
                with_paper=not data["without_paper"], max_cost_usd=data["max_cost_usd"], price_in=data["price_in"],
                price_out=data["price_out"],
            )
        except (RunRefused, uploads.SubmissionError) as exc:
            error, status = exc.message, exc.http_status
        else:
            messages.success(request, f"Evaluation #{run.pk} is queued: the Hub asks {run.model_id} for its answers.")
            return redirect("submissions:run_detail", pk=run.pk)
    return render(request, "submissions/run_create.html", {**context, "form": form, "error": error}, status=status)


def _run_visible(request: HttpRequest, pk: int):
    run = selectors.run_get(pk=pk)
    if run is None or not selectors.run_can_view(run=run, user=request.user):
        raise Http404("no such evaluation")
    return run


@login_required
def run_detail(request: HttpRequest, pk: int) -> HttpResponse:
    run = _run_visible(request, pk)
    overview = selectors.run_overview(run=run)
    return render(request, "submissions/run_detail.html", {
        "nav": "submit", "run": run, "overview": overview, "release": run.release,
        "api_url": reverse("submissions:api_run", args=[run.pk]),
    })


@login_required
@require_POST
def run_cancel(request: HttpRequest, pk: int) -> HttpResponse:
    from .runs import evaluation_run_cancel  # noqa: PLC0415

    run = _run_visible(request, pk)
    try:
        cancelled = evaluation_run_cancel(run=run, user=request.user)
    except PermissionError as exc:
        raise PermissionDenied(str(exc)) from None
    if cancelled:
        messages.success(request, f"Evaluation #{run.pk} is cancelled: nothing more is asked of the endpoint, and it "
                                  "does not count against your quota.")
    else:
        messages.warning(request, f"Nothing to do: the evaluation is {selectors.run_status(run=run)}.")
    return redirect("submissions:run_detail", pk=run.pk)
