"""Public pages from a shared cache, with conditional GET and headers a proxy or CDN may act on.

How a request to a page wrapped in ``public_page`` is served:

1. One query reads every release's (id, created_at, data_version, status, is_default, slug, name):
   the *stamp*. Every write that changes what a page shows moves a release's ``data_version``
   (``aggregates.release_touch``, ``release_tiers_refresh`` and the signal handlers in
   ``aggregates``), so a write changes the stamp and the very next request renders afresh, in
   every process (no per-process memo). Old entries are never read again and expire.
2. The key is the view, scheme, host, path, the sorted query parameters, the stamp and a hash of
   the code and templates (a deploy never serves what the previous code rendered).
3. A miss renders the view for an *anonymous copy* of the request: no cookies, an empty session,
   no messages, an anonymous user that notes whether anything looked at it. So an entry never
   holds anything of one visitor. The parts of ``base.html`` that belong to the visitor are holes
   (``{% page_hole "account" %}``: the account menu, flash messages), stored as markers; CSRF
   tokens are stored as a placeholder. One process renders a key at a time (the others wait).
   Each process also keeps the entries it served last in memory (``RCB_PAGE_CACHE_LOCAL_MB``):
   keys change with every write, so such a copy is never stale.
4. A hit fills the holes and the CSRF token for the request. Anonymous visitors without messages
   get the stored, pre-filled bytes: ``Cache-Control: public`` with ``s-maxage`` (a proxy may
   serve them for a few seconds), ``max-age`` for browsers (0 by default: they revalidate with
   ``If-None-Match`` / ``If-Modified-Since`` and get a 304 while nothing changed).
   Logged-in visitors get the same content with their own holes, ``Cache-Control: private``.
5. A view whose render looked at the user or the session depends on the visitor: its entry is
   served to anonymous visitors only; logged-in ones get the view rendered for them.

Pages must take everything they show from the URL (path and query) and the database; a setting
kept in a cookie or the session would not be part of the key. A write to a table that a page
shows must move the release's data_version (call ``aggregates.release_touch``). The page number
of a long table (``?page=``, leaderboard.query.PAGE_PARAMS) is a query parameter like any other,
so each page of a table is its own entry; the rows per page are in the key too.

A *live* page (``public_page(stamp=..., live_seconds=N)``, the scoring queue) is not release data:
its stamp is its own query (the queue's jobs and their states), so a job that starts, finishes or
fails shows on the next request, and the key also changes every N seconds, so figures its stamp
does not see (a job's progress, the estimated waits) are at most N seconds old. A proxy may keep
it for at most N seconds too (``s-maxage``).
"""
from __future__ import annotations

import copy
import functools
import hashlib
import hmac
import json
import re
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import wraps
from importlib import import_module
from typing import Any, Callable

from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.contrib.messages.storage import default_storage
from django.contrib.messages.storage.cookie import CookieStorage
from django.core.cache import cache
from django.db import connection
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.middleware.csrf import get_token
from django.template.loader import render_to_string
from django.utils.cache import get_conditional_response, patch_vary_headers
from django.utils.http import http_date, quote_etag
from django.utils.safestring import SafeString, mark_safe

from catalog.models import Release
from catalog.tables import table_rows

__all__ = [
    "HOLES",
    "code_version",
    "local_clear",
    "hole_render",
    "page_render_context",
    "page_stamp",
    "public_page",
    "public_response_headers",
    "not_modified",
]

#: visitor-specific parts of base.html: filled on every request, never stored filled for one visitor
HOLES = {"account": "includes/account_menu.html", "messages": "includes/messages.html"}
#: response headers an entry does not keep (they are set per request or would be wrong when replayed)
_DROPPED_HEADERS = {"set-cookie", "vary", "cache-control", "etag", "last-modified", "content-length", "expires"}
_LOCK_SECONDS = 60  # a render that takes longer lets a second process render too
_WAIT_SECONDS = 30.0  # how long a request waits for another process's render of the same key


def _setting(name: str, default: Any) -> Any:
    return getattr(settings, name, default)


