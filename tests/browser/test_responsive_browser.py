"""The pages at a laptop's 1366×900 and a phone's 390×844, with the published results (32 models, 20 papers).

Debian's Chromium driven by Playwright, as in test_pages_browser.py. Screenshots go to
test-artifacts/screenshots/responsive/ (look at them: they are what a visitor sees).
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

SHOTS = ROOT / "test-artifacts" / "screenshots" / "responsive"
DESKTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
PUBLISHED = ROOT.parent / "shared" / "upstream" / "overall_stats.json"

PAGES = {
    "home": "/",
    "leaderboard": "/leaderboard/",
    "per-paper": "/leaderboard/papers/",
    "contamination": "/leaderboard/contamination-safe/",
    "errors": "/leaderboard/errors/",
    "releases": "/releases/",
}


@pytest.fixture
def published():
    from django.core.cache import cache
    from django.core.management import call_command

    if not PUBLISHED.exists():
        pytest.fail(f"{PUBLISHED} is missing (the published results)")
    cache.clear()
    call_command("import_published", str(PUBLISHED), verbosity=0)


def _open(browser, url: str, viewport: dict, *, mobile: bool = False):
    context = browser.new_context(viewport=viewport, is_mobile=mobile, has_touch=mobile,
                                  device_scale_factor=2 if mobile else 1)
    page = context.new_page()
    page.goto(url)
    page.wait_for_load_state("networkidle")
    for i in range(page.locator("div.chart").count()):
        chart_id = page.locator("div.chart").nth(i).get_attribute("id")
        page.wait_for_selector(f"#{chart_id}[data-rendered='1'] .main-svg", timeout=20000)
    return page


class Problems:
    """Every failed check of a test, reported together once all screenshots are taken."""

    def __init__(self):
        self.found: list[str] = []

    def check(self, ok, what) -> None:
        if not ok:
            self.found.append(str(what))

    def done(self) -> None:
        assert self.found == [], "\n".join(self.found)


def _shot(page, name: str) -> None:
    """The whole page, and what the first screen shows."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
    page.screenshot(path=str(SHOTS / f"{name}-first-screen.png"))


def _plot_width(page, chart_id: str) -> float:
    """Width in CSS pixels of a chart's plotting area (the grid, without axis labels and margins)."""
    return page.evaluate(
        "id => { const r = document.querySelector('#' + id + ' .nsewdrag'); return r ? r.getBoundingClientRect().width : 0; }",
        chart_id,
    )


def test_desktop_pages_fit_and_read_well(live_server, browser, published):
    problems = Problems()
    for name, path in PAGES.items():
        page = _open(browser, live_server.url + path, DESKTOP)
        _shot(page, f"{name}-1366x900")
        # nothing sticks out of the page sideways
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        problems.check(overflow <= 0, (name, overflow))
        if name == "leaderboard":
            # the whole table fits its box: no column is cut off at 1366 px
            fits = page.evaluate("""() => { const t = document.querySelector('#leaderboard');
                return t.scrollWidth - t.parentElement.clientWidth; }""")
            problems.check(fits <= 0, f"the leaderboard is {fits}px too wide")
            # a successor release's rows carry two more figures in the rate's cell (the markup of
            # leaderboard_table.html for a predecessor and a scorable subset): the table still fits
            fits = page.evaluate("""() => { const t = document.querySelector('#leaderboard');
                for (const td of t.querySelectorAll('tbody td:nth-child(4)')) td.insertAdjacentHTML('beforeend',
                  ' <span class="ci js-previous">was 12.34 %</span> <span class="ci js-full">whole release 12.34 %</span>');
                return t.scrollWidth - t.parentElement.clientWidth; }""")
            problems.check(fits <= 0, f"with a successor's figures the leaderboard is {fits}px too wide")
            cutoffs = page.locator("#leaderboard tbody td.cutoff").all_inner_texts()
            problems.check("2024-07" in cutoffs and "2024-7" not in cutoffs, cutoffs)
            # numeric columns: heading and cells right-aligned, figures in tabular digits
            aligned = page.evaluate("""() => [...document.querySelectorAll('#leaderboard th.num, #leaderboard td.num')]
                .every(c => getComputedStyle(c).textAlign === 'right' && getComputedStyle(c).fontVariantNumeric.includes('tabular-nums'))""")
            problems.check(aligned, 'aligned')
        if name == "per-paper":
            # links in the heatmap table look like links (accent colour and underlined), not like text
            style = page.evaluate("""() => { const a = document.querySelector('#heatmap-table tbody a');
                const s = getComputedStyle(a); return [s.textDecorationLine, s.color, getComputedStyle(document.body).color]; }""")
            problems.check("underline" in style[0] and style[1] != style[2], style)
            # every row has one cell per column: the cells line up with their headings
            counts = page.evaluate("""() => { const t = document.querySelector('#heatmap-table');
                return [t.tHead.rows[0].cells.length, ...[...t.tBodies[0].rows].map(r => r.cells.length)]; }""")
            problems.check(len(set(counts)) == 1, counts)
            problems.check(_plot_width(page, "heatmap-chart") > 500, ("heatmap grid", _plot_width(page, "heatmap-chart")))
    problems.done()


