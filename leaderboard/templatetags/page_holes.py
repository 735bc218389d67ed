"""{% page_hole "name" %}: a visitor-specific part of a cached page (see leaderboard.page_cache)."""
from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from leaderboard.page_cache import hole_render

register = template.Library()


@register.simple_tag(takes_context=True)
def page_hole(context: template.Context, name: str) -> SafeString:
    """Render the hole's template for this request (a marker while the page is rendered for the cache)."""
    return hole_render(request=context.get("request"), name=name)
