"""Server-rendered pages: every page renders, bad input never gives a 500, headers and HTML stay CSP-clean."""
from __future__ import annotations

import csv
import io
import json
import re
from html.parser import HTMLParser

import pytest
from django.core.cache import cache
from django.urls import reverse

from catalog.models import LLMModel, Paper
from tests.factories import make_demo

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    # selectors cache some figures by release id; ids repeat between tests on a fresh database
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def demo(tmp_path):
    return make_demo(n_models=3, pset_dir=tmp_path / "pset")


def page_urls(demo) -> dict[str, str]:
    slug = demo.release.slug
    return {
        "home": reverse("leaderboard:home"),
        "leaderboard": reverse("leaderboard:leaderboard"),
        "leaderboard_release": reverse("leaderboard:release_leaderboard", args=[slug]),
        "leaderboard_query": reverse("leaderboard:leaderboard") + f"?release={slug}",
        "per_paper": reverse("leaderboard:per_paper"),
        "per_paper_choice": reverse("leaderboard:per_paper") + "?paper=paper-2",
        "contamination": reverse("leaderboard:contamination"),
        "contamination_window": reverse("leaderboard:contamination") + "?from=2024-03-01&to=2024-12-31",
        "errors": reverse("leaderboard:errors"),
        "ablation": reverse("leaderboard:ablation"),
        "releases": reverse("leaderboard:releases"),
        "release": reverse("leaderboard:release_detail", args=[slug]),
        "model": reverse("leaderboard:model", args=["model-1"]),
        "paper": reverse("leaderboard:paper", args=["paper-1"]),
        "snippet": reverse("leaderboard:snippet", args=["paper-1"]) + "?file=scale.py&name=multiply",
        "drilldown": reverse("leaderboard:snippet", args=["paper-1"]) + "?file=scale.py&name=multiply&model=model-1",
    }


class ScriptAudit(HTMLParser):
    """Collect every <script>, <style> and style= attribute and inline event handler of a page."""

    def __init__(self):
        super().__init__()
        self.scripts: list[dict] = []
        self.styles = 0
        self.style_attrs: list[str] = []
        self.handlers: list[str] = []
        self._in_json = False
        self.json_blocks: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts.append(a)
            self._in_json = a.get("type") == "application/json"
            if self._in_json:
                self.json_blocks.append("")
        if tag == "style":
            self.styles += 1
        if "style" in a:
            self.style_attrs.append(f"<{tag} style={a['style']!r}>")
        self.handlers += [f"<{tag} {k}>" for k in a if k.startswith("on")]

    def handle_endtag(self, tag):
        if tag == "script":
            self._in_json = False

    def handle_data(self, data):
        if self._in_json:
            self.json_blocks[-1] += data


def audit(html: str) -> ScriptAudit:
    parser = ScriptAudit()
    parser.feed(html)
    return parser


