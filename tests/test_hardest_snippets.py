"""The hardest snippets of a release (issue 21, item 18)."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from catalog.models import SnippetResult
from tests.factories import make_demo

pytestmark = pytest.mark.django_db


def test_each_snippet_counts_the_models_that_pass_it_hardest_first(client, fresh_page_cache):
    from leaderboard.selectors.hardest import NAMED_UP_TO, hardest_snippets

    demo = make_demo(n_models=5)
    counted = [ev for ev in demo.evaluations if ev.with_paper and not ev.model.baseline]
    expected = {}
    for s in demo.snippets:
        winners = {ev.model.display_name for ev in counted if SnippetResult.objects.filter(
            evaluation=ev, snippet=s, passed=True).exists()}
        expected[(s.paper.paper_id, s.file, s.name)] = winners
    with CaptureQueriesContext(connection) as queries:
        data = hardest_snippets(release=demo.release)
    assert len(queries) == 5
    assert data.models == len(counted)
    got = {(h.paper, h.file, h.name): h for h in data.snippets}
    assert set(got) == set(expected)
    for key, winners in expected.items():
        assert got[key].passed_by == len(winners)
        assert got[key].models == (sorted(winners) if 0 < len(winners) <= NAMED_UP_TO else [])
    assert [h.passed_by for h in data.snippets] == sorted(h.passed_by for h in data.snippets)
    assert sum(n for _, n in data.histogram) == len(data.snippets)

    html = client.get("/leaderboard/hardest-snippets/").content.decode()
    first = data.snippets[0]
    assert f'href="/papers/{first.paper}/snippet/?release=v-test&amp;file={first.file}&amp;name={first.name.replace(" ", "%20")}"' in html
    assert 'href="/leaderboard/hardest-snippets/?release=v-test" aria-current="page"' in html  # in the navigation
