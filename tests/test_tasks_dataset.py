"""The tasks as a dataset: Parquet (one row per snippet, both prompts) with a dataset card, from the
CLI and as the site's download of a release, the same rows as `tasks`' JSON lines."""
from __future__ import annotations

import io
import json

import pyarrow.parquet as pq
import pytest
import yaml
from django.urls import reverse
from django.utils import timezone

from benchmark_core.cli import main as core_main
from benchmark_core.problemset import load_problemset
from benchmark_core.runner import reference_code
from catalog.models import Release

from submissions_support import DEMO, demo_release_create

COLUMNS = ["paper", "file", "snippet", "parent", "depth", "weight", "environment", "prompt_version", "prompt",
           "prompt_without_paper", "masked_file"]


def tasks_lines(*flags: str) -> list[dict]:
    out = io.StringIO()
    assert core_main(["tasks", str(DEMO), *flags], out, io.StringIO()) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def assert_rows_are_the_tasks(rows: list[dict]) -> None:
    with_paper, without = tasks_lines(), tasks_lines("--without-paper")
    assert len(rows) == len(with_paper) == 50
    for row, task, bare in zip(rows, with_paper, without):
        assert list(row) == COLUMNS
        assert (row["paper"], row["file"], row["snippet"]) == (task["paper"], task["file"], task["snippet"])
        assert row["prompt"] == task["prompt"] and row["prompt_without_paper"] == bare["prompt"]
        assert row["masked_file"] == task["masked_file"] and row["weight"] == task["weight"]
    # no reference code: no row holds its own snippet's body (the code around it is the masked file;
    # a body of one or two lines may also occur elsewhere in the file, so those are not looked for)
    pset = load_problemset(DEMO)
    checked = 0
    for row, (paper, snip) in zip(rows, pset.snippets):
        body = [line for line in reference_code(paper, snip) if line.strip()]
        if len(body) >= 3:
            checked += 1
            assert not any("\n".join(body) in str(value) for value in row.values()), row["snippet"]
    assert checked >= 10


def card_header(text: str) -> dict:
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n")[1])


def test_the_cli_writes_parquet_and_its_dataset_card(tmp_path):
    out, card = tmp_path / "tasks.parquet", tmp_path / "README.md"
    assert core_main(["tasks", str(DEMO), "--format", "parquet", "-o", str(out), "--card", str(card)],
                     io.StringIO(), io.StringIO()) == 0
    assert_rows_are_the_tasks(pq.read_table(out).to_pylist())
    header = card_header(card.read_text())
    assert header["configs"][0]["data_files"][0]["path"] == "tasks.parquet"
    assert header["dataset_info"]["splits"][0]["num_examples"] == 50
    assert [f["name"] for f in header["dataset_info"]["features"]] == COLUMNS
    err = io.StringIO()
    assert core_main(["tasks", str(DEMO), "--format", "parquet"], io.StringIO(), err) == 2
    assert "needs -o" in err.getvalue()


@pytest.mark.django_db
def test_the_demo_release_downloads_its_tasks_as_parquet_with_a_card(client):
    release = demo_release_create(slug="demo")
    page = client.get(reverse("leaderboard:release_detail", args=[release.slug])).content.decode()
    assert 'id="tasks-parquet"' in page and 'id="tasks-dataset-card"' in page
    resp = client.get(reverse("leaderboard:release_tasks_parquet", args=[release.slug]))
    assert resp.status_code == 200 and resp["Content-Type"] == "application/vnd.apache.parquet"
    assert 'filename="tasks-demo.parquet"' in resp["Content-Disposition"]
    rows = pq.read_table(io.BytesIO(resp.content)).to_pylist()
    assert_rows_are_the_tasks(rows)
    jsonl = b"".join(client.get(reverse("leaderboard:release_tasks", args=[release.slug])).streaming_content)
    assert [row["prompt"] for row in rows] == [json.loads(line)["prompt"] for line in jsonl.splitlines()]
    card = client.get(reverse("leaderboard:release_dataset_card", args=[release.slug]))
    assert card.status_code == 200 and card["Content-Type"].startswith("text/markdown")
    header = card_header(card.content.decode())
    assert header["configs"][0]["data_files"][0]["path"] == "tasks-demo.parquet"
    assert header["dataset_info"]["splits"][0]["num_examples"] == 50
    listed = {r["slug"]: r for r in client.get("/api/v1/releases").json()["releases"]}
    assert listed["demo"]["tasks_parquet_url"].endswith("/releases/demo/tasks.parquet")


@pytest.mark.django_db
def test_a_release_without_code_has_no_parquet_tasks(client):
    Release.objects.create(name="Figures", slug="figures", status=Release.PUBLISHED, published_at=timezone.now())
    assert client.get(reverse("leaderboard:release_tasks_parquet", args=["figures"])).status_code == 404
    assert client.get(reverse("leaderboard:release_dataset_card", args=["figures"])).status_code == 404


@pytest.mark.django_db
def test_a_draft_releases_parquet_tasks_are_staff_only(client):
    from django.contrib.auth.models import User

    release = demo_release_create(slug="next")
    Release.objects.filter(pk=release.pk).update(status=Release.DRAFT, published_at=None, is_default=False)
    urls = [reverse(name, args=["next"]) for name in ("leaderboard:release_tasks_parquet", "leaderboard:release_dataset_card")]
    assert [client.get(url).status_code for url in urls] == [404, 404]
    client.force_login(User.objects.create_user("root", is_staff=True))
    assert [client.get(url).status_code for url in urls] == [200, 200]


@pytest.mark.django_db
def test_a_release_whose_copies_are_gone_gets_a_404_that_says_so(client, tmp_path):
    release = demo_release_create(slug="gone")
    release.release_papers.update(folder=str(tmp_path / "nowhere" / "rope"))
    resp = client.get(reverse("leaderboard:release_tasks_parquet", args=["gone"]))
    assert resp.status_code == 404 and b"cannot be read on this site" in resp.content
