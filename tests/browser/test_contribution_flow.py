"""Must show, in a real browser: a contributor uploads a zipped demo-format paper, the report lists
the checks, a reviewer approves, and the paper appears in the next release once an admin publishes it."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from contributions_support import DEMO, contribution_env, run_worker, zip_folder  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.slow, pytest.mark.django_db(transaction=True)]

CHECK_TITLES = [
    "Archive unpacked safely",
    "Snippet tags are valid",
    "The reference code passes the test",
    "Every snippet, blanked, fails the test",
    "Three reference runs agree",
    "Runtime per snippet within budget",
    "Requirements installable into the sandbox image",
]


def snap(page, name: str) -> None:
    """With RCB_SCREENSHOTS=DIR, keep a screenshot of each step (for humans checking the pages)."""
    folder = os.environ.get("RCB_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}.png"), full_page=True)


def login(browser, base: str, username: str, password: str, next_path: str):
    page = browser.new_context().new_page()
    page.goto(f"{base}{next_path}")
    assert "/login" in page.url  # login_required sent us to the login form
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.locator("form:has(input[name=password]) [type=submit]").click()
    page.wait_for_url(f"{base}{next_path}")
    return page


def test_contribute_review_publish_in_a_browser(live_server, browser, tmp_path):
    from playwright.sync_api import expect
    from django.contrib.auth.models import Group, User

    from contributions.models import PaperContribution
    from catalog.models import Evaluation, Release

    with contribution_env(tmp_path):
        User.objects.create_user("carla", password="carla-pass-4821")
        rita = User.objects.create_user("rita", password="rita-pass-4821")
        rita.groups.add(Group.objects.get_or_create(name="reviewers")[0])
        User.objects.create_user("adam", password="adam-pass-4821", is_staff=True)
        archive = tmp_path / "focal-loss.zip"
        archive.write_bytes(zip_folder(DEMO / "focal-loss"))
        base = live_server.url

        # the contributor uploads the zipped paper folder with its metadata
        page = login(browser, base, "carla", "carla-pass-4821", "/contribute/")
        page.fill("input[name=paper_id]", "focal-loss-web")
        page.fill("input[name=title]", "Focal Loss for Dense Object Detection")
        page.fill("input[name=venue]", "ICCV2017")
        page.fill("input[name=arxiv_url]", "https://arxiv.org/abs/1708.02002")
        page.fill("input[name=code_url]", "https://github.com/facebookresearch/Detectron")
        page.fill("input[name=first_commit_date]", "2018-01-22")
        page.fill("textarea[name=annotated_files]", "focal_loss.py")
        page.set_input_files("input[name=archive]", str(archive))
        page.get_by_role("button", name="Upload and check").click()
        page.wait_for_selector("[data-status]")
        assert page.locator("[data-status]").first.get_attribute("data-status") == "submitted"
        contribution = PaperContribution.objects.get(paper_id="focal-loss-web")

        # a real RQ worker runs the checks; the page shows the report
        assert run_worker() == 0
        # no reload by hand: the page refreshes itself while the checks are queued or running
        table = page.locator("table#checks")
        table.wait_for(timeout=30_000)
        for title in CHECK_TITLES:
            row = table.locator("tr", has_text=title)
            assert row.count() == 1, title
            assert row.get_attribute("data-check-status") == "ok", (title, row.inner_text())
        assert page.locator("[data-status]").first.get_attribute("data-status") == "awaiting_review"
        snap(page, "1-report")

        # the reviewer finds it in the queue, sees report, snippet tree and code, and approves
        review = login(browser, base, "rita", "rita-pass-4821", "/contribute/review/")
        review.get_by_role("link", name="focal-loss-web").click()
        review.wait_for_selector("#snippet-tree")
        assert review.locator("#snippet-tree li").count() == 13
        assert review.locator(".highlight").count() >= 1
        snap(review, "2-review")
        review.check("input[name=decision][value=approve]")
        review.fill("textarea[name=comment]", "Tests are strong; approved.")
        review.get_by_role("button", name="Record decision").click()
        review.wait_for_selector("text=Decision recorded: approved")
        assert review.locator("[data-status]").first.get_attribute("data-status") == "approved"
        contribution.refresh_from_db()
        draft = contribution.release_paper.release
        assert draft.status == Release.DRAFT

        # the admin publishes the draft; the baselines are scored by the worker
        admin = login(browser, base, "adam", "adam-pass-4821", "/contribute/releases/")
        admin.get_by_role("link", name=draft.name).click()
        assert admin.locator("#release-papers [data-paper=focal-loss-web]").count() == 1
        admin.check("input[name=confirm]")
        admin.get_by_role("button", name="Publish release").click()
        admin.wait_for_selector("[data-release-status=published]")
        assert run_worker() == 0
        # the release page refreshes itself until every baseline is scored
        expect(admin.locator("#baselines tr[data-baseline=reference]")).to_contain_text("100.0 %", timeout=30_000)
        expect(admin.locator("#baselines tr[data-baseline=empty]")).to_contain_text("13 / 13", timeout=30_000)
        empty_row = admin.locator("#baselines tr[data-baseline=empty]").inner_text()
        assert "0.0 %" in empty_row and "100.0" not in empty_row
        assert Evaluation.objects.filter(release=draft, source=Evaluation.BASELINE).count() == 2
        snap(admin, "3-release")

        # the paper is in the published release, on the public release page
        public = browser.new_context().new_page()
        public.goto(f"{base}/releases/{draft.slug}/")
        assert public.get_by_text("focal-loss-web").count() >= 1
        snap(public, "4-public-release")
        draft.refresh_from_db()
        assert draft.frozen and draft.content_hash
