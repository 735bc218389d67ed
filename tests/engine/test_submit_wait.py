"""`submit --wait`: what a finished submission's last lines say about ranking (issue 21)."""
from __future__ import annotations

import io

from benchmark_core import submit


def _finish(result: dict, *, published: bool) -> str:
    out, err = io.StringIO(), io.StringIO()
    payload = {"status": "finished", "progress": {"done": 5, "total": 5, "percent": 100.0},
               "published": published, "result": result, "status_url": "http://x/", "url": "http://x/"}
    assert submit._wait(payload, token="t", poll=0.01, timeout=1, out=out, err=err) == submit.EXIT_OK
    return out.getvalue()


def test_a_flag_keeps_a_published_result_off_the_ranked_board_and_says_so():
    reason = "1 result(s) flagged by the engine await a reviewer"
    text = _finish({"scaled_pass_rate": 83.72, "pass_rate": 72.0, "coverage": 100.0, "ranked": False,
                    "unranked_reason": reason}, published=True)
    assert f"shown, not ranked: {reason}" in text
    assert "published on the leaderboard (not ranked until the reason above is resolved)" in text
    assert "coverage" not in text  # full coverage is not the reason


def test_a_ranked_result_says_nothing_about_ranking_and_missing_snippets_are_named():
    text = _finish({"scaled_pass_rate": 100.0, "pass_rate": 100.0, "coverage": 100.0, "ranked": True,
                    "unranked_reason": None}, published=True)
    assert "not ranked" not in text and text.rstrip().endswith("published on the leaderboard")
    text = _finish({"scaled_pass_rate": 50.0, "pass_rate": 50.0, "coverage": 80.0, "ranked": False,
                    "unranked_reason": "results are missing for 10 of 50 snippets"}, published=False)
    assert "coverage 80.0 % of the release's snippets" in text
    assert "shown, not ranked: results are missing for 10 of 50 snippets" in text
