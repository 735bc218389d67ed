"""Issue 21 in a real browser: signing in from a page of a non-default release comes back to it
(query kept), and a new API token is shown once with a copy button; a reload makes no second token."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
from tests.factories import make_demo  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_sign_in_returns_to_the_release_page_and_the_token_page_is_post_redirect_get(browser, live_server, tmp_path):
    from django.contrib.auth.models import User
    from django.core.cache import cache

    from accounts.models import APIToken
    from catalog.models import Paper, Release, ReleasePaper

    cache.clear()
    make_demo(n_models=2, pset_dir=tmp_path / "pset")
    other = Release.objects.create(name="Other release", slug="other", status=Release.PUBLISHED)
    ReleasePaper.objects.create(release=other, paper=Paper.objects.create(paper_id="only-in-other"), folder="")
    user = User.objects.create_user("lena", "lena@example.org", "pw-lena-123456!")
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=live_server.url)
    page = context.new_page()
    start = f"{live_server.url}/papers/only-in-other/?release=other"
    page.goto(start)
    page.click("text=Log in")
    page.fill("input[name=username]", "lena")
    page.fill("input[name=password]", "pw-lena-123456!")
    page.click("main form button[type=submit]")
    page.wait_for_load_state("networkidle")
    assert page.url == start and "Other release" in page.inner_text("main")

    page.goto(f"{live_server.url}/accounts/profile/")
    page.fill("input[name=name]", "laptop")
    page.click("#create-token")
    page.wait_for_load_state("networkidle")
    assert page.url == f"{live_server.url}/accounts/profile/"  # redirected: a reload is a GET
    token = page.inner_text("#new-token").strip()
    assert token.startswith("rcb_") and APIToken.objects.filter(user=user).count() == 1
    copy = page.locator("button.js-copy")
    assert copy.is_visible()
    copy.click()
    page.wait_for_function("document.querySelector('.js-copy-status').textContent.length > 0")
    assert page.inner_text(".js-copy-status") == "Copied."
    assert page.evaluate("navigator.clipboard.readText()") == token
    page.reload()
    page.wait_for_load_state("networkidle")
    assert page.locator("#new-token").count() == 0 and APIToken.objects.filter(user=user).count() == 1
    context.close()
