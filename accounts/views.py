"""Sign-up and the profile page (API tokens). Login, logout and password reset are Django's own views."""
from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from .forms import SignupForm, TokenForm
from .roles import user_is_reviewer
from .services import api_token_create, api_token_revoke
from .throttle import signup_allowed

__all__ = ["signup", "profile", "token_revoke"]


def signup(request: HttpRequest) -> HttpResponse:
    if request.user.is_authenticated:
        return redirect("accounts:profile")
    if request.method == "POST" and not signup_allowed(request):
        minutes = settings.RCB_SIGNUP_WINDOW_MINUTES
        return render(request, "accounts/signup.html", {"form": SignupForm(), "refused": (
            f"Too many sign-ups from your network address: try again in up to {minutes} minutes.")}, status=429)
    form = SignupForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = form.save()
        login(request, user, backend="django.contrib.auth.backends.ModelBackend")
        messages.success(request, f"Welcome, {user.username}. Create an API token below to submit from scripts.")
        return redirect("accounts:profile")
    return render(request, "accounts/signup.html", {"form": form}, status=400 if form.errors else 200)


#: the session key holding a just-made token until the next page of the profile shows it
NEW_TOKEN_SESSION_KEY = "accounts.new_token"


@login_required
def profile(request: HttpRequest) -> HttpResponse:
    form = TokenForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        _, raw = api_token_create(user=request.user, name=form.cleaned_data["name"])
        # post/redirect/get: a reload shows the page again, it does not make another token; the raw
        # token waits in the session for that one page, which takes it out (the database keeps a hash)
        request.session[NEW_TOKEN_SESSION_KEY] = raw
        return redirect("accounts:profile")
    new_token = request.session.pop(NEW_TOKEN_SESSION_KEY, None) if request.method == "GET" else None
    return render(
        request,
        "accounts/profile.html",
        {
            "form": form,
            "new_token": new_token,
            "tokens": request.user.api_tokens.all(),
            "is_reviewer": user_is_reviewer(request.user),
        },
        status=400 if form.errors else 200,
    )


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    if api_token_revoke(user=request.user, token_id=pk):
        messages.success(request, "The token is revoked: requests with it are refused from now on.")
    return redirect("accounts:profile")
