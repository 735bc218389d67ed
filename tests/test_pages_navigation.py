"""Navigation: ?release= on every page, the footer's switch, the header following the release, the staff menu."""
from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Group, User
from django.core.cache import cache
from django.urls import reverse

from catalog.models import Release
from tests.factories import make_demo

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fresh_cache():
    cache.clear()
    yield
    cache.clear()


@pytest.fixture
def two_releases(tmp_path):
    demo = make_demo(n_models=3, pset_dir=tmp_path / "pset")
    other = Release.objects.create(name="Other release", slug="other", status=Release.PUBLISHED)
    return demo.release, other


PAGES = ["leaderboard:home", "leaderboard:leaderboard", "leaderboard:per_paper", "leaderboard:contamination",
         "leaderboard:errors", "leaderboard:ablation"]


def header_links(html: str) -> dict[str, str]:
    nav = html.split('aria-label="Main"', 1)[1].split("</nav>", 1)[0]
    return {label: href.replace("&amp;", "&") for href, label in re.findall(r'<a href="([^"]*)"[^>]*>([^<]+)</a>', nav)}


@pytest.mark.parametrize("page", PAGES)
def test_every_page_shows_the_release_asked_for_and_the_header_follows_it(client, two_releases, page):
    default, other = two_releases
    html = client.get(reverse(page) + "?release=other").content.decode()
    footer = html.split('class="site-footer"', 1)[1]
    assert "showing release" in footer and ">Other release</a>" in footer
    assert header_links(html)["Leaderboard"] == reverse("leaderboard:leaderboard") + "?release=other"
    header = html.split('class="site-header"', 1)[1].split("</header>", 1)[0]
    assert '<option value="other" selected>' in header  # the switcher is in the header
    # without the parameter: the default release
    html = client.get(reverse(page)).content.decode()
    assert f">{default.name}</a>" in html.split('class="site-footer"', 1)[1]


def test_home_of_another_release_and_an_unknown_one(client, two_releases):
    default, other = two_releases
    html = client.get("/?release=other").content.decode()
    assert "Other release" in html.split("<main", 1)[1].split("</main>", 1)[0]
    assert client.get("/?release=nope").status_code == 404


def test_release_switch_submits_to_a_page_that_honours_it(client, two_releases):
    html = client.get("/").content.decode()
    form = html.split('class="inline-release"', 1)[0].rsplit("<form", 1)[1]
    action = re.search(r'action="([^"]*)"', form).group(1)
    assert action == ""  # the same page, with ?release=
    # on a paper page the other release may lack the paper: the switch goes to the heatmap
    html = client.get(reverse("leaderboard:paper", args=["paper-1"])).content.decode()
    assert f'action="{reverse("leaderboard:per_paper")}" class="inline-release"' in html


def staff_menu(html: str) -> str:
    if "data-staff-menu" not in html:
        return ""
    return html.split("data-staff-menu", 1)[1].split("</details>", 1)[0]


def test_staff_menu_lists_the_pages_each_role_may_open(client, two_releases):
    assert staff_menu(client.get("/").content.decode()) == ""
    user = User.objects.create_user("una", password="pw-una-12345")
    client.force_login(user)
    assert staff_menu(client.get("/").content.decode()) == ""

    reviewer = User.objects.create_user("rita", password="pw-rita-12345")
    reviewer.groups.add(Group.objects.get_or_create(name="reviewers")[0])
    client.force_login(reviewer)
    menu = staff_menu(client.get("/").content.decode())
    assert reverse("contributions:queue") in menu and reverse("submissions:review_queue") in menu
    assert reverse("contributions:releases") not in menu and "Admin" not in menu

    staff = User.objects.create_user("adam", password="pw-adam-12345", is_staff=True)
    client.force_login(staff)
    menu = staff_menu(client.get(reverse("leaderboard:leaderboard")).content.decode())
    for name in ("contributions:queue", "contributions:releases", "submissions:environments", "admin:index"):
        assert reverse(name) in menu, name
    for label in ("Paper review queue", "Release drafts and publishing", "Environments", "Admin"):
        assert f">{label}</a>" in menu
    # every link opens for staff
    for href in re.findall(r'href="([^"]+)"', menu):
        assert client.get(href).status_code == 200, href
    # and the anonymous page served after a staff visit has no menu (the menu is a per-visitor hole)
    client.logout()
    assert staff_menu(client.get(reverse("leaderboard:leaderboard")).content.decode()) == ""


