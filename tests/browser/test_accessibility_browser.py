"""axe-core on every public page and the submit, contribute and review pages, at desktop and phone sizes.

axe-core comes from npm (package.json; scripts/test.sh runs ``npm ci``) and is injected from
node_modules into each page by Playwright; the context bypasses our CSP for that one script only
(the page's own CSP stays what the other browser tests check). No violation of impact serious or
critical may remain. The data: the published results (32 models, 20 papers, a release page with a
citation block) and the factory's demo release (code with line numbers, drill-downs, baselines).
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
from tests.factories import make_demo  # noqa: E402

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
PUBLISHED = ROOT.parent / "shared" / "upstream" / "overall_stats.json"
SIZES = {"desktop": {"width": 1366, "height": 900}, "phone": {"width": 375, "height": 812}}
BLOCKING = ("serious", "critical")

RUN_AXE = """() => axe.run(document, {resultTypes: ['violations']}).then(r => r.violations
  .filter(v => %s.includes(v.impact))
  .map(v => ({id: v.id, impact: v.impact, nodes: v.nodes.slice(0, 3).map(n => n.target.join(' '))})))""" % json.dumps(
    list(BLOCKING))


def public_pages(demo) -> list[str]:
    model = demo.models[0].key
    paper = demo.papers[1].paper_id
    snippet = f"/papers/{paper}/snippet/?file=scale.py&name=scale+input"
    return [
        "/", "/leaderboard/", "/leaderboard/papers/", "/leaderboard/contamination-safe/",
        "/leaderboard/errors/", "/leaderboard/paper-ablation/", "/leaderboard/cost/", "/leaderboard/hardest-snippets/", "/releases/", "/releases/v-test/",
        "/releases/v1-0-published/", "/leaderboard/?release=v1-0-published",
        "/leaderboard/papers/?release=v1-0-published", "/releases/v1-0-published/leaderboard/",
        f"/models/{model}/", f"/papers/{paper}/", snippet, f"{snippet}&model={model}#drilldown",
        "/papers/Diff-Transformer/?release=v1-0-published", "/models/GPT_4_1/?release=v1-0-published",
        "/accounts/login/", "/accounts/signup/", "/models/no-such-model/", "/api/", "/queue/",
        "/models/?q=model", f"/compare/?models={model}&models={demo.models[2].key}",
    ]


SIGNED_IN_PAGES = ["/submit/", "/contribute/", "/contribute/mine/", "/review/submissions/", "/contribute/review/", "/submissions/",
                   "/accounts/profile/"]


@pytest.fixture
def site(tmp_path):
    from django.contrib.auth.models import Group, User
    from django.core.cache import cache
    from django.core.management import call_command

    from accounts.roles import REVIEWERS_GROUP

    if not AXE.exists():
        pytest.fail(f"{AXE} is missing: run `npm ci` in {ROOT} (scripts/test.sh does)")
    if not PUBLISHED.exists():
        pytest.fail(f"{PUBLISHED} is missing (the published results)")
    cache.clear()
    demo = make_demo(n_models=6, pset_dir=tmp_path / "pset")
    call_command("import_published", str(PUBLISHED), verbosity=0)
    reviewer = User.objects.create_user("rita", password="rita-pass-4821", is_staff=True)
    reviewer.groups.add(Group.objects.get_or_create(name=REVIEWERS_GROUP)[0])
    return demo


def _violations(page, url: str) -> list[dict]:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    for i in range(page.locator("div.chart").count()):
        chart_id = page.locator("div.chart").nth(i).get_attribute("id")
        page.wait_for_selector(f"#{chart_id}[data-rendered='1'] .main-svg", timeout=20000)
    if page.locator("#api-reference").count():
        page.wait_for_selector("#api-reference[data-rendered='1'] .opblock", timeout=20000)
    page.add_script_tag(path=str(AXE))
    return page.evaluate(RUN_AXE)


@pytest.mark.parametrize("size", SIZES)
def test_no_serious_axe_violations(live_server, browser, site, size):
    context = browser.new_context(viewport=SIZES[size], bypass_csp=True)
    page = context.new_page()
    found = {}
    for path in public_pages(site):
        if v := _violations(page, live_server.url + path):
            found[path] = v
    page.goto(live_server.url + "/accounts/login/")
    page.fill("input[name=username]", "rita")
    page.fill("input[name=password]", "rita-pass-4821")
    page.locator("form:has(input[name=password]) [type=submit]").click()
    page.wait_for_load_state("networkidle")
    assert "/login" not in page.url
    for path in SIGNED_IN_PAGES:
        if v := _violations(page, live_server.url + path):
            found[path] = v
    context.close()
    assert found == {}, json.dumps(found, indent=1)
