"""Summaries: LaTeX math rendered as sanitized MathML; a contribution's paper2code_paper.md becomes its summary."""
from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.cache import cache
from django.core.files.uploadedfile import SimpleUploadedFile
from django.urls import reverse

from contributions.models import PaperContribution
from contributions.release_services import release_draft_paper_add
from catalog.models import Paper
from leaderboard.templatetags.leaderboard_tags import render_markdown
from tests.contributions_support import WEAK_MODULE, WEAK_TEST, contribution_env, zip_files
from tests.factories import make_demo


def test_formulas_become_mathml_and_the_rest_stays_markdown():
    html = render_markdown(
        "Attention $q_i^\\top k_j$ with *emphasis* and a_b_c.\n\n"
        "$$R_{m} = \\begin{pmatrix} \\cos m\\theta & -\\sin m\\theta \\\\ \\sin m\\theta & \\cos m\\theta \\end{pmatrix}$$\n\n"
        "Costs $5 and $10; code `$x_1$` stays code.\n\n```\n$$not math$$\n```\n"
    )
    assert html.count("<math") == 2
    assert '<span class="math-display"><math xmlns="http://www.w3.org/1998/Math/MathML" display="block">' in html
    assert "<mtable><mtr><mtd><mi>cos</mi>" in html and html.count("<mtr>") == 2  # two matrix rows
    assert "<msubsup><mi>q</mi><mi>i</mi>" in html
    assert "<em>emphasis</em>" in html and "a_b_c" in html
    assert "Costs $5 and $10" in html and "<code>$x_1$</code>" in html and "$$not math$$" in html
    assert "begin{pmatrix}" not in html


def test_formulas_cannot_carry_markup():
    html = render_markdown("$\\text{<script>alert(1)</script><img src=x onerror=alert(2)>}$ and $$\\href{javascript:alert(3)}{x}$$")
    assert "<script" not in html and "onerror" not in html and "javascript:" not in html and "<img" not in html


def test_a_formula_that_does_not_parse_stays_readable():
    html = render_markdown("Broken: $\\frac{a}{$ end.")
    assert "end." in html and "<script" not in html


@pytest.mark.django_db
def test_the_demo_summary_on_the_paper_page_has_math(client, tmp_path):
    cache.clear()
    summary = (Path(__file__).resolve().parent.parent / "demo/rope/paper2code_paper.md").read_text(encoding="utf-8")
    make_demo(n_models=1, summary=summary, pset_dir=tmp_path / "pset")
    html = client.get(reverse("leaderboard:paper", args=["paper-1"])).content.decode()
    assert "<math" in html and "begin{pmatrix}" not in html and "$$" not in html


@pytest.mark.django_db(transaction=True)
def test_a_contributions_markdown_paper_becomes_its_summary(client, tmp_path):
    with contribution_env(tmp_path):
        contributor = User.objects.create_user("carla", password="pw-carla-123")
        staff = User.objects.create_user("adam", password="pw-adam-123", is_staff=True)
        client.force_login(contributor)
        text = "# Calc\n\nAdds $a + b$ and multiplies $a \\cdot b$.\n"
        archive = zip_files({"calc.py": WEAK_MODULE, "paper2code_test.py": WEAK_TEST, "paper2code_paper.md": text},
                            top="calc-paper")
        response = client.post(reverse("contributions:new"), {
            "paper_id": "calc-paper", "title": "Calc", "venue": "", "arxiv_url": "", "code_url": "",
            "first_commit_date": "2025-01-01", "annotated_files": "", "context_files": "", "requirements": "",
            "archive": SimpleUploadedFile("calc.zip", archive),
        })
        assert response.status_code == 302
        contribution = PaperContribution.objects.get(paper_id="calc-paper")
        rp = release_draft_paper_add(contribution=contribution, by=staff)
        assert Paper.objects.get(paper_id="calc-paper").summary == text
        cache.clear()
        client.force_login(staff)  # the draft's pages are staff's until it is published
        html = client.get(reverse("leaderboard:paper", args=["calc-paper"]) + f"?release={rp.release.slug}").content.decode()
        assert "<math" in html and "<mo>·</mo>" in html, html[html.find("id=\"summary\""):][:600]
