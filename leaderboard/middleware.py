"""Security headers for every response: a strict CSP (no inline script or style anywhere); private
answers never stored by a browser's or a proxy's cache; URLs with a NUL byte refused."""
from __future__ import annotations

from typing import Callable

from django.conf import settings
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse
from django.utils.cache import patch_vary_headers

__all__ = [
    "SecurityHeadersMiddleware",
    "PrivateAnswersMiddleware",
    "NulRefusingMiddleware",
    "CONTENT_SECURITY_POLICY",
    "PERMISSIONS_POLICY",
]

# Everything the site runs or styles is a static file of our own; data reaches scripts through
# <script type="application/json"> blocks, which the browser never executes. Plotly only changes
# styles through the CSSOM (element.style), which CSP does not govern, so no 'unsafe-inline' is needed.
CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "font-src 'self'",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
PERMISSIONS_POLICY = "camera=(), microphone=(), geolocation=(), payment=(), usb=(), interest-cohort=()"


class SecurityHeadersMiddleware:
    """Add CSP, Permissions-Policy and (as a fallback) Referrer-Policy unless a view set its own."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        # the admin and django-rq pages ship inline scripts of their own; they sit behind a login
        if not request.path.startswith(("/admin/", "/django-rq/")):
            response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers.setdefault("Permissions-Policy", PERMISSIONS_POLICY)
        response.headers.setdefault("Referrer-Policy", "same-origin")
        response.headers.setdefault("Cross-Origin-Opener-Policy", "same-origin")
        return response


class PrivateAnswersMiddleware:
    """Keep what may depend on who asks out of shared and browser caches, in one place for every view.

    An answer to a request that came with credentials (a session cookie or an ``Authorization``
    header) says ``Cache-Control: private, no-store``, unless its view said it is the same for
    everyone (``public``: the page cache's pages and the API's tables, leaderboard.page_cache) or
    already chose a private policy that revalidates (``private, no-cache``: the page cache's pages
    filled for a signed-in visitor). Every answer varies on ``Authorization`` and ``Cookie``.
    """

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        patch_vary_headers(response, ("Authorization", "Cookie"))
        directives = {d.split("=")[0].strip().lower() for d in response.get("Cache-Control", "").split(",")}
        if "public" in directives:
            return response
        credentials = "HTTP_AUTHORIZATION" in request.META or settings.SESSION_COOKIE_NAME in request.COOKIES
        if credentials and not ("private" in directives and directives & {"no-cache", "no-store"}):
            response["Cache-Control"] = "private, no-store"
        return response


class NulRefusingMiddleware:
    """Answer 400 to a URL whose path or query holds a NUL byte: no text column (PostgreSQL) can
    hold one, so every lookup with it would fail; one check here instead of one per view."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        if "\x00" in request.path or any("\x00" in key or any("\x00" in v for v in values)
                                          for key, values in request.GET.lists()):
            message = "the URL holds a NUL byte (%00), which no parameter may contain"
            if request.path.startswith("/api/"):
                return JsonResponse({"error": message, "messages": [message]}, status=400)
            return HttpResponseBadRequest(message, content_type="text/plain; charset=utf-8")
        return self.get_response(request)
