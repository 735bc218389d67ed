"""{% staff_menu %}: the pages that reviewers and staff work on, in the header's account menu.

The menu names pages of every app (and django-rq's), so it is the presentation app's: no app below
leaderboard knows the others' pages."""
from __future__ import annotations

from typing import Any

from django import template
from django.urls import NoReverseMatch, reverse

from accounts.roles import user_is_reviewer
from scoring import queue

register = template.Library()

#: (label, URL name, who sees it): 'reviewer' = group reviewers or staff
STAFF_PAGES = [
    ("Paper review queue", "contributions:queue", "reviewer"),
    ("Submission review", "submissions:review_queue", "reviewer"),
    ("Release drafts and publishing", "contributions:releases", "staff"),
    ("Environments", "submissions:environments", "staff"),
    ("Job queues", queue.HOME_URL_NAME, "staff"),
    ("Admin", "admin:index", "staff"),
]


def staff_links(*, user: Any) -> list[dict[str, str]]:
    """The staff pages this user may open, with their URLs (a page whose route is missing is left out)."""
    if user is None or not user.is_authenticated:
        return []
    reviewer = user_is_reviewer(user)
    links = []
    for label, name, who in STAFF_PAGES:
        if (who == "staff" and not user.is_staff) or (who == "reviewer" and not reviewer):
            continue
        try:
            links.append({"label": label, "url": reverse(name)})
        except NoReverseMatch:
            continue
    return links


@register.inclusion_tag("includes/staff_menu.html", takes_context=True)
def staff_menu(context: template.Context) -> dict[str, Any]:
    request = context.get("request")
    return {"links": staff_links(user=getattr(request, "user", None)), "request": request}