def _nonce() -> str:
    """A secret, stable across processes: user text cannot forge a hole marker or the CSRF placeholder."""
    return hmac.new(settings.SECRET_KEY.encode(), b"rcb-page-cache-holes", hashlib.sha256).hexdigest()[:20]


def _marker(name: str) -> str:
    return f"<!--rcb-hole:{_nonce()}:{name}-->"


def _csrf_placeholder() -> str:
    return f"rcbcsrf{_nonce()}"


# --------------------------------------------------------------------------- template side
def page_render_context(request: HttpRequest) -> dict[str, Any]:
    """Context processor: while a page is rendered for the cache, CSRF tokens are a placeholder."""
    if getattr(request, "_rcb_page_render", False):
        return {"csrf_token": _csrf_placeholder()}
    return {}


def hole_render(*, request: HttpRequest | None, name: str) -> SafeString:
    """A hole of base.html: its marker while rendering for the cache, else its template for this request."""
    if name not in HOLES:
        raise ValueError(f"unknown page hole {name!r} (known: {', '.join(HOLES)})")
    if request is not None and getattr(request, "_rcb_page_render", False):
        return mark_safe(_marker(name))
    # only what the request gives (user, messages, CSRF, path): the same as when filled from the cache
    return mark_safe(render_to_string(HOLES[name], request=request))


def _holes_fill(body: str, request: HttpRequest) -> tuple[str, list[str]]:
    """Replace every hole marker of ``body`` by its template rendered for ``request``."""
    filled: list[str] = []
    pattern = re.compile(re.escape(f"<!--rcb-hole:{_nonce()}:") + r"(\w+)-->")

    def one(match: re.Match) -> str:
        html = render_to_string(HOLES[match.group(1)], request=request) if match.group(1) in HOLES else ""
        filled.append(html)
        return html

    return pattern.sub(one, body), filled


# --------------------------------------------------------------------------- stamp and key
_STAMP_FIELDS = ("id", "created_at", "data_version", "status", "is_default", "slug", "name")


@functools.cache
def _stamp_sql(vendor: str) -> str:
    quote = connection.ops.quote_name
    columns = ", ".join(quote(Release._meta.get_field(f).column) for f in _STAMP_FIELDS)
    return f"SELECT {columns} FROM {quote(Release._meta.db_table)} ORDER BY 1"


def page_stamp() -> str:
    """What every public page depends on, in one query: each release's identity and data version."""
    # plain SQL: on a cache hit this is the request's only query, and the ORM's compiling of it
    # cost as much as the rest of the hit
    with connection.cursor() as cursor:
        cursor.execute(_stamp_sql(connection.vendor))
        rows = cursor.fetchall()
    return hashlib.sha256(repr(rows).encode()).hexdigest()[:24]


