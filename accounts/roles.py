"""Roles of a user on the site: who reviews contributions and flagged submissions (defined once, here)."""
from __future__ import annotations

from typing import Any

__all__ = ["REVIEWERS_GROUP", "user_is_reviewer"]

#: members of this group (and staff) review contributions and clear flagged evaluations
REVIEWERS_GROUP = "reviewers"


def user_is_reviewer(user: Any) -> bool:
    """Whether the user may review: staff, or a member of the reviewers group."""
    return bool(user.is_authenticated and (user.is_staff or user.groups.filter(name=REVIEWERS_GROUP).exists()))
