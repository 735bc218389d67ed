import itertools
import json
import math
from datetime import date

import pytest

from benchmark_core.scoring import (
    SnippetOutcome,
    bootstrap_ci,
    is_contamination_safe,
    paired_bootstrap,
    paper_totals,
    parse_cutoff,
    pass_at_k,
    pass_rates,
    per_paper,
    per_sample,
    published_rates,
    safe_papers,
    significance_tiers,
    summarize,
)


def o(paper, snippet, weight, passed, sample=0):
    return SnippetOutcome(paper, "f.py", snippet, sample, weight, passed)


def test_scaled_and_plain_pass_rate():
    runs = [o("a", "x", 1, True), o("a", "y", 3, False), o("b", "z", 6, True)]
    scaled, plain = pass_rates(runs)
    assert scaled == pytest.approx(70.0) and plain == pytest.approx(200 / 3)
    assert per_paper(runs)["a"]["scaled_pass_rate"] == pytest.approx(25.0)


def test_samples_mean_and_population_std():
    runs = [o("a", "x", 1, True, 0), o("a", "y", 1, False, 0), o("a", "x", 1, True, 1), o("a", "y", 1, True, 1)]
    s = per_sample(runs)
    assert s["samples"] == 2
    assert s["scaled"]["rates"] == [50.0, 100.0]
    assert s["scaled"]["mean"] == 75.0 and s["scaled"]["std"] == 25.0


def test_pass_at_k_matches_brute_force():
    for n, c, k in [(5, 2, 1), (5, 2, 3), (10, 1, 5), (4, 0, 2), (4, 4, 4)]:
        combos = list(itertools.combinations([1] * c + [0] * (n - c), k))
        brute = sum(1 for combo in combos if any(combo)) / len(combos)
        assert pass_at_k(n, c, k) == pytest.approx(brute)
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_summary_reports_pass_at_k_only_with_several_samples():
    one = summarize([o("a", "x", 1, True)], n_boot=50)
    assert one["pass_at_k"] == {}
    many = summarize([o("a", "x", 2, s % 2 == 0, s) for s in range(5)] + [o("b", "y", 1, False, s) for s in range(5)],
                     n_boot=50)
    assert many["pass_at_k"]["pass@1"]["plain"] == pytest.approx(30.0)
    assert many["pass_at_k"]["pass@5"]["plain"] == pytest.approx(50.0)


def test_bootstrap_interval_resamples_papers_and_is_reproducible():
    runs = [o(p, f"s{i}", 1 + i % 3, (i + ord(p)) % 3 == 0) for p in "abcdefgh" for i in range(6)]
    totals = paper_totals(runs)
    lo, hi = bootstrap_ci(totals, n_boot=500, seed=1)
    point = pass_rates(runs)[0]
    assert lo <= point <= hi and lo < hi
    assert (lo, hi) == bootstrap_ci(totals, n_boot=500, seed=1)
    # a model with every paper identical has no spread
    same = paper_totals([o(p, "s", 2, True) for p in "abc"])
    assert bootstrap_ci(same, n_boot=100) == (100.0, 100.0)


def test_significance_tiers_put_indistinguishable_models_together():
    papers = "abcdefghij"
    strong = paper_totals([o(p, "s", 1, True) for p in papers])
    strong_twin = paper_totals([o(p, "s", 1, p != "a") for p in papers])
    weak = paper_totals([o(p, "s", 1, False) for p in papers])
    tiers = significance_tiers({"strong": strong, "twin": strong_twin, "weak": weak}, n_boot=300)
    assert tiers == {"strong": 1, "twin": 1, "weak": 2}
    diff, lo, hi = paired_bootstrap(strong, weak, n_boot=200)
    assert diff == 100.0 and lo > 0


def test_cutoff_month_covers_whole_month_and_contamination():
    assert parse_cutoff("2024-06") == date(2024, 6, 30)
    assert parse_cutoff("2024-7") == date(2024, 7, 31)
    assert parse_cutoff("2024-02") == date(2024, 2, 29)
    assert parse_cutoff("2024-11-17") == date(2024, 11, 17)
    assert not is_contamination_safe(date(2024, 6, 30), "2024-06")
    assert is_contamination_safe(date(2024, 7, 1), "2024-06")
    assert not is_contamination_safe(None, "2024-06")
    with pytest.raises(ValueError):
        parse_cutoff("June 2024")


def test_published_figures_are_reproduced_from_per_snippet_entries(shared_upstream):
    path = shared_upstream / "overall_stats.json"
    ours = published_rates(path)
    theirs = json.loads(path.read_text())["overall_scores"]
    assert len(ours) == 32
    for key, figures in ours.items():
        assert figures["snippets"] == 212 and figures["total_weight"] == 1449
        assert figures["scaled_pass_rate"] == pytest.approx(theirs[key]["line_rates"]["mean"], abs=0.01)
        assert figures["pass_rate"] == pytest.approx(theirs[key]["task_rates"]["mean"], abs=0.01)
    by_name = {f["name"]: f for f in ours.values()}
    assert round(by_name["Gemini-2.5-Pro-Preview-05-06"]["scaled_pass_rate"], 2) == 37.34
    assert round(by_name["Gemini-2.5-Pro-Preview-05-06"]["pass_rate"], 2) == 64.15
    assert round(by_name["O3 (High)"]["scaled_pass_rate"], 2) == 32.16
    assert round(by_name["O4-Mini (High)"]["scaled_pass_rate"], 2) == 30.78


def test_published_first_commits_after_latest_cutoff(shared_upstream):
    import yaml

    papers = yaml.safe_load((shared_upstream / "papers.yaml").read_text())
    firsts = {p["id"]: date.fromisoformat(str(p["first_commit_date"])) for p in papers}
    assert len(safe_papers(firsts, "2025-01")) == 13
    assert len(safe_papers(firsts, "2025-01-31")) == 13