@functools.cache
def code_version() -> str:
    """A hash of what renders the pages: templates, the apps' code, the static files' manifest.

    In every key, so a deploy that changes how a page looks never serves the pages the previous
    code rendered (a shared Redis outlives deploys). Computed once per process.
    """
    from pathlib import Path

    base = Path(settings.BASE_DIR)
    digest = hashlib.sha256()
    roots = [base / "templates", *(base / app for app in ("leaderboard", "accounts", "submissions", "contributions"))]
    files = sorted(p for root in roots if root.is_dir() for p in root.rglob("*")
                   if p.suffix in (".py", ".html", ".txt") and "migrations" not in p.parts and p.is_file())
    manifest = Path(settings.STATIC_ROOT or "") / "staticfiles.json"
    for path in [*files, *([manifest] if settings.STATIC_ROOT and manifest.is_file() else [])]:
        digest.update(str(path.relative_to(base) if path.is_relative_to(base) else path).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def _key(request: HttpRequest, view_name: str, stamp: str) -> str:
    query = sorted((k, v) for k, values in request.GET.lists() for v in values)
    # the rows per page of long tables: another size makes other pages under the same ?page=
    raw = json.dumps([view_name, request.scheme, request.get_host(), request.path, query, stamp, code_version(),
                      table_rows()])
    return "rcb:page:" + hashlib.sha256(raw.encode()).hexdigest()[:40]


# --------------------------------------------------------------------------- entries
@dataclass
class _Entry:
    status: int
    headers: list[tuple[str, str]]
    body: bytes  # with hole markers and the CSRF placeholder
    anonymous_body: bytes  # holes filled for an anonymous visitor without messages
    holed: bool  # body has hole markers
    has_csrf: bool  # body (or a hole) has the CSRF placeholder
    etag: str  # of anonymous_body
    last_modified: float  # when the stamp it was rendered under was read
    user_dependent: bool  # the render looked at the user or the session
    cacheable: bool  # False: not a page to replay (error, stream, cookies): the view runs per request


class _WatchedAnonymous(AnonymousUser):
    """An anonymous user that notes any attribute read (the page then depends on the visitor)."""

    def __init__(self) -> None:
        object.__setattr__(self, "_rcb_touched", False)

    def __getattribute__(self, name: str) -> Any:
        if not name.startswith("_rcb"):
            object.__setattr__(self, "_rcb_touched", True)
        return super().__getattribute__(name)


def _anonymous_copy(request: HttpRequest) -> tuple[HttpRequest, _WatchedAnonymous]:
    """The request as a visitor without cookies, session, user or messages would send it."""
    clone = copy.copy(request)
    meta = {k: v for k, v in request.META.items()
            if k not in ("HTTP_COOKIE", "HTTP_AUTHORIZATION", "CSRF_COOKIE", "CSRF_COOKIE_NEEDS_UPDATE")}
    clone.META = meta
    if hasattr(request, "environ"):
        clone.environ = meta
    clone.COOKIES = {}
    user = _WatchedAnonymous()
    clone.user = user

    async def auser() -> AnonymousUser:
        return user

    clone.auser = auser
    clone.session = import_module(settings.SESSION_ENGINE).SessionStore()
    clone._messages = default_storage(clone)
    clone._rcb_page_render = True
    return clone, user


def _render(view: Callable[..., HttpResponseBase], request: HttpRequest, args: tuple, kwargs: dict,
            stamp_time: float) -> tuple[_Entry, HttpResponseBase]:
    """Run the view for the anonymous copy of ``request``; describe the result as an entry."""
    clone, user = _anonymous_copy(request)
    response = view(clone, *args, **kwargs)
    if hasattr(response, "render") and not getattr(response, "is_rendered", True):
        response = response.render()
    user_dependent = bool(object.__getattribute__(user, "_rcb_touched")) or clone.session.accessed
    cache_control = (response.get("Cache-Control") or "").lower()
    cacheable = (
        response.status_code == 200
        and not response.streaming
        and not response.cookies
        and "private" not in cache_control
        and "no-store" not in cache_control
    )
    if not cacheable:
        return _Entry(status=response.status_code, headers=[], body=b"", anonymous_body=b"", holed=False,
                      has_csrf=False, etag="", last_modified=stamp_time, user_dependent=user_dependent,
                      cacheable=False), response
    body = response.content
    holed = b"<!--rcb-hole:" in body
    anonymous_body = body
    if holed:
        clone.user = AnonymousUser()  # filling the holes is not the page looking at the visitor
        anonymous_body = _holes_fill(body.decode(response.charset), clone)[0].encode(response.charset)
    headers = [(k, v) for k, v in response.items() if k.lower() not in _DROPPED_HEADERS]
    entry = _Entry(
        status=200, headers=headers, body=body, anonymous_body=anonymous_body, holed=holed,
        has_csrf=_csrf_placeholder().encode() in anonymous_body,
        etag=quote_etag(hashlib.sha256(anonymous_body).hexdigest()[:32]), last_modified=stamp_time,
        user_dependent=user_dependent, cacheable=True,
    )
    return entry, response


#: the entries this process served last, by key: a hit then skips unpickling (and, with Redis, the
#: transfer of) a page of a few hundred kB. Keys change with every write, so a copy is never stale.
_LOCAL: OrderedDict[str, _Entry] = OrderedDict()
_LOCAL_SIZES: dict[str, int] = {}
_LOCAL_LOCK = threading.Lock()


def local_clear() -> None:
    """Forget this process's in-memory copies (tests that measure a cold cache clear both)."""
    with _LOCAL_LOCK:
        _LOCAL.clear()
        _LOCAL_SIZES.clear()


def _local_get(key: str) -> _Entry | None:
    with _LOCAL_LOCK:
        entry = _LOCAL.get(key)
        if entry is not None:
            _LOCAL.move_to_end(key)
        return entry


def _local_put(key: str, entry: _Entry) -> None:
    limit = int(_setting("RCB_PAGE_CACHE_LOCAL_MB", 32)) * 1024 * 1024
    size = len(entry.body) + (len(entry.anonymous_body) if entry.anonymous_body is not entry.body else 0)
    if size > limit // 4:
        return
    with _LOCAL_LOCK:
        _LOCAL[key] = entry
        _LOCAL_SIZES[key] = size
        while _LOCAL and sum(_LOCAL_SIZES.values()) > limit:
            old, _ = _LOCAL.popitem(last=False)
            _LOCAL_SIZES.pop(old, None)


def _entry_get_or_render(key: str, render: Callable[[], tuple[_Entry, HttpResponseBase | None]], *,
                         timeout: int | None = None) -> tuple[_Entry, HttpResponseBase | None]:
    """The stored entry, else render it; one process renders a key while the others wait for it."""
    entry = _local_get(key)
    if entry is not None:
        return entry, None
    entry = cache.get(key)
    if entry is not None:
        _local_put(key, entry)
        return entry, None
    lock = key + ":lock"
    if not cache.add(lock, 1, _LOCK_SECONDS):
        deadline = time.monotonic() + _WAIT_SECONDS
        while time.monotonic() < deadline:
            time.sleep(0.05)
            entry = cache.get(key)
            if entry is not None:
                _local_put(key, entry)
                return entry, None
            if cache.get(lock) is None:
                break  # the other render ended without storing (an error): render here
    try:
        entry, response = render()
        cache.set(key, entry, timeout or _setting("RCB_PAGE_CACHE_SECONDS", 3600))
        _local_put(key, entry)
        return entry, response
    finally:
        cache.delete(lock)


# --------------------------------------------------------------------------- headers
def public_response_headers(response: HttpResponseBase, *, etag: str | None, last_modified: float | None = None,
                            shared: bool = True, max_seconds: int | None = None) -> HttpResponseBase:
    """Cache-Control, ETag, Last-Modified and Vary for a response that any visitor may be given;
    ``max_seconds`` caps how long a browser or proxy may keep it (a live page's refresh period)."""
    if shared:
        max_age = int(_setting("RCB_PAGE_CACHE_MAX_AGE", 0))
        shared_max_age = int(_setting("RCB_PAGE_CACHE_SHARED_MAX_AGE", 10))
        if max_seconds is not None:
            max_age, shared_max_age = min(max_age, max_seconds), min(shared_max_age, max_seconds)
        response["Cache-Control"] = f"public, max-age={max_age}, s-maxage={shared_max_age}"
    else:
        response["Cache-Control"] = "private, no-cache"
    if etag:
        response["ETag"] = etag
    if last_modified is not None:
        response["Last-Modified"] = _http_date(int(last_modified))
    return response


@functools.lru_cache(maxsize=256)
def _http_date(seconds: int) -> str:
    return http_date(seconds)


def not_modified(request: HttpRequest, *, etag: str, last_modified: float | None = None) -> HttpResponse | None:
    """A 304 (or 412) when the request's conditional headers match, else None."""
    return get_conditional_response(
        request, etag=etag, last_modified=int(last_modified) if last_modified is not None else None
    )


def _has_messages(request: HttpRequest) -> bool:
    storage = getattr(request, "_messages", None)
    return storage is not None and len(storage) > 0


def _plain_visitor(request: HttpRequest) -> bool:
    """No session and no messages cookie: an anonymous visitor with nothing of their own to show.

    Decided from the cookies alone, so the most common hit never loads a session or messages.
    """
    cookies = request.COOKIES
    return settings.SESSION_COOKIE_NAME not in cookies and CookieStorage.cookie_name not in cookies


def _replay(request: HttpRequest, entry: _Entry, *, plain: bool, max_seconds: int | None = None) -> HttpResponseBase:
    """The entry as this visitor's response (a 304 when they have it already)."""
    anonymous = plain or (not request.user.is_authenticated and not _has_messages(request))
    shared = anonymous and not entry.has_csrf
    if anonymous:
        body, etag = entry.anonymous_body, entry.etag
    else:
        charset = next((v.split("charset=")[-1] for k, v in entry.headers if k.lower() == "content-type"
                        and "charset=" in v), "utf-8")
        text, holes = _holes_fill(entry.body.decode(charset), request) if entry.holed else (entry.body.decode(charset), [])
        body = text.encode(charset)
        etag = quote_etag(hashlib.sha256("\0".join([entry.etag, *holes]).encode()).hexdigest()[:32])
    if entry.has_csrf:
        body = body.replace(_csrf_placeholder().encode(), get_token(request).encode())
        etag = None  # a fresh token each time: nothing to revalidate against
    last_modified = entry.last_modified if shared else None
    if etag and (hit := not_modified(request, etag=etag, last_modified=last_modified)) is not None:
        response: HttpResponseBase = hit
    else:
        response = HttpResponse(body, status=entry.status)
        for k, v in entry.headers:
            response[k] = v
    public_response_headers(response, etag=etag, last_modified=last_modified, shared=shared, max_seconds=max_seconds)
    patch_vary_headers(response, ("Cookie",))
    return response


def _per_visitor(response: HttpResponseBase) -> HttpResponseBase:
    response["Cache-Control"] = "private, no-cache"
    patch_vary_headers(response, ("Cookie",))
    return response


# --------------------------------------------------------------------------- the decorator
def public_page(view: Callable[..., HttpResponseBase] | None = None, *, stamp: Callable[[], str] = page_stamp,
                live_seconds: int | None = None) -> Any:
    """Serve a public page from the page cache (see the module docstring for how).

    ``public_page(view)`` for release pages (the releases' stamp); ``public_page(stamp=f,
    live_seconds=N)(view)`` for a live page: ``f()`` is one cheap query that changes whenever what
    the page shows changes state, and the page is rendered afresh at least every N seconds.
    """
    if view is None:
        return functools.partial(public_page, stamp=stamp, live_seconds=live_seconds)
    view_name = f"{view.__module__}.{view.__qualname__}"
    timeout = 2 * live_seconds if live_seconds else None

    @wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if request.method not in ("GET", "HEAD") or not _setting("RCB_PAGE_CACHE", True):
            return view(request, *args, **kwargs)
        stamp_time = time.time()
        current = stamp()
        if live_seconds:
            current += f":{int(stamp_time // live_seconds)}"
        key = _key(request, view_name, current)
        try:
            entry, fresh = _entry_get_or_render(key, lambda: _render(view, request, args, kwargs, stamp_time),
                                                timeout=timeout)
        except Exception:
            # e.g. a 404 for anonymous visitors: a logged-in owner may still be allowed to see it
            if request.user.is_authenticated:
                return _per_visitor(view(request, *args, **kwargs))
            raise
        plain = _plain_visitor(request)
        if entry.user_dependent and not plain and request.user.is_authenticated:
            return _per_visitor(view(request, *args, **kwargs))
        if not entry.cacheable:
            if fresh is not None:  # rendered just now for an anonymous visitor: fine for this one too
                return _per_visitor(_fresh_filled(fresh, request))
            return view(request, *args, **kwargs)
        return _replay(request, entry, plain=plain, max_seconds=live_seconds)

    wrapper.public_page = True  # type: ignore[attr-defined]
    return wrapper


def _fresh_filled(response: HttpResponseBase, request: HttpRequest) -> HttpResponseBase:
    """A response rendered for the anonymous copy, with its holes and CSRF token filled for ``request``."""
    if response.streaming or not isinstance(response, HttpResponse):
        return response
    body = response.content
    if b"<!--rcb-hole:" in body:
        body = _holes_fill(body.decode(response.charset), request)[0].encode(response.charset)
    if _csrf_placeholder().encode() in body:
        body = body.replace(_csrf_placeholder().encode(), get_token(request).encode())
    response.content = body
    return response
