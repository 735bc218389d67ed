"""Long tables come a page at a time: global order and tiers, parameters kept, downloads whole,
404 for a page the table has not, each page its own cache entry (the queries of a later page:
tests/test_pages_queries.py)."""
from __future__ import annotations

import csv
import io
import math
import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from catalog.models import LLMModel, Release
from tests.factories import make_demo

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fresh_page_cache")]


@pytest.fixture
def demo(tmp_path):
    return make_demo(n_models=6, pset_dir=tmp_path / "pset")


@pytest.fixture
def two_rows(settings):
    """Two rows a page: the demo's tables then span several pages."""
    settings.RCB_TABLE_ROWS = 2
    return settings


LEADERBOARD = reverse("leaderboard:leaderboard")
ROW = re.compile(r'<tr class="[^"]*" data-model="([^"]+)">\s*<td data-value="([^"]*)"')


def _html(client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (url, response.status_code)
    return response.content.decode()


def _rows(html: str) -> list[tuple[str, str]]:
    """(model key, tier) of each row of the leaderboard table, in page order."""
    table = html.split('id="leaderboard"', 1)[1].split("</table>", 1)[0]
    return ROW.findall(table)


def _pager(html: str, param: str = "page") -> str:
    found = re.search(rf'<nav class="pager"[^>]*data-pager="{param}">(.*?)</nav>', html, re.S)
    return found.group(1) if found else ""


def _links(pager: str) -> list[str]:
    return [a.replace("&amp;", "&") for a in re.findall(r'href="([^"]+)"', pager)]


def _csv(response) -> list[dict[str, str]]:
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    return list(csv.DictReader(io.StringIO(response.content.decode())))


def test_the_pages_of_the_leaderboard_are_the_whole_table_in_order_with_global_tiers(client, demo, two_rows):
    total = len(demo.models)
    pages = math.ceil(total / 2)
    assert pages >= 3
    seen: list[tuple[str, str]] = []
    for number in range(1, pages + 1):
        html = _html(client, LEADERBOARD + (f"?page={number}" if number > 1 else ""))
        rows = _rows(html)
        assert len(rows) == (2 if number < pages else total - 2 * (pages - 1)), number
        seen += rows
        pager = _pager(html)
        assert f'aria-current="page" class="current">{number}</a>' in pager
        assert ('rel="prev"' in pager) == (number > 1) and ('rel="next"' in pager) == (number < pages)
        first = 2 * (number - 1) + 1
        assert f"{first}–{first + len(rows) - 1} of {total}" in html
    two_rows.RCB_TABLE_ROWS = 100  # the same table on one page
    whole = _html(client, LEADERBOARD)
    assert _pager(whole) == "" and seen == _rows(whole)  # same order, same tiers: ranks are the whole table's
    assert any(tier for _, tier in seen[2:])  # tiers on later pages too (not restarted per page)
    tiers = {r["model"]: r["tier"] for r in _csv(client.get(LEADERBOARD + "?format=csv"))}
    assert {k: t for k, t in seen} == {k: tiers[k] for k, _ in seen}


def test_page_links_keep_the_sort_and_filters_and_other_links_reset_the_page(client, demo, two_rows):
    html = _html(client, LEADERBOARD + "?sort=model&dir=asc&with_paper=1&page=2")
    links = _links(_pager(html))
    assert links and all("sort=model" in u and "dir=asc" in u and "with_paper=1" in u for u in links)
    assert any("page=3" in u for u in links) and any("page=" not in u for u in links)  # page 1 is the plain URL
    assert all(u.endswith("#leaderboard") for u in links)
    # page 2 of the name order continues page 1 of it
    names = {m.key: m.display_name.lower() for m in LLMModel.objects.all()}
    first = [k for k, _ in _rows(_html(client, LEADERBOARD + "?sort=model&dir=asc&with_paper=1"))]
    second = [k for k, _ in _rows(html)]
    ranked = [k for k in first + second if not LLMModel.objects.get(key=k).baseline]
    assert ranked == sorted(ranked, key=names.get)
    # another order, the filters and the download start again from the whole table
    table = html.split('id="leaderboard"', 1)[1].split("</thead>", 1)[0]
    header_links = [u.replace("&amp;", "&") for u in re.findall(r'href="([^"]+)"', table)]
    assert header_links and all("page=" not in u and "with_paper=1" in u for u in header_links)
    form = html.split('id="leaderboard-filters"', 1)[1].split("</form>", 1)[0]
    assert 'name="page"' not in form
    csv_link = re.search(r'class="csv-link" href="([^"]+)"', html).group(1).replace("&amp;", "&")
    assert "format=csv" in csv_link and "page=" not in csv_link and "sort=model" in csv_link


def test_downloads_have_every_row_whatever_the_page(client, demo, two_rows):
    models = len(demo.models)
    assert len(_csv(client.get(LEADERBOARD + "?page=2&format=csv"))) == models
    per_paper = reverse("leaderboard:per_paper")
    assert len(_csv(client.get(per_paper + "?page=2&format=csv"))) == models
    assert len(_csv(client.get(per_paper + "?board_page=2&format=csv&table=paper"))) == models
    contamination = reverse("leaderboard:contamination")
    assert len(_csv(client.get(contamination + "?per_model_page=2&format=csv&table=per_model"))) == models - 2  # no baselines
    assert len(_csv(client.get(reverse("leaderboard:errors") + "?page=2&format=csv"))) == models - 2
    assert len(_csv(client.get(reverse("leaderboard:paper", args=["paper-1"]) + "?page=2&format=csv"))) == models
    snippet = reverse("leaderboard:snippet", args=["paper-1"]) + "?file=scale.py&name=multiply"
    assert len(_csv(client.get(snippet + "&page=2&format=csv"))) == models
    # the JSON of the leaderboard is the API's, never paged
    body = client.get(reverse("leaderboard_api:leaderboard")).json()
    assert len(body["rows"]) == models


SNIPPET = reverse("leaderboard:snippet", args=["paper-1"]) + "?file=scale.py&name=multiply&"

#: every paged table: (page, its parameter, the id its page links land on, the table's id)
PAGED = [
    (LEADERBOARD + "?", "page", "leaderboard", "leaderboard"),
    (reverse("leaderboard:per_paper") + "?", "page", "heatmap-table", "heatmap-table"),
    (reverse("leaderboard:per_paper") + "?paper=paper-1&", "board_page", "paper-leaderboard", "paper-board"),
    (reverse("leaderboard:contamination") + "?from=2024-01-01&", "page", "window-leaderboard", "window-leaderboard"),
    (reverse("leaderboard:contamination") + "?", "per_model_page", "own-cutoff", "per-model-table"),
    (reverse("leaderboard:errors") + "?", "page", "errors-table", "errors-table"),
    (reverse("leaderboard:paper", args=["paper-1"]) + "?", "page", "paper-leaderboard", "paper-board"),
    (SNIPPET, "page", "verdicts-table", "verdicts-table"),
]


def _table_class(html: str, table_id: str) -> str:
    return re.search(rf'<table class="([^"]*)" id="{table_id}"', html).group(1)


@pytest.mark.parametrize("base, param, anchor, table_id", PAGED)
def test_every_long_table_is_paged(client, demo, two_rows, base, param, anchor, table_id):
    first, second = _html(client, base), _html(client, base + f"{param}=2")
    body = lambda html: html.split(f'id="{table_id}"', 1)[1].split("</table>", 1)[0]  # noqa: E731
    assert body(first) != body(second)
    assert len(re.findall(r"<tr[ >]", body(second).split("<tbody>", 1)[1])) == 2
    for html, number in ((first, 1), (second, 2)):
        pager = _pager(html, param)
        assert f'aria-current="page" class="current">{number}</a>' in pager, (param, number)
        assert all(u.endswith(f"#{anchor}") for u in _links(pager))
        assert f'id="{anchor}"' in html
        # a page of a longer table is not sorted in place by the browser: that would sort a part of it
        assert "sortable" not in _table_class(html, table_id).split(), table_id
    two_rows.RCB_TABLE_ROWS = 100  # on one page: no page links, sorted in place as before
    whole = _html(client, base)
    assert _pager(whole, param) == ""
    if table_id != "heatmap-table":
        assert "sortable" in _table_class(whole, table_id).split()


def test_the_ablation_table_is_paged_too(client, demo, two_rows):
    two_rows.RCB_TABLE_ROWS = 1  # the demo has two models with both evaluations
    url = reverse("leaderboard:ablation")
    first, second = _html(client, url), _html(client, url + "?page=2")
    name = lambda html: re.findall(r'<tr><td data-value="([^"]+)">', html.split('id="ablation-table"', 1)[1])  # noqa: E731
    assert len(name(first)) == len(name(second)) == 1 and name(first) != name(second)
    assert "2 models with both evaluations; 1–1 on this page" in first
    _html(client, url + "?page=3", status=404)


def test_a_tables_page_links_keep_the_other_tables_page(client, demo, two_rows):
    html = _html(client, reverse("leaderboard:per_paper") + "?paper=paper-1&page=2&board_page=3")
    board_links = _links(_pager(html, "board_page"))
    assert board_links and all("page=2" in u.replace("board_page", "") and "paper=paper-1" in u for u in board_links)
    heat_links = _links(_pager(html, "page"))
    assert heat_links and all("board_page=3" in u for u in heat_links)
    # choosing another paper keeps the heatmap's page, starts its board at the top
    form = html.split('action="#paper-leaderboard"', 1)[1].split("</form>", 1)[0]
    assert '<input type="hidden" name="page" value="2">' in form and "board_page" not in form


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5", "99", "2x"])
@pytest.mark.parametrize("base, param, anchor, table_id", PAGED)
def test_a_page_the_table_has_not_is_a_404_that_names_the_range(client, demo, two_rows, base, param, anchor, table_id,
                                                                 value):
    response = client.get(base + f"{param}={value}")
    assert response.status_code == 404, (base, param, value)
    text = response.content.decode().replace("&#x27;", "'")
    assert "Not found" in text and re.search(rf"(pages 1 to \d+|{param}=1 to {param}=\d+)", text), text[-600:]


def test_an_empty_page_parameter_is_the_first_page(client, demo, two_rows):
    assert _rows(_html(client, LEADERBOARD + "?page=")) == _rows(_html(client, LEADERBOARD))


def test_each_page_is_its_own_cache_entry_and_a_write_shows_on_every_page(client, demo, two_rows):
    urls = [LEADERBOARD, LEADERBOARD + "?page=2", LEADERBOARD + "?page=3"]
    first = [_html(client, u) for u in urls]
    for url, html in zip(urls, first):
        with CaptureQueriesContext(connection) as ctx:
            again = _html(client, url)
        assert again == html and len(ctx.captured_queries) == 1, url  # a hit: the releases' stamp only
    assert len({tuple(_rows(h)) for h in first}) == 3
    # a model on page 3 renamed: the next request of that page shows it
    key = _rows(first[2])[0][0]
    model = LLMModel.objects.get(key=key)
    model.display_name = "Renamed on page three"
    model.save()
    assert "Renamed on page three" in _html(client, urls[2])
    # the rows per page are part of the key: another size is never served from the old entries
    assert len(_rows(_html(client, LEADERBOARD))) == 2
    two_rows.RCB_TABLE_ROWS = 3
    assert len(_rows(_html(client, LEADERBOARD))) == 3


def test_the_release_switcher_drops_the_page_numbers(client, demo, two_rows):
    Release.objects.create(name="Other", slug="other", status=Release.PUBLISHED)
    html = _html(client, LEADERBOARD + "?sort=model&dir=asc&page=2")
    form = html.split('class="inline-release"', 1)[1].split("</form>", 1)[0]
    assert '<input type="hidden" name="sort" value="model">' in form and 'name="page"' not in form
