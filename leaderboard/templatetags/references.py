"""{% load references %}{% benchmark_paper as paper %}: the hosted benchmark's paper, authors and links."""
from django import template

from leaderboard.references import BENCHMARK

register = template.Library()


@register.simple_tag
def benchmark_paper() -> dict:
    return BENCHMARK
