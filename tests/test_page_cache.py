"""The page cache: warm pages cost one query, writes show on the next request, visitors never share
their parts (account menu, messages, CSRF tokens, owner-only content), conditional GET, the API's
headers, and the Redis backend of production."""
from __future__ import annotations

import shutil
import threading
import time
import uuid

import pytest
from django.contrib import messages
from django.contrib.auth.models import User
from django.core.cache import cache
from django.db import connection
from django.http import HttpResponse
from django.middleware.csrf import _unmask_cipher_token
from django.shortcuts import redirect
from django.template import engines
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import include, path, reverse

from leaderboard import page_cache
from catalog.models import Evaluation, LLMModel, Release
from leaderboard.page_cache import public_page
from tests.factories import make_demo
from tests.test_pages import page_urls

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()
    page_cache.local_clear()
    yield
    cache.clear()
    page_cache.local_clear()


@pytest.fixture
def demo(tmp_path):
    return make_demo(n_models=3, pset_dir=tmp_path / "pset")


@pytest.fixture
def alice():
    return User.objects.create_user("alice-visitor", "alice@example.org", "pw-alice-123!")


def _queries(client: Client, url: str, **headers) -> tuple[int, object]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **headers)
    return len(ctx.captured_queries), response


# --------------------------------------------------------------------------- warm pages
def test_every_public_page_is_served_warm_with_one_query_and_the_same_bytes(client, demo):
    for name, url in page_urls(demo).items():
        cold = client.get(url)
        assert cold.status_code == 200, name
        n, warm = _queries(client, url)
        assert warm.status_code == 200, name
        assert n == 1, (name, n)  # the releases' stamp; nothing else
        assert warm.content == cold.content, name
        assert warm["Cache-Control"].startswith("public") and "s-maxage=" in warm["Cache-Control"], name
        assert warm["ETag"] and warm["Last-Modified"], name
        assert "Cookie" in warm["Vary"], name
        assert b"rcb-hole:" not in warm.content and b"rcbcsrf" not in warm.content, name


def test_every_public_page_is_cached_for_logged_in_visitors_too_with_their_own_menu(client, demo, alice):
    urls = page_urls(demo)
    for url in urls.values():
        client.get(url)  # anonymous visitors fill the cache
    client.force_login(alice)
    counts = {}
    for name, url in urls.items():
        counts[name], response = _queries(client, url)
        html = response.content.decode()
        assert response.status_code == 200, name
        assert "alice-visitor" in html and ">Log in<" not in html, name
        assert response["Cache-Control"] == "private, no-cache", name
    # session, user, the account menu's own (staff menu) and the stamp: the page came from the cache
    assert len(set(counts.values())) == 1 and max(counts.values()) <= 4, counts
    client.logout()
    for name, url in urls.items():
        html = client.get(url).content.decode()
        assert "alice-visitor" not in html and ">Log in<" in html, name


def test_csv_downloads_are_cached_with_their_headers(client, demo):
    url = reverse("leaderboard:leaderboard") + "?format=csv"
    cold = client.get(url)
    n, warm = _queries(client, url)
    assert n == 1 and warm.content == cold.content
    assert warm["Content-Type"].startswith("text/csv") and warm["Content-Disposition"] == cold["Content-Disposition"]
    assert warm["Cache-Control"].startswith("public")


def test_unknown_things_are_404_and_never_stored(client, demo):
    url = reverse("leaderboard:model", args=["no-such-model"])
    assert client.get(url).status_code == 404
    LLMModel.objects.create(key="no-such-model", display_name="Now There")
    assert client.get(url).status_code == 200


# --------------------------------------------------------------------------- writes
def test_a_write_shows_on_the_next_request_of_every_page(client, demo):
    urls = page_urls(demo)
    model = next(m for m in demo.models if m.key == "model-1")  # the model of the model page
    showing = {name for name, url in urls.items() if model.display_name in client.get(url).content.decode()}
    assert {"home", "leaderboard", "per_paper", "errors", "model", "paper", "snippet", "drilldown"} <= showing, showing
    model.display_name = "Renamed Model One"
    model.save()
    for name in showing:
        html = client.get(urls[name]).content.decode()
        assert "Renamed Model One" in html, name
    # a hidden evaluation leaves the leaderboard at once
    ev = Evaluation.objects.filter(model=model, with_paper=True).get()
    ev.hidden = True
    ev.save(update_fields=["hidden"])
    assert "Renamed Model One" not in client.get(urls["leaderboard"]).content.decode()