def test_submit_link_and_form_follow_the_release(client, two_releases):
    default, other = two_releases
    # a second release one can submit to (published, with a paper's code)
    from catalog.models import ReleasePaper

    second = Release.objects.create(name="Second", slug="second", status=Release.PUBLISHED)
    ReleasePaper.objects.create(release=second, paper=ReleasePaper.objects.filter(release=default).first().paper,
                                folder="/nonexistent/paper-0", snippet_count=1, total_weight=1)
    html = client.get(reverse("leaderboard:leaderboard") + "?release=second").content.decode()
    assert header_links(html)["Submit"] == reverse("submissions:submission_create") + "?release=second"
    client.force_login(User.objects.create_user("una", password="pw-una-12345"))
    for slug in ("second", default.slug):
        form = client.get(reverse("submissions:submission_create") + f"?release={slug}").content.decode()
        chosen = re.search(r'<option value="(\d+)" selected>', form.split('name="release"', 1)[1].split("</select>", 1)[0])
        assert chosen and int(chosen.group(1)) == Release.objects.get(slug=slug).pk, slug


def test_signing_in_from_a_page_of_another_release_comes_back_to_it(client, two_releases):
    """Issue 21 item 6: the return URL keeps the path and its query (?release=)."""
    from catalog.models import Paper, ReleasePaper

    _, other = two_releases
    paper = Paper.objects.create(paper_id="only-in-other", title="Only in the other release")
    ReleasePaper.objects.create(release=other, paper=paper, folder="")
    path = reverse("leaderboard:paper", args=["only-in-other"]) + "?release=other"
    html = client.get(path).content.decode()
    link = re.search(r'<a href="([^"]*)">Log in</a>', html).group(1).replace("&amp;", "&")
    assert link == reverse("login") + "?next=%2Fpapers%2Fonly-in-other%2F%3Frelease%3Dother"
    User.objects.create_user("ann", "ann@example.org", "pw-ann-123456!")
    resp = client.post(link, {"username": "ann", "password": "pw-ann-123456!", "next": path})
    assert resp.status_code == 302 and resp["Location"] == path
    assert client.get(resp["Location"]).status_code == 200


def test_a_paper_without_release_resolves_to_the_default_or_the_latest_release_that_has_it(client, two_releases):
    from catalog.models import Paper, ReleasePaper

    default, other = two_releases
    paper = Paper.objects.create(paper_id="only-in-other", title="Only in the other release")
    ReleasePaper.objects.create(release=other, paper=paper, folder="")
    resp = client.get(reverse("leaderboard:paper", args=["only-in-other"]))
    assert resp.status_code == 200
    html = resp.content.decode()
    assert "shown from Other release, the latest release that has it" in html
    assert html.split("<dt>Release</dt>")[1].split("</dd>")[0].count("Other release") == 1
    # a paper of the default release: the default release, no notice
    default_paper = default.release_papers.select_related("paper").first().paper.paper_id
    html = client.get(reverse("leaderboard:paper", args=[default_paper])).content.decode()
    assert "latest release that has it" not in html and default.name in html.split("<dt>Release</dt>")[1]
    # a draft is not shown to visitors; a paper nowhere is still a 404
    draft = Release.objects.create(name="Draft", slug="draft", status=Release.DRAFT)
    ReleasePaper.objects.create(release=draft, paper=Paper.objects.create(paper_id="draft-only"), folder="")
    assert client.get(reverse("leaderboard:paper", args=["draft-only"])).status_code == 404
    assert client.get(reverse("leaderboard:paper", args=["no-such-paper"])).status_code == 404
