"""Security headers for every response: a strict CSP (no inline script or style anywhere)."""
from __future__ import annotations

from typing import Callable

from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse

__all__ = ["SecurityHeadersMiddleware", "NulRefusingMiddleware", "CONTENT_SECURITY_POLICY", "PERMISSIONS_POLICY"]

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