def test_a_release_save_shows_and_never_moves_its_version_back(client, demo):
    url = reverse("leaderboard:release_detail", args=[demo.release.slug])
    assert "made by the test factory" in client.get(url).content.decode()
    stale = Release.objects.get(pk=demo.release.pk)
    fresh = Release.objects.get(pk=demo.release.pk)
    fresh.description = "A new description."
    fresh.save()
    assert "A new description." in client.get(url).content.decode()
    version = Release.objects.get(pk=demo.release.pk).data_version
    stale.description = "Written from an old copy."
    stale.save()  # read before the other save: must not write the older data_version back
    assert Release.objects.get(pk=demo.release.pk).data_version > version
    assert "Written from an old copy." in client.get(url).content.decode()


# --------------------------------------------------------------------------- conditional GET
def test_conditional_get_answers_304_until_a_write(client, demo):
    url = reverse("leaderboard:leaderboard")
    first = client.get(url)
    etag = first["ETag"]
    n, again = _queries(client, url, HTTP_IF_NONE_MATCH=etag)
    assert again.status_code == 304 and again.content == b"" and n == 1
    assert again["ETag"] == etag and again["Cache-Control"].startswith("public")
    assert client.get(url, HTTP_IF_MODIFIED_SINCE=first["Last-Modified"]).status_code == 304
    other = client.get(url + "?sort=model")
    assert other["ETag"] != etag
    model = LLMModel.objects.get(pk=demo.models[1].pk)
    model.save()  # a new version with the same content: the ETag (of the content) still matches
    assert client.get(url, HTTP_IF_NONE_MATCH=etag).status_code == 304
    model.display_name = "Model One, renamed"
    model.save()
    changed = client.get(url, HTTP_IF_NONE_MATCH=etag)
    assert changed.status_code == 200 and changed["ETag"] != etag and b"Model One, renamed" in changed.content


def test_logged_in_visitors_revalidate_against_their_own_etag(client, demo, alice):
    url = reverse("leaderboard:errors")
    anonymous_etag = client.get(url)["ETag"]
    client.force_login(alice)
    mine = client.get(url)
    assert mine["ETag"] != anonymous_etag
    assert client.get(url, HTTP_IF_NONE_MATCH=mine["ETag"]).status_code == 304
    assert client.get(url, HTTP_IF_NONE_MATCH=anonymous_etag).status_code == 200


