"""Static files: the small plotly.js bundle, and collected names with a content hash cached for a year."""
from __future__ import annotations

import re

import pytest
from django.core.cache import cache
from django.core.management import call_command
from django.test import Client, override_settings
from django.urls import reverse

from leaderboard import charts
from leaderboard.plotly_bundle import (
    PLOTLY_STATIC_PATH, plotly_bundle_path, plotly_bundle_version, plotly_css_text,
)
from rcbsite import settings as site_settings
from tests.factories import make_demo


def test_the_vendored_bundle_matches_the_python_plotly_and_is_small():
    from plotly.offline import get_plotlyjs_version

    assert plotly_bundle_version() == get_plotlyjs_version(), "run scripts/vendor_plotly.sh after a plotly upgrade"
    assert plotly_bundle_path().stat().st_size < 2_000_000  # the full bundle is 4.8 MB
    committed = (plotly_bundle_path().parent.parent / "css" / "plotly.css").read_text(encoding="utf-8")
    assert committed == plotly_css_text(), "static/css/plotly.css is stale: run scripts/vendor_plotly.sh"


def test_the_bundle_draws_every_trace_type_our_charts_use():
    source = plotly_bundle_path().read_text(encoding="utf-8")
    registered = set(re.findall(r'moduleType:"trace",name:"(\w+)"', source))
    figures = [
        charts.ci_bar_figure(names=["a", "b"], values=[10.0, 20.0], lows=[5.0, 15.0], highs=[15.0, 25.0]),
        charts.ablation_figure(names=["a"], deltas=[1.0], lows=[0.0], highs=[2.0]),
        charts.papers_timeline_figure(papers=["p"], dates=["2024-01-01"], inside=[True]),
        charts.error_stack_figure(models=["a"], counts={"syntax": [1]}),
        charts.heatmap_figure(models=["a"], papers=["p"], z=[[50.0]]),
    ]
    used = {trace["type"] for fig in figures for trace in fig["data"]}
    assert used <= registered, f"not in the cartesian bundle: {used - registered}"


@pytest.mark.django_db
def test_collected_files_have_hashed_names_and_are_cached_for_a_year(tmp_path):
    cache.clear()
    make_demo(n_models=2, pset_dir=tmp_path / "pset")
    real = site_settings.STORAGES  # the site's own storage, not the tests' plain one
    assert real["staticfiles"]["BACKEND"] == "whitenoise.storage.CompressedManifestStaticFilesStorage"
    with override_settings(STORAGES=real, STATIC_ROOT=tmp_path / "static", WHITENOISE_USE_FINDERS=False):
        call_command("collectstatic", "--noinput", "-v0")
        client = Client()  # a new handler: WhiteNoise indexes the collected folder
        html = client.get(reverse("leaderboard:leaderboard")).content.decode()
        src = re.search(r'<script src="(/static/vendor/plotly-cartesian\.min\.[0-9a-f]{12}\.js)"', html)
        assert src, "the page links the hashed bundle"
        assert re.search(r'href="/static/css/site\.[0-9a-f]{12}\.css"', html)
        response = client.get(src.group(1), HTTP_ACCEPT_ENCODING="gzip")
        assert response.status_code == 200
        assert response["Cache-Control"] == "max-age=315360000, public, immutable"
        assert response["Content-Encoding"] == "gzip"
        body = b"".join(response.streaming_content)
        assert len(body) < 600_000  # 1.5 MB compressed
        # an unhashed name is still served, but only briefly cached (it changes in place)
        plain = client.get("/static/" + PLOTLY_STATIC_PATH)
        assert plain.status_code == 200 and "immutable" not in plain["Cache-Control"]
