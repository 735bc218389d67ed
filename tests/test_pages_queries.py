"""Each page's number of database queries does not grow with the number of models."""
from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from leaderboard import page_cache
from catalog.models import LLMModel, Paper, Release
from tests.factories import make_demo
from tests.test_pages import page_urls
from tests.test_pages_pagination import PAGED

pytestmark = pytest.mark.django_db


def _counts(client, demo, urls: dict[str, str] | None = None) -> dict[str, int]:
    counts = {}
    for name, url in (urls or page_urls(demo)).items():
        cache.clear()  # measure the uncached path: the cache must not hide a per-model query
        page_cache.local_clear()
        with CaptureQueriesContext(connection) as ctx:
            response = client.get(url)
        assert response.status_code == 200, (name, response.status_code)
        counts[name] = len(ctx.captured_queries)
        with CaptureQueriesContext(connection) as ctx:  # and the page cache's hit (leaderboard.page_cache)
            assert client.get(url).status_code == 200
        counts[f"{name} (warm)"] = len(ctx.captured_queries)
    return counts


def test_query_count_is_constant_in_the_number_of_models(client, tmp_path):
    small = _counts(client, make_demo(n_models=3, pset_dir=tmp_path / "a"))
    Release.objects.all().delete()
    LLMModel.objects.all().delete()
    Paper.objects.all().delete()
    large = _counts(client, make_demo(n_models=30, pset_dir=tmp_path / "b"))
    assert small == large, {k: (small[k], large[k]) for k in small if small[k] != large[k]}
    # and stays small in absolute terms; a warm page is the releases' stamp only
    assert max(large.values()) <= 15, large
    warm = {k: v for k, v in large.items() if k.endswith("(warm)")}
    assert warm and set(warm.values()) == {1}, warm


def _later_pages() -> dict[str, str]:
    """Page 2 of every paged table (and of the ablation's)."""
    tables = [*PAGED, (reverse("leaderboard:ablation") + "?", "page", "ablation-table", "ablation-table")]
    return {f"{base}{param}=2": f"{base}{param}=2" for base, param, *_ in tables}


def test_query_count_of_a_later_page_is_constant_in_the_number_of_models(client, tmp_path, settings):
    settings.RCB_TABLE_ROWS = 1  # page 2 exists at the small size too (the ablation has two rows)
    small = _counts(client, make_demo(n_models=3, pset_dir=tmp_path / "a"), _later_pages())
    Release.objects.all().delete()
    LLMModel.objects.all().delete()
    Paper.objects.all().delete()
    large = _counts(client, make_demo(n_models=30, pset_dir=tmp_path / "b"), _later_pages())
    assert small == large, {k: (small[k], large[k]) for k in small if small[k] != large[k]}
    warm = {k: v for k, v in large.items() if k.endswith("(warm)")}
    assert len(warm) == 9 and set(warm.values()) == {1}, warm