def test_api_tables_have_conditional_get_and_public_cache_control(client, demo):
    for url in ("/api/v1/leaderboard", "/api/v1/leaderboard?format=csv", "/api/v1/heatmap", "/api/v1/error-categories"):
        first = client.get(url)
        assert first.status_code == 200, url
        assert first["Cache-Control"].startswith("public") and "s-maxage=" in first["Cache-Control"], url
        assert client.get(url, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304, url
    etag = client.get("/api/v1/leaderboard")["ETag"]
    LLMModel.objects.filter(pk=demo.models[1].pk).get().save()
    assert client.get("/api/v1/leaderboard", HTTP_IF_NONE_MATCH=etag).status_code == 200


# --------------------------------------------------------------------------- visitors' own parts
@override_settings(ROOT_URLCONF=__name__)
@pytest.mark.parametrize("logged_in", [False, True])
def test_messages_are_shown_to_their_visitor_once_and_never_stored(demo, alice, logged_in):
    url = reverse("leaderboard:ablation")
    visitor = Client()
    if logged_in:
        visitor.force_login(alice)
    visitor.get(url)  # the page is in the cache
    response = visitor.get("/add-message/", follow=True)
    assert "Your submission is published." in response.content.decode()
    assert response["Cache-Control"] == "private, no-cache"
    assert "Your submission is published." not in visitor.get(url).content.decode()  # shown once
    assert "Your submission is published." not in Client().get(url).content.decode()


_TEMPLATE = engines["django"].from_string(
    '{% extends "base.html" %}{% block content %}<form method="post">{% csrf_token %}</form>'
    "<p>{% if owner %}owner-only: {{ owner }}{% else %}public view{% endif %}</p>{% endblock %}"
)


def _form_view(request):
    return HttpResponse(_TEMPLATE.render({}, request))


def _owner_view(request):
    owner = request.user.get_username() if request.user.is_authenticated else ""
    return HttpResponse(_TEMPLATE.render({"owner": owner}, request))


def _add_message(request):
    messages.success(request, "Your submission is published.")
    return redirect(reverse("leaderboard:ablation"))


urlpatterns = [
    path("add-message/", _add_message),
    path("form/", public_page(_form_view)),
    path("owner/", public_page(_owner_view)),
    path("", include("rcbsite.urls")),
]


@override_settings(ROOT_URLCONF=__name__)
def test_csrf_tokens_are_each_visitors_own_and_such_pages_are_private(demo):
    tokens = []
    for _ in range(2):
        visitor = Client(enforce_csrf_checks=True)
        response = visitor.get("/form/")
        html = response.content.decode()
        assert "rcbcsrf" not in html
        token = html.split('name="csrfmiddlewaretoken" value="')[1].split('"')[0]
        secret = visitor.cookies["csrftoken"].value
        assert _unmask_cipher_token(token) == secret  # valid for this visitor's cookie
        assert response["Cache-Control"] == "private, no-cache" and not response.has_header("ETag")
        assert visitor.post("/form/", {"csrfmiddlewaretoken": token}).status_code != 403
        tokens.append(secret)
    assert tokens[0] != tokens[1]


@override_settings(ROOT_URLCONF=__name__)
def test_a_page_that_looks_at_the_user_is_never_served_to_someone_else(demo, alice):
    anonymous = Client()
    assert "public view" in anonymous.get("/owner/").content.decode()
    owner = Client()
    owner.force_login(alice)
    for _ in range(2):
        response = owner.get("/owner/")
        assert "owner-only: alice-visitor" in response.content.decode()
        assert response["Cache-Control"] == "private, no-cache"
    bob = User.objects.create_user("bob-visitor", "bob@example.org", "pw-bob-123!")
    other = Client()
    other.force_login(bob)
    assert "owner-only: bob-visitor" in other.get("/owner/").content.decode()
    assert "alice" not in anonymous.get("/owner/").content.decode()


# --------------------------------------------------------------------------- machinery
def _without_local(key, render):
    page_cache.local_clear()
    return page_cache._entry_get_or_render(key, render)[0]


def test_one_render_per_key_while_others_wait():
    key = f"rcb:test:{uuid.uuid4().hex}"
    renders = []

    entry = page_cache._Entry(status=200, headers=[], body=b"x", anonymous_body=b"x", holed=False, has_csrf=False,
                              etag='"e"', last_modified=0.0, user_dependent=False, cacheable=True)

    def slow_render():
        renders.append(1)
        time.sleep(0.5)
        return entry, None

    results = []
    # threads stand for processes: each has no copy of its own, so each asks the shared cache
    threads = [threading.Thread(target=lambda: results.append(_without_local(key, slow_render))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [entry] * 4 and len(renders) == 1


def test_pages_replay_from_the_production_redis_backend(client, demo):
    redis_cache = {"default": {"BACKEND": "leaderboard.cache_backend.TolerantRedisCache",
                               "LOCATION": "redis://127.0.0.1:6379/0", "KEY_PREFIX": f"rcb-test-{uuid.uuid4().hex}",
                               "TIMEOUT": 60}}
    with override_settings(CACHES=redis_cache):
        from django.core.cache import caches

        caches["default"].set("probe", 1)
        assert caches["default"].get("probe") == 1  # a real Redis answers (the backend forgives outages)
        url = reverse("leaderboard:per_paper")
        cold = client.get(url)
        page_cache.local_clear()  # this process's copy aside: the entry comes from Redis
        n, warm = _queries(client, url)
        assert n == 1 and warm.content == cold.content
        assert client.get(url, HTTP_IF_NONE_MATCH=warm["ETag"]).status_code == 304


def test_pages_stay_up_when_the_redis_cache_is_down(client, demo):
    dead = {"default": {"BACKEND": "leaderboard.cache_backend.TolerantRedisCache",
                        "LOCATION": "redis://127.0.0.1:1/0", "OPTIONS": {"socket_connect_timeout": 1}}}
    with override_settings(CACHES=dead):
        from django.core.cache import caches

        assert caches["default"].get("anything") is None  # nothing listens on port 1
        for name, url in page_urls(demo).items():
            page_cache.local_clear()
            assert client.get(url).status_code == 200, name
        assert client.get("/api/v1/leaderboard").status_code == 200


def test_page_cache_off_renders_every_request(client, demo, settings):
    settings.RCB_PAGE_CACHE = False
    url = reverse("leaderboard:leaderboard")
    client.get(url)
    n, response = _queries(client, url)
    assert n > 1 and not response.has_header("ETag")


def test_hole_markers_in_user_text_are_inert(client, demo):
    model = demo.models[0]
    model.display_name = f"<!--rcb-hole:{'0' * 20}:account--> rcbcsrf" + "0" * 20
    model.save()
    html = client.get(reverse("leaderboard:leaderboard")).content.decode()
    assert "&lt;!--rcb-hole:" in html


def test_an_unknown_hole_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown page hole"):
        page_cache.hole_render(request=None, name="nope")


# --------------------------------------------------------------------------- a submission, end to end
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap")
def test_a_submission_finishing_and_published_shows_on_the_next_request_of_every_page(client, settings, alice):
    from accounts.services import api_token_create
    from submissions import jobs
    from submissions.models import PredictionSubmission, Status
    from submissions_support import demo_release_create, predictions_bytes

    settings.RCB_SANDBOX_BACKEND = "bwrap"
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    settings.RCB_HEARTBEAT_SECONDS = 3600
    release = demo_release_create(papers=["rope"])
    q = f"?release={release.slug}"
    pages = {
        "leaderboard": f"/leaderboard/{q}", "release leaderboard": f"/releases/{release.slug}/leaderboard/",
        "per paper": f"/leaderboard/papers/{q}", "errors": f"/leaderboard/errors/{q}", "paper": f"/papers/rope/{q}",
        "home": f"/{q}", "contamination": f"/leaderboard/contamination-safe/{q}",
    }
    visitor = Client()
    for name, url in pages.items():  # a crowd has every page in the cache
        assert visitor.get(url).status_code == 200, name
        assert visitor.get(url).status_code == 200, name
    releases_before = visitor.get("/releases/").content.decode()

    token = api_token_create(user=alice, name="test")[1]
    response = client.post(f"/api/v1/submissions?model_name=Launch-Day-Model", data=predictions_bytes(papers=["rope"]),
                           content_type="application/x-ndjson", HTTP_AUTHORIZATION=f"Token {token}")
    assert response.status_code in (200, 201, 202), response.content
    sub = PredictionSubmission.objects.get(pk=response.json()["id"])
    for job in sub.jobs.all():
        jobs.score_paper(job.pk, job.rq_job_id)
    sub.refresh_from_db()
    assert sub.status == Status.FINISHED
    for name, url in pages.items():  # finished, not yet published: nowhere
        assert "Launch-Day-Model" not in visitor.get(url).content.decode(), name
    client.force_login(alice)
    assert client.post(reverse("submissions:submission_action", args=[sub.pk, "publish"])).status_code == 302
    for name, url in pages.items():
        if name in ("home", "contamination"):
            continue  # they show the top models and a date window; the new one need not be there
        assert "Launch-Day-Model" in visitor.get(url).content.decode(), name
    assert visitor.get("/releases/").content.decode() != releases_before  # its model count
    model_key = sub.evaluation.model.key
    assert "Launch-Day-Model" in visitor.get(reverse("leaderboard:model", args=[model_key])).content.decode()


def test_a_process_copy_serves_without_the_shared_cache_and_is_never_stale(client, demo):
    url = reverse("leaderboard:leaderboard")
    client.get(url)
    cache.clear()  # the shared cache lost it (evicted, flushed): this process still has its copy
    n, response = _queries(client, url)
    assert n == 1 and response.status_code == 200
    model = LLMModel.objects.get(pk=demo.models[1].pk)
    model.display_name = "Model One, renamed"
    model.save()
    assert "Model One, renamed" in client.get(url).content.decode()


def test_new_code_never_serves_what_the_old_code_rendered(client, demo, monkeypatch):
    url = reverse("leaderboard:errors")
    client.get(url)
    assert _queries(client, url)[0] == 1
    monkeypatch.setattr(page_cache, "code_version", lambda: "the next deploy")
    assert _queries(client, url)[0] > 1  # a new key: rendered afresh
