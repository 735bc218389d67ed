"""Draft releases are staff-only everywhere (catalog.visibility.release_get): pages,
CSV, tasks, the API; 404 to anonymous visitors and to signed-in users who are not staff."""
from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from accounts.services import api_token_create
from catalog.models import Evaluation, LLMModel, Release, ReleasePaper, Snippet, SnippetResult
from catalog.aggregates import evaluation_aggregates_refresh

from factories import REFERENCE_FILE, make_demo

pytestmark = pytest.mark.django_db


@pytest.fixture
def draft(tmp_path, fresh_page_cache):
    demo = make_demo(slug="v-pub", n_models=2, incomplete_model=False, with_baselines=False)
    release = Release.objects.create(name="Next draft", slug="v-draft", status=Release.DRAFT)
    paper = demo.papers[0]
    folder = tmp_path / paper.paper_id
    folder.mkdir()
    (folder / "scale.py").write_text(REFERENCE_FILE, encoding="utf-8")
    ReleasePaper.objects.create(release=release, paper=paper, snippet_count=1, total_weight=1, folder=str(folder),
                                entry={"annotated": ["scale.py"]})
    snippet = Snippet.objects.create(release=release, paper=paper, file="scale.py", name="multiply", depth=0, position=0,
                                     start_line=7, end_line=9, weight=1, code="    y = y * factor")
    # a model seen only on the draft, and a public model's evaluation on it
    for model in (LLMModel.objects.create(key="draft-only", display_name="Draft Only"), demo.models[0]):
        ev = Evaluation.objects.create(model=model, release=release, is_public=True, samples=1)
        SnippetResult.objects.create(evaluation=ev, snippet=snippet, sample=0, passed=True, completion=snippet.code)
        evaluation_aggregates_refresh(evaluation=ev, n_boot=20)
    return release


def _draft_urls(release: Release) -> list[str]:
    ev = Evaluation.objects.filter(release=release).first()
    pages = [
        "/releases/v-draft/", "/releases/v-draft/leaderboard/", "/releases/v-draft/tasks.jsonl",
        "/releases/v-draft/?format=csv", "/?release=v-draft",
    ] + [f"{path}?release=v-draft" for path in (
        "/leaderboard/", "/leaderboard/papers/", "/leaderboard/contamination-safe/", "/leaderboard/errors/",
        "/leaderboard/paper-ablation/", "/papers/paper-0/", "/models/model-0/",
    )] + [
        "/leaderboard/?release=v-draft&format=csv", "/papers/paper-0/snippet/?release=v-draft&name=multiply",
        "/models/draft-only/",
    ]
    api = [f"/api/v1/{path}" for path in (
        "leaderboard?release=v-draft", "leaderboard?release=Next%20draft", "leaderboard?release=v-draft&format=csv",
        "heatmap?release=v-draft", "error-categories?release=v-draft", "paper-ablation?release=v-draft",
        "contamination?release=v-draft", "papers/paper-0?release=v-draft", "papers/paper-0/leaderboard?release=v-draft",
        "models/model-0?release=v-draft", "models/draft-only", f"evaluations/{ev.pk}/outputs.jsonl",
    )]
    return pages + api


def _statuses(client: Client, urls: list[str]) -> dict[str, int]:
    return {url: client.get(url).status_code for url in urls}


def test_a_draft_is_staff_only_on_every_page_and_in_the_api(draft):
    urls = _draft_urls(draft)
    staff_user = User.objects.create_user("root", is_staff=True)
    staff = Client()
    staff.force_login(staff_user)
    # staff first: nothing they were shown may be served from a cache to anybody else afterwards
    seen = _statuses(staff, urls)
    assert set(seen.values()) == {200}, {u: s for u, s in seen.items() if s != 200}
    answer = staff.get("/api/v1/leaderboard?release=v-draft")
    assert answer["Cache-Control"].startswith("private") and answer.json()["release"]["status"] == "draft"
    outputs = staff.get(next(u for u in urls if u.endswith("outputs.jsonl")))
    assert outputs["Cache-Control"].startswith("private")  # a draft's evaluation is no proxy's to keep

    member = Client()
    member.force_login(User.objects.create_user("bob"))
    token = api_token_create(user=User.objects.get(username="bob"))[1]
    for who, client in (("anonymous", Client()), ("member", member), ("member's token", Client(HTTP_AUTHORIZATION=f"Token {token}"))):
        got = _statuses(client, urls)
        assert set(got.values()) == {404}, (who, {u: s for u, s in got.items() if s != 404})
    # a staff member's token opens the API as the session does
    staff_token = api_token_create(user=staff_user)[1]
    assert Client(HTTP_AUTHORIZATION=f"Token {staff_token}").get("/api/v1/leaderboard?release=v-draft").status_code == 200


def test_a_draft_is_not_listed_to_the_public(draft):
    anonymous = Client()
    assert "v-draft" not in anonymous.get("/releases/").content.decode()
    assert "v-draft" not in anonymous.get("/releases/?format=csv").content.decode()
    assert [r["slug"] for r in anonymous.get("/api/v1/releases").json()["releases"]] == ["v-pub"]
    # no switcher entry on the published pages, and the public model lists no draft evaluation
    assert "v-draft" not in anonymous.get("/leaderboard/").content.decode()
    assert {e["release"] for e in anonymous.get("/api/v1/models/model-0").json()["evaluations"]} == {"v-pub"}


def test_publishing_opens_the_draft_to_everyone(draft):
    assert Client().get("/api/v1/leaderboard?release=v-draft").status_code == 404
    Release.objects.filter(pk=draft.pk).update(status=Release.PUBLISHED)
    from catalog.visibility import release_memo_clear

    release_memo_clear()
    assert Client().get("/api/v1/leaderboard?release=v-draft").status_code == 200
    assert Client().get("/releases/v-draft/").status_code == 200
