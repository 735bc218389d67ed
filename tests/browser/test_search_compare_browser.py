"""From any page: the header's search box finds a model, and its results open a side-by-side comparison."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
from tests.factories import make_demo  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_search_from_the_header_then_compare(live_server, browser, tmp_path):
    from django.core.cache import cache

    cache.clear()
    make_demo(n_models=4, pset_dir=tmp_path / "pset")
    page = browser.new_context(viewport={"width": 1366, "height": 900}).new_page()
    page.goto(live_server.url + "/leaderboard/errors/")
    page.fill("header #model-search", "model")
    with page.expect_navigation():
        page.keyboard.press("Enter")
    assert "/models/?q=model" in page.url
    assert page.locator("#search-results tbody tr").count() >= 4
    with page.expect_navigation():
        page.locator("#compare-hits").click()
    assert page.locator("#compare-figures tbody tr").count() >= 2
    assert page.locator("#compare-figures .js-diff").first.is_visible()
    # change the choice with the form: untick all but two
    boxes = page.locator("#compare-form input[name=models]")
    for i in range(boxes.count()):
        boxes.nth(i).set_checked(i in (0, 1))
    with page.expect_navigation():
        page.locator("#compare-form button[type=submit]").click()
    assert page.locator("#compare-figures tbody tr").count() == 2
    assert page.locator("header nav[aria-label='Main'] a[aria-current='page']").inner_text() == "Compare"
