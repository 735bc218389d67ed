"""Finding a model by name (header box, page, API) and comparing models side by side (issue 21, item 15)."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from benchmark_core.scoring import mcnemar_exact
from catalog.models import Evaluation, LLMModel, Release
from tests.factories import make_demo

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo(fresh_page_cache):
    return make_demo(n_models=4)


def test_mcnemar_exact_counts_only_discordant_pairs():
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(10, 0) == pytest.approx(2 / 2 ** 10)
    assert mcnemar_exact(30, 10) == pytest.approx(mcnemar_exact(10, 30))
    assert mcnemar_exact(30, 10) < 0.01 < mcnemar_exact(12, 8)


def test_every_page_has_the_search_box(client, demo):
    for url in ("/", "/leaderboard/", "/releases/", f"/models/{demo.models[0].key}/"):
        html = client.get(url).content.decode()
        header = html.split('class="site-header"', 1)[1].split("</header>", 1)[0]
        assert 'action="/models/"' in header and 'name="q"' in header, url


def test_search_finds_by_name_key_or_organisation_and_never_drafts_or_private_models(client, demo):
    draft = Release.objects.create(name="Next", slug="next", status=Release.DRAFT)
    hidden = LLMModel.objects.create(key="model-secret", display_name="Model Secret")
    Evaluation.objects.create(model=hidden, release=draft, is_public=True)
    private = LLMModel.objects.create(key="model-private", display_name="Model Private")
    Evaluation.objects.create(model=private, release=demo.release, is_public=False)

    html = client.get("/models/?q=model").content.decode()
    for m in demo.models:
        if m.key.startswith("model-"):
            assert f'data-model="{m.key}"' in html
    assert "model-secret" not in html and "model-private" not in html
    html = client.get("/models/?q=orgb").content.decode()
    assert 'data-model="model-1"' in html and 'data-model="model-0"' not in html
    assert 'id="search-none"' in client.get("/models/?q=zzz").content.decode()
    found = client.get("/api/v1/models?q=Model 2").json()["models"]
    assert [m["model"] for m in found] == ["model-2"]
    assert found[0]["releases"] == [{"slug": "v-test", "name": demo.release.name}]
    assert client.get("/api/v1/models?q=").json() == {"models": []}


def test_search_is_one_query(demo):
    from leaderboard.selectors.compare import models_search

    with CaptureQueriesContext(connection) as queries:
        hits = models_search(query="model-")
    assert [h.key for h in hits] == [f"model-{i}" for i in range(4)]
    assert len(queries) == 1


def test_compare_shows_figures_papers_disagreements_and_significance(client, demo):
    a, b = demo.models[0].key, demo.models[3].key
    response = client.get(f"/compare/?release=v-test&models={a}&models={b}")
    html = response.content.decode()
    assert response.status_code == 200
    assert f'<tr data-model="{a}">' in html and f'<tr data-model="{b}">' in html
    assert 'id="compare-papers"' in html and all(p.paper_id in html for p in demo.papers)

    from leaderboard.selectors.compare import models_compare
    from benchmark_core.scoring import paired_bootstrap
    from catalog.ranking import evaluation_totals

    comparison = models_compare(release=demo.release, keys=[a, b])
    first, second = comparison.models
    ev_a = Evaluation.objects.get(model__key=a, with_paper=True)
    ev_b = Evaluation.objects.get(model__key=b, with_paper=True)
    assert second["diff"] == pytest.approx(paired_bootstrap(evaluation_totals(ev_b), evaluation_totals(ev_a))[0])
    passed_a = set(ev_a.results.filter(passed=True).values_list("snippet_id", flat=True))
    passed_b = set(ev_b.results.filter(passed=True).values_list("snippet_id", flat=True))
    assert second["only_this"] == len(passed_b - passed_a) and second["only_first"] == len(passed_a - passed_b)
    assert len(comparison.snippets) == len(passed_a ^ passed_b)
    assert comparison.agreeing == len(demo.snippets) - len(passed_a ^ passed_b)
    for s in comparison.snippets:  # each disagreement links to its snippet's page
        assert f"name={s['name'].replace(' ', '%20')}" in html


def test_compare_names_what_it_cannot_show(client, demo):
    html = client.get(f"/compare/?models={demo.models[0].key}&models=nope").content.decode()
    assert 'id="compare-missing"' in html and "nope" in html and 'id="compare-few"' in html
    assert 'id="compare-form"' in client.get("/compare/").content.decode()
    # more than COMPARE_MAX asked: those beyond it are named as left out, never dropped silently
    asked = [m.key for m in demo.models] + [f"extra-{i}" for i in range(7)]
    html = client.get("/compare/?" + "&".join(f"models={k}" for k in asked)).content.decode()
    assert 'id="compare-left-out"' in html and "extra-6" in html and "At most 6 models" in html


def test_compare_queries_do_not_grow_with_models(demo):
    from django.core.cache import cache

    from leaderboard.selectors.compare import models_compare

    counts = []
    for n in (2, 4):
        cache.clear()
        with CaptureQueriesContext(connection) as queries:
            models_compare(release=demo.release, keys=[m.key for m in demo.models[:n]])
        counts.append(len(queries))
    assert counts[0] == counts[1] <= 4
