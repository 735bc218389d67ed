"""Cost against score (issue 21, item 16): the Pareto front and the page."""
from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from benchmark_core.scoring import pareto_front
from catalog.models import Evaluation, LLMModel
from tests.factories import make_demo


def test_pareto_front_keeps_only_points_nothing_beats():
    points = [(1.0, 10.0), (2.0, 30.0), (2.0, 20.0), (3.0, 25.0), (0.5, 5.0), (4.0, 40.0), (4.0, 40.0)]
    assert pareto_front(points) == [4, 0, 1, 5]
    assert pareto_front([]) == []


@pytest.mark.django_db
def test_cost_page_draws_every_priced_model_and_marks_the_front(client, fresh_page_cache):
    from leaderboard.selectors.boards import LISTED_TOKENS, cost_vs_score

    demo = make_demo(n_models=4)
    measured = Evaluation.objects.get(model__key="model-3", with_paper=True)
    measured.cost_per_snippet = 0.0001  # the best model, measured and cheapest: alone on the front
    measured.save()
    LLMModel.objects.filter(key="model-0").update(input_cost=None, output_cost=None)
    points, without = cost_vs_score(release=demo.release)
    by_key = {p.model_key: p for p in points}
    assert "Model 0" in without and "model-0" not in by_key
    assert by_key["model-3"].measured and by_key["model-3"].cost == pytest.approx(0.0001)
    m1 = LLMModel.objects.get(key="model-1")
    assert by_key["model-1"].cost == pytest.approx(
        (m1.input_cost * LISTED_TOKENS["input"] + m1.output_cost * LISTED_TOKENS["output"]) / 1e6)
    best = max(p.scaled_pass_rate for p in points)
    if by_key["model-3"].scaled_pass_rate == best:
        assert [p.model_key for p in points if p.on_front] == ["model-3"]
    expected = {points[i].model_key for i in pareto_front([(p.cost, p.scaled_pass_rate) for p in points])}
    assert {p.model_key for p in points if p.on_front} == expected

    with CaptureQueriesContext(connection) as queries:
        html = client.get("/leaderboard/cost/").content.decode()
    assert len(queries) <= 8
    assert 'id="cost-chart"' in html and 'id="cost-unknown"' in html
    assert html.count('class="on-front"') == len(expected)
    assert 'href="/leaderboard/cost/?release=v-test"' in html.split("</header>", 1)[0]  # in the navigation