def test_phone_pages_are_usable(live_server, browser, published):
    problems = Problems()
    for name, path in PAGES.items():
        page = _open(browser, live_server.url + path, PHONE, mobile=True)
        _shot(page, f"{name}-390x844")
        # the menu is collapsed behind one button: the header stays one line
        header = page.locator("header.site-header").bounding_box()
        problems.check(header["height"] <= 64, (name, header))
        problems.check(not page.locator("#site-nav a").first.is_visible(), 'not page.locator("#site-nav a").first.is_visible()')
        # the page itself never scrolls sideways; wide tables scroll inside their box
        overflow = page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")
        problems.check(overflow <= 0, (name, overflow))
        for i in range(page.locator("div.chart").count()):
            chart_id = page.locator("div.chart").nth(i).get_attribute("id")
            page.locator(f"#{chart_id}").screenshot(path=str(SHOTS / f"{name}-{chart_id}-390x844.png"))
            problems.check(_plot_width(page, chart_id) >= 200, (name, chart_id, _plot_width(page, chart_id)))
        if name == "per-paper":
            # the heatmap: a real grid (scrolls sideways in its box), every model label fully shown
            grid = _plot_width(page, "heatmap-chart")
            problems.check(grid >= 300, grid)
            scroller = page.evaluate("""() => { const c = document.querySelector('#heatmap-chart');
                const box = c.closest('.chart-scroll'); return box ? [box.scrollWidth, box.clientWidth] : null; }""")
            problems.check(scroller and scroller[0] > scroller[1], scroller)
            clipped = page.evaluate("""() => { const c = document.querySelector('#heatmap-chart');
                const left = c.getBoundingClientRect().left;
                return [...c.querySelectorAll('.yaxislayer-above .ytick text')].filter(t => t.getBoundingClientRect().left < left - 1).length; }""")
            problems.check(clipped == 0, f"{clipped} model labels are cut off")
    # the menu opens and shows every entry
    page = _open(browser, live_server.url + "/leaderboard/", PHONE, mobile=True)
    page.locator("button.nav-toggle").click()
    assert page.locator("#site-nav a", has_text="Per paper").is_visible()
    _shot(page, "menu-open-390x844")
    problems.done()


def test_contribute_form_looks_like_the_submit_form(live_server, browser, published):
    from django.contrib.auth.models import User

    User.objects.create_user("carla", password="pw-carla-12345")
    context = browser.new_context(viewport=DESKTOP)
    page = context.new_page()
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "carla")
    page.fill("input[name=password]", "pw-carla-12345")
    page.locator("form:has(input[name=password]) [type=submit]").click()
    page.wait_for_load_state("networkidle")
    looks = {}
    for name, path, form in (("submit", "/submit/", "form.stacked"), ("contribute", "/contribute/", "#contribution-form")):
        page.goto(live_server.url + path)
        page.wait_for_load_state("networkidle")
        _shot(page, f"{name}-form-1366x900")
        looks[name] = page.evaluate("""sel => { const f = document.querySelector(sel);
            const field = f.querySelector('p.field'), input = f.querySelector('p.field input[type=text]');
            const s = getComputedStyle(input), l = getComputedStyle(field);
            return {form: f.className, field: l.display + ' ' + l.flexDirection, border: s.borderTopWidth + ' ' + s.borderTopColor,
                    radius: s.borderTopLeftRadius, padding: s.paddingLeft, label: !!field.querySelector('label')}; }""", form)
    assert looks["contribute"] == looks["submit"], looks
    assert looks["submit"]["field"] == "flex column" and looks["submit"]["label"]


LONG_MATH = ("Display math: $$\\mathcal{L}(\\theta) = -\\frac{1}{N}\\sum_{i=1}^{N} \\alpha_t (1 - p_{t,i})^{\\gamma}"
             " \\log p_{t,i} + \\lambda \\lVert \\theta \\rVert_2^2 + \\beta \\sum_{j=1}^{M} w_j x_j^2 + \\kappa \\int_0^1 f(x)\\,dx$$")


def test_no_page_is_wider_than_a_phone(live_server, browser, published, tmp_path):
    """At 375 px nothing pushes a page sideways: code blocks and display formulas scroll in place."""
    from tests.factories import make_demo

    demo = make_demo(n_models=3, slug="v-math", pset_dir=tmp_path / "pset", summary=LONG_MATH)
    paper = demo.papers[0].paper_id
    problems = Problems()
    for path in ["/releases/v1-0-published/", f"/papers/{paper}/?release=v-math", "/leaderboard/papers/?release=v1-0-published",
                 "/releases/v-math/", f"/papers/{paper}/snippet/?release=v-math&file=scale.py&name=scale+input"]:
        page = _open(browser, live_server.url + path, {"width": 375, "height": 812}, mobile=True)
        width = page.evaluate("document.scrollingElement.scrollWidth")
        problems.check(width <= 375, f"{path}: the page is {width} px wide at 375 px")
        if "papers/?" in path:
            hint = page.locator("#heatmap-scroll-hint")
            problems.check(hint.is_visible() and "20 papers" in hint.inner_text(), f"{path}: no hint to scroll the heatmap")
        if path.startswith(f"/papers/{paper}/?"):
            problems.check(page.locator(".math-display math").count() == 1, f"{path}: the display formula is missing")
        page.context.close()
    problems.done()


def test_header_has_one_current_item_and_the_release_switcher(live_server, browser, published, tmp_path):
    from tests.factories import make_demo

    make_demo(n_models=3, slug="v-two", pset_dir=tmp_path / "pset")
    page = _open(browser, live_server.url + "/leaderboard/papers/?release=v1-0-published", DESKTOP)
    header = page.locator("header.site-header")
    assert header.locator("[aria-current='page']").count() == 1
    assert header.locator("a", has_text="Releases").count() == 1
    switch = header.locator("select#release-switch")
    assert switch.is_visible()
    switch.select_option("v-two")
    header.locator(".inline-release button[type=submit]").click()
    page.wait_for_load_state("networkidle")
    assert "release=v-two" in page.url and "/leaderboard/papers/" in page.url
    assert page.locator("footer select").count() == 0
