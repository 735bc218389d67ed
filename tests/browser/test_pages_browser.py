"""The leaderboard pages in a real browser (Debian's Chromium driven by Playwright), under our CSP.

Opens every page (screenshots under test-artifacts/screenshots/), sorts and filters the
leaderboard, moves the contamination window with the slider and with plain date inputs (no
JavaScript), and opens a snippet drill-down.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
from tests.factories import make_demo  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = ROOT / "test-artifacts" / "screenshots"

# Records every CSP violation the page triggers, so a test can show the policy holds without breakage.
CSP_PROBE = """
window.__csp = [];
document.addEventListener('securitypolicyviolation', function (e) {
  window.__csp.push({directive: e.violatedDirective, sample: e.sample, source: e.sourceFile});
});
"""


@pytest.fixture
def site(tmp_path):
    from django.core.cache import cache

    cache.clear()
    return make_demo(n_models=6, pset_dir=tmp_path / "pset")


class Tab:
    """A page plus what went wrong on it: JS errors, console errors, CSP violations."""

    def __init__(self, browser, *, javascript: bool = True):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=javascript)
        self.context.add_init_script(CSP_PROBE)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on("pageerror", lambda exc: self.errors.append(f"pageerror: {exc}"))
        self.page.on("console", lambda m: m.type == "error" and self.errors.append(f"console: {m.text}"))

    def open(self, url: str):
        self.page.goto(url)
        self.page.wait_for_load_state("networkidle")
        return self.page

    def violations(self) -> list[dict]:
        found = self.page.evaluate("window.__csp || []")
        # plotly resets the colour bar's fill rectangles with attr("style", ""): an empty style
        # attribute, blocked and harmless (the fill is then set through the CSSOM, which CSP allows)
        return [v for v in found if not (v["directive"] == "style-src-attr" and not v["sample"])]

    def shot(self, name: str):
        SHOTS.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def _csp_errors(errors: list[str]) -> list[str]:
    return [e for e in errors if "Content Security Policy" in e and "style-src-attr" not in e and "inline style" not in e]


PAGES = {
    "home": "/",
    "leaderboard": "/leaderboard/",
    "per-paper": "/leaderboard/papers/",
    "contamination": "/leaderboard/contamination-safe/",
    "errors": "/leaderboard/errors/",
    "ablation": "/leaderboard/paper-ablation/",
    "releases": "/releases/",
    "release": "/releases/v-test/",
    "model": "/models/model-3/",
    "paper": "/papers/paper-2/",
    "snippet": "/papers/paper-2/snippet/?file=scale.py&name=scale+input",
    "drilldown": "/papers/paper-2/snippet/?file=scale.py&name=scale+input&model=model-1#drilldown",
    "not-found": "/models/no-such-model/",
}
CHART_PAGES = {"home", "leaderboard", "per-paper", "contamination", "errors", "ablation"}


def test_every_page_renders_under_csp_with_its_charts(live_server, browser, site):
    tab = Tab(browser)
    for name, path in PAGES.items():
        page = tab.open(live_server.url + path)
        assert page.locator("header.site-header").is_visible(), name
        if name in CHART_PAGES:
            charts = page.locator("div.chart")
            assert charts.count() >= 1, name
            for i in range(charts.count()):
                # charts.js marks a div once Plotly.newPlot resolved: the chart really drew
                page.wait_for_selector(f"#{charts.nth(i).get_attribute('id')}[data-rendered='1'] .main-svg", timeout=15000)
        tab.shot(name)
        assert tab.violations() == [], (name, tab.violations())
    # the not-found page is a 404 on purpose; inline-style reports are checked precisely by the probe
    unexpected = [e for e in tab.errors if "404" not in e and "Applying inline style" not in e]
    assert unexpected == [], unexpected


def _names(page) -> list[str]:
    return page.locator("#leaderboard tbody tr:not(.baseline) td:nth-child(2) > a").all_inner_texts()


def test_sort_and_filter_the_leaderboard(live_server, browser, site):
    tab = Tab(browser)
    page = tab.open(live_server.url + "/leaderboard/")
    header = page.locator("#leaderboard th[data-sort='model']")
    header.locator("a").click()  # JS sorts in place, no reload
    assert header.get_attribute("aria-sort") == "ascending"
    names = _names(page)
    assert names == sorted(names, key=str.lower)
    assert "sort=model" in page.url and "dir=asc" in page.url
    header.locator("a").click()
    assert header.get_attribute("aria-sort") == "descending"
    assert _names(page) == sorted(names, key=str.lower, reverse=True)
    # baselines stay at the bottom whatever the order
    last_rows = page.locator("#leaderboard tbody tr").all()[-2:]
    assert all("baseline" in (r.get_attribute("class") or "") for r in last_rows)

    scaled = page.locator("#leaderboard th[data-sort='scaled']")
    scaled.locator("a").click()
    values = [float(v) for v in page.locator("#leaderboard tbody tr:not(.baseline) td:nth-child(4)").evaluate_all(
        "cells => cells.map(c => c.getAttribute('data-value')).filter(v => v !== '')")]
    assert values == sorted(values, reverse=True)
    tab.shot("leaderboard-sorted")

    page.select_option("select[name=open_weights]", "1")
    page.locator("#leaderboard-filters button[type=submit]").click()
    page.wait_for_load_state("networkidle")
    assert "open_weights=1" in page.url
    rows = page.locator("#leaderboard tbody tr:not(.baseline)")
    assert rows.count() >= 1
    for i in range(rows.count()):
        assert rows.nth(i).locator(".badge-open").count() == 1
    page.select_option("select[name=open_weights]", "")
    page.select_option("select[name=organisation]", "OrgB")
    page.locator("#leaderboard-filters button[type=submit]").click()
    page.wait_for_load_state("networkidle")
    orgs = page.locator("#leaderboard tbody tr:not(.baseline) td:nth-child(3)").all_inner_texts()
    assert orgs and set(orgs) == {"OrgB"}
    tab.shot("leaderboard-filtered")
    assert _csp_errors(tab.errors) == [] and tab.violations() == []


def test_leaderboard_sorts_without_javascript(live_server, browser, site):
    tab = Tab(browser, javascript=False)
    page = tab.open(live_server.url + "/leaderboard/")
    assert page.locator("div.chart").count() == 1 and page.locator("#leaderboard tbody tr").count() == len(site.models)
    page.locator("#leaderboard th[data-sort='model'] a").click()
    page.wait_for_load_state("networkidle")
    assert "sort=model" in page.url
    names = _names(page)
    first = page.locator("#leaderboard th[data-sort='model']").get_attribute("aria-sort")
    expected = sorted(names, key=str.lower, reverse=first == "descending")
    assert names == expected


def _count(page) -> int:
    return int(page.locator("#window-paper-count").inner_text())


def test_move_the_contamination_window(live_server, browser, site):
    """Arrow keys move the window without a reload and keep the focus; Enter applies it; the cards,
    the live line and the date inputs always say the same window."""
    tab = Tab(browser)
    url = live_server.url + "/leaderboard/contamination-safe/?from=2024-01-01&to=2025-12-31"
    page = tab.open(url)
    dates = sorted(p.first_commit_date.isoformat() for p in site.papers)
    assert _count(page) == len(site.papers)
    start = page.locator(".range-slider input[data-role='from']")
    assert start.is_visible()
    start.focus()
    page.keyboard.press("ArrowRight")  # moves the thumb: no reload
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowLeft")
    assert page.url == url
    assert page.evaluate("document.activeElement.getAttribute('data-role')") == "from"
    assert page.locator("input[name=from]").input_value() == dates[1]
    assert _count(page) == len(site.papers) - 1  # the cards follow the window live
    assert page.locator("#window-from-text").inner_text() == dates[1]
    live = page.locator("#window-live").inner_text()
    assert f"{len(site.papers) - 1} papers" in live and dates[1] in live and "Not applied yet" in live

    with page.expect_navigation():
        page.keyboard.press("Enter")  # applies the window
    page.wait_for_load_state("networkidle")
    assert f"from={dates[1]}" in page.url
    assert _count(page) == len(site.papers) - 1
    assert page.evaluate("document.activeElement.getAttribute('data-role')") == "from"  # focus kept
    assert page.locator("#window-from-text").inner_text() == dates[1]
    assert "Not applied yet" not in page.locator("#window-live").inner_text()
    assert page.locator("#few-papers-warning").is_visible()  # fewer than 5 papers remain
    page.wait_for_selector("#window-chart[data-rendered='1'] .main-svg", timeout=15000)
    tab.shot("contamination-moved")

    # a window with no paper says so, in the cards and the live line alike
    page.fill("input[name=from]", "2099-01-01")
    assert _count(page) == 0
    assert page.locator("#window-live").inner_text().startswith("No paper")
    assert page.locator("#window-snippet-count").inner_text() == "0"
    assert _csp_errors(tab.errors) == [] and tab.violations() == []


def test_contamination_window_without_javascript(live_server, browser, site):
    tab = Tab(browser, javascript=False)
    page = tab.open(live_server.url + "/leaderboard/contamination-safe/")
    assert page.locator(".range-slider").count() == 0
    dates = sorted(p.first_commit_date for p in site.papers)
    page.fill("input[name=from]", dates[1].isoformat())
    page.fill("input[name=to]", dates[2].isoformat())
    page.locator("#window-form button[type=submit]").click()
    page.wait_for_load_state("networkidle")
    assert _count(page) == 2
    assert f"from={dates[1].isoformat()}" in page.url


def test_open_a_drilldown(live_server, browser, site):
    tab = Tab(browser)
    page = tab.open(live_server.url + "/papers/paper-1/")
    page.locator("#snippet-tree li[data-snippet='multiply'] > a").click()
    page.wait_for_load_state("networkidle")
    assert "TODO: Implement block" in page.locator(".side-by-side").inner_text()
    row = page.locator("#verdicts-table tbody tr").filter(has=page.locator(".badge-fail")).first
    model_name = row.locator("td").first.inner_text().strip()
    row.locator("a.drill-link").click()
    page.wait_for_load_state("networkidle")
    drill = page.locator("#drilldown")
    assert drill.is_visible() and model_name.split()[0] in drill.locator("h2").inner_text()
    assert drill.locator(".badge-fail").count() >= 1
    assert drill.locator("table.diff tr.add").count() >= 1  # the completion differs from the reference
    assert "AssertionError" in drill.locator("pre.output").inner_text()
    assert drill.locator(".repro").is_visible()
    tab.shot("drilldown-failed")
    assert _csp_errors(tab.errors) == [] and tab.violations() == []


def test_page_through_a_long_leaderboard(live_server, browser, site, settings):
    settings.RCB_TABLE_ROWS = 3  # the demo's rows then span several pages
    tab = Tab(browser)
    page = tab.open(live_server.url + "/leaderboard/?sort=model&dir=asc")
    pager = page.locator("nav.pager[data-pager='page']")
    assert pager.is_visible() and pager.locator("a[aria-current='page']").inner_text() == "1"
    first = _names(page)
    assert len(page.locator("#leaderboard tbody tr").all()) == 3
    pager.locator("a[rel='next']").click()
    page.wait_for_load_state("networkidle")
    assert "page=2" in page.url and "sort=model" in page.url and page.url.endswith("#leaderboard")
    second = _names(page)
    assert second and not set(first) & set(second)
    assert first + second == sorted(first + second, key=str.lower)  # the name order goes on across pages
    tab.shot("leaderboard-page-2")
    # a page of a longer table is sorted by the server: a header click loads the table's first page
    with page.expect_navigation():
        page.locator("#leaderboard th[data-sort='model'] a").click()
    page.wait_for_load_state("networkidle")
    assert "sort=model" in page.url and "dir=desc" in page.url and "page=" not in page.url
    assert page.locator("nav.pager a[aria-current='page']").inner_text() == "1"
    names = _names(page)
    assert names == sorted(names, key=str.lower, reverse=True)
    assert _csp_errors(tab.errors) == [] and tab.violations() == []


def test_page_links_fit_a_phone(live_server, browser, site, settings):
    settings.RCB_TABLE_ROWS = 1  # as many page links as the demo has models
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True)
    page = context.new_page()
    page.goto(live_server.url + "/leaderboard/?page=3")
    page.wait_for_load_state("networkidle")
    pager = page.locator("nav.pager")
    assert pager.is_visible()
    overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
    assert overflow <= 0, overflow
    box = pager.locator("a[rel='next']").bounding_box()
    assert box["height"] >= 24 and box["x"] + box["width"] <= 390
    page.screenshot(path=str(SHOTS / "leaderboard-pager-phone.png"), full_page=True)
    context.close()
