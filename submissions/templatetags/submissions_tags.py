"""Template tags of the submissions app for other apps' pages (the profile page lists recent submissions):
a page composes what each app shows without its view importing the app above it."""
from __future__ import annotations

from typing import Any

from django import template

from submissions import selectors

register = template.Library()

#: how many of a user's submissions the profile page lists
RECENT = 10


@register.simple_tag
def recent_submissions(user: Any) -> list:
    """The user's newest submissions (none for an anonymous visitor)."""
    if user is None or not user.is_authenticated:
        return []
    return list(selectors.submissions_of_user(user=user)[:RECENT])
