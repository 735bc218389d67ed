"""Pages of the contributions app; thin: forms in, services and selectors out."""
from __future__ import annotations

from django.contrib import messages
from django.contrib.admin.views.decorators import staff_member_required
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from accounts.roles import user_is_reviewer
from catalog.models import Evaluation, Release
from catalog.releases import ReleaseVisibilityError, release_held_out_set

from . import selectors
from .forms import ContributionForm, ErrataForm, PublishForm, ReleaseNameForm, ReviewForm
from .models import PaperContribution
from .release_services import release_draft_rename, release_publish
from .errata import release_errata
from .succession import release_default_switch_warning
from .services import UploadRefused, contribution_create, contribution_review, contribution_revise


def _errors(exc: ValidationError) -> list[str]:
    return list(exc.messages)


@login_required
def contribution_new(request: HttpRequest) -> HttpResponse:
    form = ContributionForm(request.POST or None, request.FILES or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            upload = form.cleaned_data["archive"]
            try:
                contribution = contribution_create(user=request.user, data=form.data_object(), archive=upload,
                                                   archive_name=upload.name)
            except ValidationError as exc:
                for message in _errors(exc):
                    form.add_error("archive" if isinstance(exc, UploadRefused) else None, message)
            else:
                messages.success(request, "Uploaded. The automatic checks are queued; this page follows them.")
                return redirect("contributions:detail", pk=contribution.pk)
        status = 400
    return render(request, "contributions/new.html", {"form": form, "nav": "contribute"}, status=status)


@login_required
def contribution_mine(request: HttpRequest) -> HttpResponse:
    rows = selectors.contributions_of_user(user=request.user)
    return render(request, "contributions/mine.html", {"rows": rows, "nav": "contribute",
                                                         "is_reviewer": user_is_reviewer(request.user)})


def _detail_context(request: HttpRequest, contribution: PaperContribution) -> dict:
    return {
        "c": contribution,
        "report": contribution.report,
        "reviews": contribution.reviews.select_related("reviewer"),
        "revisions": contribution.revisions.all(),
        "is_owner": contribution.contributor_id == request.user.pk,
        "is_reviewer": user_is_reviewer(request.user),
        "running": contribution.status in (PaperContribution.SUBMITTED, PaperContribution.VALIDATING),
        "nav": "contribute",
    }


@login_required
def contribution_detail(request: HttpRequest, pk: int) -> HttpResponse:
    contribution = selectors.contribution_get_for_user(pk=pk, user=request.user)
    context = _detail_context(request, contribution)
    if context["is_owner"] and contribution.status in PaperContribution.REVISABLE:
        context["revision_form"] = ContributionForm(initial=ContributionForm.initial_for(contribution), contribution=contribution)
    return render(request, "contributions/detail.html", context)


@login_required
@require_POST
def contribution_revise_view(request: HttpRequest, pk: int) -> HttpResponse:
    contribution = selectors.contribution_get_for_user(pk=pk, user=request.user)
    if contribution.contributor_id != request.user.pk:
        raise Http404("no such contribution")
    form = ContributionForm(request.POST, request.FILES, contribution=contribution)
    if form.is_valid():
        upload = form.cleaned_data["archive"]
        try:
            contribution_revise(contribution=contribution, user=request.user, archive=upload, archive_name=upload.name,
                                data=form.data_object())
        except ValidationError as exc:
            for message in _errors(exc):
                form.add_error("archive" if isinstance(exc, UploadRefused) else None, message)
        else:
            messages.success(request, "Revision uploaded. The automatic checks run again.")
            return redirect("contributions:detail", pk=pk)
    context = _detail_context(request, contribution)
    context["revision_form"] = form
    return render(request, "contributions/detail.html", context, status=400)


def _reviewer_required(request: HttpRequest) -> None:
    if not user_is_reviewer(request.user):
        raise PermissionDenied("reviewers only")


@login_required
def review_queue(request: HttpRequest) -> HttpResponse:
    _reviewer_required(request)
    status = request.GET.get("status") or PaperContribution.AWAITING_REVIEW
    if status != "all" and status not in dict(PaperContribution.STATUSES):
        status = PaperContribution.AWAITING_REVIEW
    rows = list(selectors.review_queue(status=status))
    return render(request, "contributions/queue.html", {
        "rows": rows, "status": status, "duplicates": selectors.contribution_duplicates(contributions=rows),
        "statuses": PaperContribution.STATUSES, "nav": "review",
    })


@login_required
def contribution_review_view(request: HttpRequest, pk: int) -> HttpResponse:
    _reviewer_required(request)
    contribution = get_object_or_404(PaperContribution, pk=pk)
    form = ReviewForm(request.POST or None)
    status = 200
    if request.method == "POST":
        if form.is_valid():
            try:
                contribution_review(contribution=contribution, reviewer=request.user,
                                    decision=form.cleaned_data["decision"], comment=form.cleaned_data["comment"])
            except (ValidationError, PermissionDenied) as exc:
                form.add_error(None, "; ".join(_errors(exc)) if isinstance(exc, ValidationError) else str(exc))
            else:
                contribution.refresh_from_db()
                note = ""
                if contribution.release_paper_id:
                    note = f" It joins the draft release {contribution.release_paper.release.name}."
                messages.success(request, f"Decision recorded: {contribution.get_status_display()}.{note}")
                return redirect("contributions:review", pk=pk)
        status = 400
    context = _detail_context(request, contribution)
    context.update({
        "form": form,
        "code_files": selectors.contribution_code_view(contribution=contribution),
        "tree": selectors.contribution_snippet_tree(contribution=contribution),
        "duplicate_of": selectors.contribution_duplicates(contributions=[contribution]).get(contribution.pk, []),
        "nav": "review",
    })
    return render(request, "contributions/review.html", context, status=status)


@staff_member_required
def releases_admin(request: HttpRequest) -> HttpResponse:
    return render(request, "contributions/releases.html", {"releases": selectors.releases_for_staff(), "nav": "staff"})


def _release_rename(request: HttpRequest, release: Release, form: ReleaseNameForm) -> HttpResponse | None:
    if not form.is_valid():
        return None
    try:
        release = release_draft_rename(release=release, name=form.cleaned_data["name"])
    except ValidationError as exc:
        form.add_error("name", "; ".join(_errors(exc)))
        return None
    messages.success(request, f"The draft is named {release.name}; its address follows the name while it is a draft "
                              f"(/releases/{release.slug}/) and stays once it is published.")
    return redirect("contributions:release", slug=release.slug)


def _release_errata(request: HttpRequest, release: Release, form: ErrataForm) -> HttpResponse | None:
    if not form.is_valid():
        return None
    try:
        new = release_errata(release=release, retire=form.cleaned_data["retire"], reason=form.cleaned_data["reason"],
                             name=form.cleaned_data["name"], by=request.user)
    except ValidationError as exc:
        for message in _errors(exc):
            form.add_error("retire" if "/" in message or "snippet" in message else None, message)
        return None
    messages.success(request, f"{new.name} is published without those snippets; every public result of "
                              f"{release.name} is being re-scored onto it (or carried over).")
    return redirect("contributions:release", slug=new.slug)


@staff_member_required
def release_admin_detail(request: HttpRequest, slug: str) -> HttpResponse:
    release = get_object_or_404(Release, slug=slug)
    action = request.POST.get("action", "publish") if request.method == "POST" else ""
    form = PublishForm(request.POST if action == "publish" else None)
    name_form = ReleaseNameForm(request.POST if action == "rename" else None, initial={"name": release.name},
                                prefix="rename")
    errata_form = ErrataForm(request.POST if action == "errata" else None, prefix="errata")
    default_warning = "" if release.frozen else release_default_switch_warning(release=release)
    status = 200
    if action == "rename":
        done = _release_rename(request, release, name_form)
        if done is not None:
            return done
        status = 400
    elif action == "errata":
        done = _release_errata(request, release, errata_form)
        if done is not None:
            return done
        status = 400
    elif action in ("held-out", "public"):
        try:
            messages.success(request, release_held_out_set(release=release, held_out=action == "held-out"))
        except ReleaseVisibilityError as exc:
            messages.error(request, str(exc))
        return redirect("contributions:release", slug=slug)
    elif request.method == "POST":
        if form.is_valid():
            if form.cleaned_data["make_default"] and default_warning and not form.cleaned_data["accept_fewer"]:
                # the home page would show fewer ranked models: say so before switching
                form.add_error("accept_fewer", f"{default_warning}. Tick this box to switch anyway.")
        if form.is_valid():
            try:
                release_publish(release=release, by=request.user, make_default=form.cleaned_data["make_default"])
            except ValidationError as exc:
                form.add_error(None, "; ".join(_errors(exc)))
            else:
                note = (f" The public results of {release.predecessor.name} are being re-scored onto it."
                        if release.predecessor_id else "")
                messages.success(request, f"Release {release.name} is published. The baselines are being scored.{note}")
                return redirect("contributions:release", slug=slug)
        status = 400
    baselines = Evaluation.objects.filter(release=release, source=Evaluation.BASELINE).select_related("model")
    return render(request, "contributions/release.html", {
        "r": release, "papers": selectors.release_papers(release=release), "form": form, "baselines": baselines,
        "scoring": any(not ev.complete for ev in baselines), "nav": "staff",
        "name_form": name_form, "errata_form": errata_form, "default_warning": default_warning,
    }, status=status)
