"""Who may see which release: the one door from a request to a release, and this process's memo of them.

``release_get`` is the door every page and API of every app takes (a draft is staff-only, unknown to
anyone else; a held-out release's content is staff-only). ``release_get_recent`` memoizes lookups of
published releases in this process for a few seconds (the API's hot path); ``release_memo_clear``
forgets them (catalog.aggregates calls it on every write). Writes of releases are in
catalog.releases and contributions.release_services.
"""
from __future__ import annotations

import time
from typing import Any

from .models import Release

__all__ = [
    "RELEASE_MEMO_SECONDS",
    "release_content_visible",
    "release_get",
    "release_get_recent",
    "release_memo_clear",
    "release_visible",
]


def release_visible(*, release: Release, viewer: Any = None) -> bool:
    """A published release is everyone's; a draft is staff's only.

    ``viewer`` (a user, or a lazy one) is looked at for drafts only: the pages of a published
    release stay the same for every visitor, which the page cache relies on.
    """
    return release.frozen or _is_staff(viewer)


def release_content_visible(*, release: Release, viewer: Any = None) -> bool:
    """A release's tasks, reference code, masked files and paper files: everyone's, but a held-out
    release's are staff's only (``viewer`` looked at for held-out releases only)."""
    return not release.held_out or _is_staff(viewer)


def _is_staff(viewer: Any) -> bool:
    return bool(viewer is not None and viewer.is_authenticated and viewer.is_staff)


def release_get(*, slug: str | None = None, viewer: Any = None, content: bool = False) -> Release:
    """The release with this slug (or display name); with None the default published one (else the
    newest published; for staff, when none is published, the default or newest draft).

    The one door from a request to a release: a draft is staff-only, to anyone else it does not
    exist. With ``content`` the caller serves the release's tasks, reference code or paper files:
    a held-out release's are staff-only, to anyone else they do not exist. Raises
    Release.DoesNotExist.
    """
    if slug:
        release = Release.objects.filter(slug=slug).first() or Release.objects.filter(name=slug).first()
        if release is None or not release_visible(release=release, viewer=viewer):
            raise Release.DoesNotExist(f"no release {slug!r}")
        if content and not release_content_visible(release=release, viewer=viewer):
            raise Release.DoesNotExist(f"release {slug!r} is held out: its tasks and code are not public")
        return release
    published = Release.objects.filter(status=Release.PUBLISHED)
    release = (
        published.filter(is_default=True).first()
        or published.order_by("-release_date", "-published_at", "-created_at").first()
    )
    if release is None and _is_staff(viewer):
        release = Release.objects.filter(is_default=True).first() or Release.objects.order_by("-created_at").first()
    if release is None:
        raise Release.DoesNotExist("no release yet")
    return release


#: per-process memo of published releases' lookups for the hot API path: {slug or None: (time, release)}
_RELEASE_MEMO: dict[str | None, tuple[float, Release]] = {}


RELEASE_MEMO_SECONDS = 2.0


def release_memo_clear() -> None:
    """Forget memoized releases (writes in this process call it; other processes wait out the TTL)."""
    _RELEASE_MEMO.clear()


def release_get_recent(*, slug: str | None = None, viewer: Any = None, max_age: float = RELEASE_MEMO_SECONDS) -> Release:
    """release_get, memoized in this process for ``max_age`` seconds (published releases only).

    For the API's cached responses: a hit then costs no query at all. A write made by another
    process (a scoring worker) shows after at most ``max_age`` seconds.
    """
    now = time.monotonic()
    hit = _RELEASE_MEMO.get(slug)
    if hit is not None and now - hit[0] < max_age:
        return hit[1]
    release = release_get(slug=slug, viewer=viewer)
    if release.frozen:
        if len(_RELEASE_MEMO) > 256:
            _RELEASE_MEMO.clear()
        _RELEASE_MEMO[slug] = (now, release)
    return release