def test_every_page_renders_with_security_headers_and_no_inline_code(client, demo):
    for name, url in page_urls(demo).items():
        response = client.get(url)
        assert response.status_code == 200, (name, url, response.status_code)
        csp = response["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "style-src 'self'" in csp and "unsafe-inline" not in csp, name
        assert "frame-ancestors 'none'" in csp
        assert response["X-Frame-Options"] == "DENY"
        assert response["Referrer-Policy"] == "same-origin"
        assert "camera=()" in response["Permissions-Policy"]
        html = response.content.decode()
        found = audit(html)
        inline = [s for s in found.scripts if "src" not in s and s.get("type") != "application/json"]
        assert inline == [], (name, inline)
        assert found.styles == 0 and found.style_attrs == [] and found.handlers == [], (name, found.style_attrs, found.handlers)
        for block in found.json_blocks:
            json.loads(block)  # every data block parses (and so cannot hide markup)
            assert "</" not in block


def test_pages_show_demo_content(client, demo):
    urls = page_urls(demo)
    board = client.get(urls["leaderboard"]).content.decode()
    assert "Model 2" in board and "Partial Model" in board
    assert "unranked" in board  # the incomplete model is shown, not ranked
    assert board.count('class="badge badge-baseline"') == 2
    assert 'class="tier"' in board and "[" in board  # tiers and intervals
    assert 'data-chart="leaderboard-chart"' in board

    per_paper = client.get(urls["per_paper"]).content.decode()
    assert 'id="heatmap-table"' in per_paper and 'data-chart="heatmap-chart"' in per_paper
    assert all(p.paper_id in per_paper for p in demo.papers)

    errors = client.get(urls["errors"]).content.decode()
    assert "timeout" in errors and 'data-chart="errors-chart"' in errors

    ablation = client.get(urls["ablation"]).content.decode()
    assert "Model 0" in ablation and "Model 1" in ablation and 'id="ablation-table"' in ablation

    releases = client.get(urls["releases"]).content.decode()
    assert "@misc{" in releases and demo.release.name in releases
    release = client.get(urls["release"]).content.decode()
    assert demo.release.content_hash in release and "@misc{" in release
    assert f"url = {{http://testserver/releases/{demo.release.slug}/}}" in release
    assert f"url = {{http://testserver/releases/{demo.release.slug}/}}" in releases

    model = client.get(urls["model"]).content.decode()
    assert "Reproducibility card" in model and "temperature=0.0" in model and "rcbhub-prompt-1" in model
    assert demo.release.content_hash[:16] in model and "0.1.0" in model


def test_paper_page_renders_markdown_highlighting_and_tree(client, demo):
    html = client.get(page_urls(demo)["paper"]).content.decode()
    assert "<strong>bold</strong>" in html and 'href="https://example.org"' in html
    assert 'class="highlight"' in html  # pygments with CSS classes
    assert re.search(r'<span class="[a-z]+">factor</span>|factor', html)
    assert 'data-snippet="multiply"' in html and "depth-1" in html
    # the paper's folder hash is labelled as the paper's, the release's hash as the release's
    from catalog.models import Release, ReleasePaper

    ReleasePaper.objects.filter(release=demo.release, paper__paper_id="paper-1").update(content_hash="p" * 64)
    release = Release.objects.get(pk=demo.release.pk)
    release.content_hash = "r" * 64
    release.save()  # its pages move on with it (catalog.aggregates)
    html = client.get(page_urls(demo)["paper"]).content.decode()
    release_dd = html.split("<dt>Release</dt>")[1].split("</dd>")[0]
    assert "r" * 12 in release_dd and "p" * 12 not in release_dd and "release hash" in release_dd
    paper_dd = html.split('id="paper-hash"')[1].split("</dd>")[0]
    assert "p" * 12 in paper_dd and "Paper files hash" in html


def test_snippet_page_masked_view_and_drilldown(client, demo):
    urls = page_urls(demo)
    html = client.get(urls["snippet"]).content.decode()
    assert "TODO: Implement block" in html and "multiply" in html  # benchmark_core.masking on the real file
    assert "Approximately 1 line of code." in html
    assert "completion &amp; output" in html

    drill = client.get(urls["drilldown"]).content.decode()
    assert 'id="drilldown"' in drill and "Reproducibility card" in drill
    result = demo.evaluations[1].results.get(snippet__paper__paper_id="paper-1", snippet__name="multiply")
    if result.passed:
        assert "identical to the reference" in drill
    else:
        assert 'class="add"' in drill and 'class="del"' in drill and "AssertionError: mismatch" in drill


def test_summary_is_sanitized(client, demo):
    Paper.objects.filter(paper_id="paper-1").update(
        summary=(
            "Hello <script>alert('x')</script> <img src=x onerror=alert(1)> "
            "[click](javascript:alert(2)) <a href=\"https://ok.example\" onclick=\"evil()\">ok</a>"
            "<style>body{display:none}</style><iframe src=https://evil.example></iframe>"
        )
    )
    html = client.get(page_urls(demo)["paper"]).content.decode()
    summary = html.split('id="summary"', 1)[1].split("</div>", 1)[0]
    assert "<script" not in summary and "onerror" not in summary and "onclick" not in summary
    assert "javascript:" not in summary and "<iframe" not in summary and "<style" not in summary
    assert 'href="https://ok.example"' in summary and "Hello" in summary


def test_names_are_escaped(client, demo):
    LLMModel.objects.filter(key="model-2").update(display_name="<b onmouseover=x>Evil</b>", organisation="<i>Org</i>")
    for name in ("leaderboard", "per_paper", "errors", "contamination", "home"):
        html = client.get(page_urls(demo)[name]).content.decode()
        assert "<b onmouseover" not in html and "<i>Org</i>" not in html, name


@pytest.mark.parametrize(
    "path",
    [
        "/releases/no-such-release/",
        "/releases/no-such-release/leaderboard/",
        "/leaderboard/?release=no-such-release",
        "/leaderboard/papers/?release=no-such-release",
        "/leaderboard/contamination-safe/?release=nope",
        "/leaderboard/errors/?release=nope",
        "/leaderboard/paper-ablation/?release=nope",
        "/models/no-such-model/",
        "/papers/no-such-paper/",
        "/papers/paper-1/snippet/?name=no-such-snippet",
        "/papers/paper-1/snippet/",
        "/papers/paper-1/snippet/?name=multiply&model=no-such-model",
        "/no/such/page/",
    ],
)
def test_unknown_objects_give_the_404_page(client, demo, path):
    response = client.get(path)
    assert response.status_code == 404
    html = response.content.decode()
    assert "Not found" in html and 'class="site-header"' in html
    assert "Resolver404" not in html and "Traceback" not in html
    assert "Content-Security-Policy" in response


def test_404_without_any_release(client):
    for path in ("/leaderboard/", "/leaderboard/papers/", "/releases/x/"):
        assert client.get(path).status_code == 404
    home = client.get("/")
    assert home.status_code == 200 and "load_demo" in home.content.decode()
    assert client.get("/releases/").status_code == 200


@pytest.mark.parametrize(
    "url_name, query, message",
    [
        ("leaderboard", "?sort=bogus", "Cannot sort by"),
        ("leaderboard", "?sort=scaled&dir=sideways", "is not asc or desc"),
        ("leaderboard", "?open_weights=maybe", "'maybe'"),
        ("leaderboard", "?with_paper=perhaps", "'perhaps'"),
        ("leaderboard", "?organisation=Nobody", "No model of organisation"),
        ("contamination", "?from=yesterday", "'yesterday'"),
        ("contamination", "?from=2025-01-01&to=2024-01-01", "after"),
        ("contamination", "?to=2024-13-45", "'2024-13-45'"),
        ("per_paper", "?paper=nope", "No paper 'nope'"),
        ("per_paper", "?with_paper=2", "with_paper='2'"),
        ("errors", "?with_paper=x", "with_paper='x'"),
    ],
)
def test_bad_parameters_fall_back_with_a_message(client, demo, url_name, query, message):
    response = client.get(reverse(f"leaderboard:{url_name}") + query)
    assert response.status_code == 200
    html = response.content.decode()
    notices = re.findall(r'<li class="message warning" data-notice>(.*?)</li>', html, re.S)
    assert any(message in n.replace("&#x27;", "'") for n in notices), notices


def _model_order(html: str) -> list[str]:
    return re.findall(r'<tr class="[^"]*" data-model="([^"]+)"', html)


def test_server_side_sort_and_filters(client, demo):
    url = reverse("leaderboard:leaderboard")
    by_name = _model_order(client.get(url + "?sort=model&dir=asc").content.decode())
    ranked_part = [k for k in by_name if k not in ("reference", "empty")]
    names = {m.key: m.display_name.lower() for m in demo.models}
    assert ranked_part == sorted(ranked_part, key=names.get)
    assert by_name[-2:] == ["reference", "empty"] or set(by_name[-2:]) == {"reference", "empty"}  # baselines stay last

    desc = _model_order(client.get(url + "?sort=model&dir=desc").content.decode())
    assert [k for k in desc if k not in ("reference", "empty")] == list(reversed(ranked_part))

    by_scaled = _model_order(client.get(url + "?sort=scaled&dir=asc").content.decode())
    evs = {e.model.key: e.scaled_pass_rate for e in demo.evaluations if e.with_paper}
    values = [evs[k] for k in by_scaled if k not in ("reference", "empty")]
    assert values == sorted(values)

    open_only = _model_order(client.get(url + "?open_weights=1").content.decode())
    assert open_only and all(LLMModel.objects.get(key=k).open_weights for k in open_only)
    closed = _model_order(client.get(url + "?open_weights=0").content.decode())
    assert closed and not any(LLMModel.objects.get(key=k).open_weights for k in closed)
    org = _model_order(client.get(url + "?organisation=OrgB").content.decode())
    assert org == ["model-1"]

    without = client.get(url + "?with_paper=0").content.decode()
    assert set(_model_order(without)) == {"model-0", "model-1"}


def test_contamination_window_changes_the_papers(client, demo):
    url = reverse("leaderboard:contamination")
    wide = client.get(url + "?from=2024-01-01&to=2025-12-31").content.decode()
    narrow = client.get(url + "?from=2024-05-01&to=2024-12-31").content.decode()
    count = lambda html: int(re.search(r'id="window-paper-count">(\d+)<', html).group(1))  # noqa: E731
    assert count(wide) == 4
    dates = sorted(p.first_commit_date.isoformat() for p in demo.papers)
    assert count(narrow) == sum(1 for d in dates if "2024-05-01" <= d <= "2024-12-31")
    assert 'id="few-papers-warning"' in narrow  # fewer than 5 papers remain
    papers_json = re.search(r'<script id="window-papers" type="application/json">(.*?)</script>', wide, re.S).group(1)
    assert len(json.loads(papers_json)) == 4
    assert "Each model after its own knowledge cutoff" in wide and "Papers after cutoff" in wide


def _rows(response) -> list[dict[str, str]]:
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "attachment" in response["Content-Disposition"]
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_csv_downloads_of_every_table(client, demo):
    urls = page_urls(demo)
    board = _rows(client.get(urls["leaderboard"] + "?format=csv"))
    assert len(board) == len(demo.models) and {"model", "scaled_pass_rate", "ci95_low", "ci95_high", "tier"} <= set(board[0])
    assert len(_rows(client.get(urls["per_paper"] + "?format=csv"))) == len(demo.models)
    assert len(_rows(client.get(urls["per_paper"] + "?format=csv&table=paper"))) == len(demo.models)
    assert _rows(client.get(urls["contamination"] + "?format=csv"))
    assert _rows(client.get(urls["contamination"] + "?format=csv&table=per_model"))
    errors = _rows(client.get(urls["errors"] + "?format=csv"))
    assert len(errors) == len(demo.models) - 2  # baselines excluded
    assert len(_rows(client.get(urls["ablation"] + "?format=csv"))) == 2
    assert len(_rows(client.get(urls["releases"] + "?format=csv"))) == 1
    assert len(_rows(client.get(urls["paper"] + "?format=csv"))) == len(demo.models)
    assert len(_rows(client.get(urls["paper"] + "?format=csv&table=snippets"))) == 3
    assert len(_rows(client.get(urls["release"] + "?format=csv"))) == len(demo.papers)
    model_rows = _rows(client.get(urls["model"] + "?format=csv"))
    assert len(model_rows) == 2 * len(demo.papers)  # model-1 has a with-paper and a without-paper evaluation
    assert len(_rows(client.get(urls["snippet"] + "&format=csv"))) == len(demo.models)
    # every table on a page has a CSV link
    for name in ("home", "leaderboard", "per_paper", "contamination", "errors", "ablation", "releases", "release",
                 "model", "paper", "snippet"):
        html = client.get(urls[name]).content.decode()
        assert "format=csv" in html, name


def test_page_downloads_are_the_api_tables(client, demo):
    """A page's CSV of a table the API serves is the API's CSV of it, byte for byte: same columns (the
    API's names: ci95_low/ci95_high, diff, ...), same cells."""
    urls, slug = page_urls(demo), demo.release.slug
    twins = {
        urls["leaderboard"]: "/api/v1/leaderboard",
        urls["contamination"]: "/api/v1/leaderboard?view=contamination_safe",
        urls["contamination"] + "?table=per_model": "/api/v1/contamination",
        urls["per_paper"]: "/api/v1/heatmap",
        urls["per_paper"] + "?table=paper&paper=paper-1": "/api/v1/papers/paper-1/leaderboard",
        urls["paper"]: "/api/v1/papers/paper-1/leaderboard",
        urls["errors"]: "/api/v1/error-categories",
        urls["ablation"]: "/api/v1/paper-ablation",
    }
    for page, api in twins.items():
        sep = "&" if "?" in page else "?"
        page_csv = client.get(f"{page}{sep}format=csv").content.decode()
        api_csv = client.get(f"{api}{'&' if '?' in api else '?'}release={slug}&format=csv").content.decode()
        assert page_csv == api_csv and len(page_csv.splitlines()) > 1, (page, api)
    header = page_csv.splitlines()[0].split(",")
    assert header == ["model", "name", "with_paper", "without_paper", "diff", "ci95_low", "ci95_high"]
    # tables only the pages offer use the API's names for the same things too
    snippets = _rows(client.get(urls["paper"] + "?format=csv&table=snippets"))
    api_snippets = client.get(f"/api/v1/papers/paper-1?release={slug}").json()["snippets"]
    assert [(r["file"], r["name"], r["parent"], int(r["depth"])) for r in snippets] == [
        (s["file"], s["name"], s["parent"] or "", s["depth"]) for s in api_snippets]
    releases = _rows(client.get(urls["releases"] + "?format=csv"))
    api_releases = client.get("/api/v1/releases").json()["releases"]
    assert [(r["slug"], r["date"]) for r in releases] == [(r["slug"], r["date"] or "") for r in api_releases]


def test_csv_neutralises_formulas(client, demo):
    LLMModel.objects.filter(key="model-2").update(display_name="=HYPERLINK(\"http://evil\")")
    rows = _rows(client.get(reverse("leaderboard:leaderboard") + "?format=csv"))
    assert any(r["name"].startswith("'=") for r in rows)


def test_ablation_empty_state(client, tmp_path):
    make_demo(n_models=3, with_ablation=False)
    html = client.get(reverse("leaderboard:ablation")).content.decode()
    assert 'id="ablation-empty"' in html and "--without-paper" in html


def test_plotly_is_served_from_our_static_files():
    from django.contrib.staticfiles import finders

    found = finders.find("vendor/plotly-cartesian.min.js")
    assert found and found.endswith("plotly-cartesian.min.js")  # versions and CSS: tests/test_static_files.py


def test_chart_pages_reference_local_plotly_only(client, demo):
    html = client.get(reverse("leaderboard:leaderboard")).content.decode()
    srcs = re.findall(r'<script[^>]* src="([^"]+)"', html)
    assert any(s.endswith("vendor/plotly-cartesian.min.js") for s in srcs)
    assert all(s.startswith("/static/") for s in srcs), srcs
    assert 'id="plotly.js-style-global" class="no-inline-styles"' in html


def test_500_page_renders_without_a_request_or_database():
    from django.template import loader

    html = loader.get_template("500.html").render({})
    assert "Something went wrong" in html and "<script" not in html


def test_drilldown_diffs_the_inserted_code_not_the_prose(client, demo):
    from catalog.models import SnippetResult

    result = SnippetResult.objects.get(
        evaluation=demo.evaluations[0], snippet__paper__paper_id="paper-1", snippet__name="multiply"
    )
    result.completion = "Sure! Here is the code:\n\n```python\n    y = y * factor * 2\n```\nHope this helps."
    result.save()
    url = page_urls(demo)["snippet"] + f"&model={demo.evaluations[0].model.key}"
    html = client.get(url).content.decode()
    diff = html.split('class="diff"', 1)[1].split("</table>", 1)[0]
    assert "+    y = y * factor * 2" in diff and "-    y = y * factor" in diff
    assert "Hope this helps" not in diff and "```" not in diff
    assert "Raw model answer" in html and "Hope this helps" in html  # still shown, escaped, apart


def test_release_switcher_keeps_the_view(client, demo):
    html = client.get(reverse("leaderboard:leaderboard") + "?sort=model&dir=asc&open_weights=1").content.decode()
    assert 'class="inline-release"' not in html  # one release only: no switcher
    # add a second (published) release and the switcher appears, carrying the current parameters
    from catalog.models import Release

    Release.objects.create(name="Other", slug="other", status=Release.PUBLISHED)
    html = client.get(reverse("leaderboard:leaderboard") + "?sort=model&dir=asc&open_weights=1").content.decode()
    form = html.split('class="inline-release"', 1)[1].split("</form>", 1)[0]
    assert '<input type="hidden" name="sort" value="model">' in form
    assert '<input type="hidden" name="open_weights" value="1">' in form and 'name="release" value' not in form
    html = client.get(reverse("leaderboard:release_leaderboard", args=[demo.release.slug])).content.decode()
    assert f'action="{reverse("leaderboard:leaderboard")}" class="inline-release"' in html


def test_pages_of_an_empty_draft_release(client):
    from django.contrib.auth.models import User
    from catalog.models import Release

    Release.objects.create(name="Empty draft", slug="empty-draft", status=Release.DRAFT, is_default=True)
    client.force_login(User.objects.create_user("staff", is_staff=True))  # a draft is staff's only
    for path in ("/", "/leaderboard/", "/leaderboard/papers/", "/leaderboard/contamination-safe/", "/leaderboard/errors/",
                 "/leaderboard/paper-ablation/", "/releases/", "/releases/empty-draft/", "/releases/empty-draft/leaderboard/",
                 "/leaderboard/contamination-safe/?from=2024-01-01"):
        response = client.get(path)
        assert response.status_code == 200, path
        html = response.content.decode()
        assert "is a draft" in html or path == "/releases/", path
    assert "No paper is left" in client.get("/leaderboard/contamination-safe/").content.decode()
