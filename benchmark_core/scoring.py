"""Pure metrics: scaled and plain pass rate, per paper, per sample, pass@k, bootstrap, contamination."""
from __future__ import annotations

import calendar
import datetime as dt
import json
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

__all__ = [
    "Outcome",
    "SnippetOutcome",
    "pass_rates",
    "paper_totals",
    "per_paper",
    "per_sample",
    "pass_at_k",
    "pass_at_k_summary",
    "N_BOOT",
    "bootstrap_ci",
    "bootstrap_rates",
    "bootstrap_table",
    "paired_bootstrap",
    "significance_tiers",
    "category_counts",
    "environment_errors",
    "summarize",
    "parse_cutoff",
    "is_contamination_safe",
    "safe_papers",
    "published_rates",
    "published_outcomes",
]


class Outcome(Protocol):
    paper: str
    snippet: str
    sample: int
    weight: int
    passed: bool


@dataclass(frozen=True)
class SnippetOutcome:
    paper: str
    file: str
    snippet: str
    sample: int
    weight: int
    passed: bool
    category: str | None = None


def _pct(num: float, den: float) -> float:
    return 100.0 * num / den if den else 0.0


def pass_rates(outcomes: Iterable[Outcome]) -> tuple[float, float]:
    """(scaled pass rate, pass rate) in percent over the given outcomes."""
    items = list(outcomes)
    weight = sum(o.weight for o in items)
    passed_weight = sum(o.weight for o in items if o.passed)
    passed = sum(1 for o in items if o.passed)
    return _pct(passed_weight, weight), _pct(passed, len(items))


def _by_sample(outcomes: Iterable[Outcome]) -> dict[int, list[Outcome]]:
    groups: dict[int, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        groups[o.sample].append(o)
    return dict(sorted(groups.items()))


def per_sample(outcomes: Iterable[Outcome]) -> dict[str, Any]:
    """Each sample index gives one rate; mean and (population) std over them, as published."""
    groups = _by_sample(outcomes)
    scaled = [pass_rates(g)[0] for g in groups.values()]
    plain = [pass_rates(g)[1] for g in groups.values()]
    return {
        "samples": len(groups),
        "scaled": {"mean": _mean(scaled), "std": _pstd(scaled), "rates": scaled},
        "plain": {"mean": _mean(plain), "std": _pstd(plain), "rates": plain},
    }


def _mean(xs: Sequence[float]) -> float:
    return statistics.fmean(xs) if xs else 0.0


def _pstd(xs: Sequence[float]) -> float:
    return statistics.pstdev(xs) if len(xs) > 1 else 0.0


def paper_totals(outcomes: Iterable[Outcome]) -> dict[str, tuple[float, float, float, int]]:
    """Per paper, averaged over samples: (passed weight, total weight, passed snippets, snippets)."""
    groups = _by_sample(outcomes)
    n = max(len(groups), 1)
    acc: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0])
    for group in groups.values():
        for o in group:
            row = acc[o.paper]
            row[0] += o.weight if o.passed else 0
            row[1] += o.weight
            row[2] += 1 if o.passed else 0
            row[3] += 1
    return {p: (r[0] / n, r[1] / n, r[2] / n, int(round(r[3] / n))) for p, r in sorted(acc.items())}


def per_paper(outcomes: Iterable[Outcome]) -> dict[str, dict[str, float]]:
    totals = paper_totals(outcomes)
    return {
        p: {
            "scaled_pass_rate": _pct(pw, tw),
            "pass_rate": _pct(ps, n),
            "snippets": n,
            "weight": tw,
        }
        for p, (pw, tw, ps, n) in totals.items()
    }


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one problem with n samples of which c pass (Chen et al., 2021)."""
    if k > n:
        raise ValueError(f"k={k} exceeds the number of samples n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def pass_at_k_summary(outcomes: Iterable[Outcome], ks: Sequence[int] = (1, 5, 10)) -> dict[str, dict[str, float]]:
    """pass@k over snippets (plain) and weighted by lines (scaled), for each k not above the samples."""
    per_snippet: dict[tuple[str, str, str], list[Outcome]] = defaultdict(list)
    for o in outcomes:
        per_snippet[(o.paper, getattr(o, "file", ""), o.snippet)].append(o)
    if not per_snippet:
        return {}
    n_min = min(len(v) for v in per_snippet.values())
    result: dict[str, dict[str, float]] = {}
    for k in ks:
        if k > n_min:
            continue
        plain_sum = weighted_sum = weight_total = 0.0
        for runs in per_snippet.values():
            value = pass_at_k(len(runs), sum(1 for r in runs if r.passed), k)
            plain_sum += value
            weighted_sum += value * runs[0].weight
            weight_total += runs[0].weight
        result[f"pass@{k}"] = {"plain": 100 * plain_sum / len(per_snippet), "scaled": _pct(weighted_sum, weight_total)}
    return result


# ---------------------------------------------------------------------------- bootstrap (the one implementation)
# Every interval and tier of the project comes from here: the CLI's summary, the stored aggregates and
# the site's request-time windows and ablation. One resampling of papers (seeded numpy generator, the
# same index matrix for every model, so differences are paired), one percentile rule (linear).

#: resamples everywhere (CLI, stored aggregates, request-time views): one number, so figures agree
N_BOOT = 2000
SEED = 0


def _boot_indices(n_papers: int, *, n_boot: int, seed: int):
    import numpy as np

    return np.random.default_rng(seed).integers(0, n_papers, size=(n_boot, n_papers))


def bootstrap_rates(
    totals: Mapping[str, Mapping[str, tuple[float, ...]]], papers: Sequence[str], *, n_boot: int = N_BOOT,
    seed: int = SEED,
):
    """Resampled scaled pass rates, one row per model (in ``totals`` order), ``n_boot`` columns.

    ``totals[model][paper]`` is (passed weight, total weight, ...); a paper a model lacks counts 0 / 0.
    """
    import numpy as np

    keys = list(totals)
    papers = list(papers)
    if not keys or not papers:
        return keys, np.zeros((len(keys), 0))
    num = np.array([[totals[k].get(p, (0.0, 0.0))[0] for p in papers] for k in keys], dtype=float)
    den = np.array([[totals[k].get(p, (0.0, 0.0))[1] for p in papers] for k in keys], dtype=float)
    idx = _boot_indices(len(papers), n_boot=n_boot, seed=seed)
    boot_num = num[:, idx].sum(axis=2)
    boot_den = den[:, idx].sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        rates = np.where(boot_den > 0, 100.0 * boot_num / np.where(boot_den > 0, boot_den, 1.0), 0.0)
    return keys, rates


def _interval(values, level: float) -> tuple[float, float]:
    import numpy as np

    if values.size == 0:
        return 0.0, 0.0
    alpha = 100 * (1 - level) / 2
    lo, hi = np.percentile(values, [alpha, 100 - alpha])
    return float(lo), float(hi)


def _point(totals: Mapping[str, tuple[float, ...]], papers: Sequence[str]) -> float:
    return _pct(sum(totals.get(p, (0.0, 0.0))[0] for p in papers), sum(totals.get(p, (0.0, 0.0))[1] for p in papers))


def bootstrap_ci(
    totals: Mapping[str, tuple[float, ...]], *, n_boot: int = N_BOOT, seed: int = SEED, level: float = 0.95
) -> tuple[float, float]:
    """Percentile interval of the scaled pass rate when papers are resampled with replacement."""
    papers = sorted(totals)
    _, rates = bootstrap_rates({"m": totals}, papers, n_boot=n_boot, seed=seed)
    return _interval(rates[0], level) if papers else (0.0, 0.0)


def paired_bootstrap(
    a: Mapping[str, tuple[float, ...]],
    b: Mapping[str, tuple[float, ...]],
    *,
    n_boot: int = N_BOOT,
    seed: int = SEED,
    level: float = 0.95,
) -> tuple[float, float, float]:
    """Difference a - b in scaled pass rate with a paired (same papers) percentile interval."""
    papers = sorted(set(a) & set(b))
    if not papers:
        return 0.0, 0.0, 0.0
    _, rates = bootstrap_rates({"a": a, "b": b}, papers, n_boot=n_boot, seed=seed)
    lo, hi = _interval(rates[0] - rates[1], level)
    return _point(a, papers) - _point(b, papers), lo, hi


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p-value over paired verdicts: ``only_a`` items passed by a alone,
    ``only_b`` by b alone (the concordant ones carry no information)."""
    n = only_a + only_b
    if n == 0:
        return 1.0
    k = min(only_a, only_b)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n
    return min(1.0, 2.0 * tail)


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the (cost, score) points no other point beats: none is at most as costly and
    scores at least as high with one of the two strictly better. Cheapest first."""
    order = sorted(range(len(points)), key=lambda i: (points[i][0], -points[i][1]))
    front, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            front.append(i)
            best = points[i][1]
    return front


def _tiers_from(rates, keys: list[str], points: Mapping[str, float], ranked: Iterable[str]) -> dict[str, int]:
    """A model shares its tier leader's tier unless the paired difference's lower bound is above 0."""
    import numpy as np

    row = {k: i for i, k in enumerate(keys)}
    tiers: dict[str, int] = {}
    tier, leader = 0, None
    for key in sorted(ranked, key=lambda k: (-points[k], k)):
        if leader is None:
            tier, leader = 1, key
        elif float(np.percentile(rates[row[leader]] - rates[row[key]], 2.5)) > 0:
            tier, leader = tier + 1, key
        tiers[key] = tier
    return tiers


def bootstrap_table(
    totals: Mapping[str, Mapping[str, tuple[float, ...]]],
    papers: Sequence[str],
    *,
    ranked: Iterable[str] | None = None,
    n_boot: int = N_BOOT,
    seed: int = SEED,
) -> tuple[dict[str, tuple[float, float]], dict[str, int]]:
    """95 % intervals of every model over ``papers`` and significance tiers of the ``ranked`` ones."""
    totals = {k: v for k, v in totals.items() if v}
    papers = sorted(papers)
    if not totals or not papers:
        return {}, {}
    keys, rates = bootstrap_rates(totals, papers, n_boot=n_boot, seed=seed)
    intervals = {k: _interval(rates[i], 0.95) for i, k in enumerate(keys)}
    points = {k: _point(totals[k], papers) for k in keys}
    wanted = [k for k in keys if ranked is None or k in set(ranked)]
    return intervals, _tiers_from(rates, keys, points, wanted)


def significance_tiers(
    models: Mapping[str, Mapping[str, tuple[float, ...]]], *, n_boot: int = N_BOOT, seed: int = SEED
) -> dict[str, int]:
    """Rank as tiers: a model shares its tier's leader's tier unless the paired difference is significant."""
    papers = sorted({p for totals in models.values() for p in totals})
    return bootstrap_table(models, papers, n_boot=n_boot, seed=seed)[1]


def category_counts(outcomes: Iterable[Any]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for o in outcomes:
        if not o.passed:
            counts[getattr(o, "category", None) or "other"] += 1
    return dict(sorted(counts.items()))


def summarize(outcomes: Iterable[Any], *, n_boot: int = N_BOOT, seed: int = SEED) -> dict[str, Any]:
    """All figures of one evaluation, as stored in results.json and on the site.

    Runs of category ``environment`` (the paper's environment failed) leave their paper out of
    every rate: ``complete`` is then false and ``environment_errors`` names the papers.
    """
    everything = list(outcomes)
    errors = environment_errors(everything)
    items = [o for o in everything if o.paper not in errors]
    samples = per_sample(items)
    totals = paper_totals(items)
    lo, hi = bootstrap_ci(totals, n_boot=n_boot, seed=seed)
    return {
        "scaled_pass_rate": samples["scaled"]["mean"],
        "pass_rate": samples["plain"]["mean"],
        "scaled_pass_rate_std": samples["scaled"]["std"],
        "pass_rate_std": samples["plain"]["std"],
        "scaled_pass_rate_ci95": [lo, hi],
        "samples": samples["samples"],
        "per_sample": {"scaled": samples["scaled"]["rates"], "plain": samples["plain"]["rates"]},
        "pass_at_k": pass_at_k_summary(items) if samples["samples"] > 1 else {},
        "snippets": len({(o.paper, getattr(o, "file", ""), o.snippet) for o in items}),
        "passed": sum(1 for o in items if o.passed),
        "runs": len(items),
        "total_weight": sum(v[1] for v in totals.values()),
        "categories": category_counts(everything),
        "papers": per_paper(items),
        "complete": not errors,
        "environment_errors": list(errors.values()),
    }


def environment_errors(outcomes: Iterable[Any]) -> dict[str, dict[str, str]]:
    """Per paper with an ``environment`` run: {paper, environment, reason} (from the run's ``extra``)."""
    found: dict[str, dict[str, str]] = {}
    for o in outcomes:
        if getattr(o, "category", None) == "environment" and o.paper not in found:
            extra = getattr(o, "extra", None) or {}
            found[o.paper] = {"paper": o.paper, "environment": str(extra.get("environment") or "default"),
                              "reason": str(extra.get("environment_error") or "")}
    return dict(sorted(found.items()))


def parse_cutoff(value: str | dt.date) -> dt.date:
    """The last day a knowledge cutoff covers: '2024-06' and '2024-6' cover all of June 2024."""
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    text = str(value).strip()
    shown = text if len(text) <= 40 else text[:40] + "..."
    usage = f"not a cutoff date: {shown!r} (use YYYY, YYYY-MM or YYYY-MM-DD)"
    parts = text.split("-")
    # a date has at most 4+2+2 digits: longer parts are refused before int() or date() overflow
    if not 1 <= len(parts) <= 3 or any(not p.isascii() or not p.isdigit() or len(p) > 4 for p in parts):
        raise ValueError(usage)
    nums = [int(p) for p in parts]
    try:
        if len(nums) == 1:
            return dt.date(nums[0], 12, 31)
        if len(nums) == 2:
            return dt.date(nums[0], nums[1], calendar.monthrange(nums[0], nums[1])[1])
        return dt.date(*nums)
    except (ValueError, calendar.IllegalMonthError) as exc:
        raise ValueError(f"{usage}: {exc}") from None


def is_contamination_safe(first_commit: dt.date | None, cutoff: str | dt.date) -> bool:
    """A paper is safe for a model when its code's first commit is after the model's cutoff."""
    return first_commit is not None and first_commit > parse_cutoff(cutoff)


def safe_papers(first_commits: Mapping[str, dt.date | None], cutoff: str | dt.date) -> list[str]:
    return sorted(p for p, d in first_commits.items() if is_contamination_safe(d, cutoff))


def published_outcomes(data: Mapping[str, Any]) -> dict[str, list[SnippetOutcome]]:
    """Per model, the per-snippet outcomes of a published overall_stats.json."""
    models: dict[str, list[SnippetOutcome]] = defaultdict(list)
    for paper_id, paper in data["results"].items():
        for model, entry in paper["results"].items():
            for snippet, samples in entry["results"].items():
                for s in samples:
                    models[model].append(
                        SnippetOutcome(
                            paper=paper_id,
                            file="",
                            snippet=snippet,
                            sample=int(s.get("completion_idx", 0)),
                            weight=int(s["snippet_code_line_count"]),
                            passed=bool(s["passed"]),
                        )
                    )
    return dict(models)


def published_rates(path: str | Path) -> dict[str, dict[str, Any]]:
    """Recompute each model's scaled and plain pass rate from the per-snippet entries."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    cfgs = {k: v.get("llm_cfg", {}) for k, v in data.get("overall_scores", {}).items()}
    out = {}
    for model, outcomes in published_outcomes(data).items():
        samples = per_sample(outcomes)
        out[model] = {
            "name": cfgs.get(model, {}).get("pretty_name", model),
            "scaled_pass_rate": samples["scaled"]["mean"],
            "pass_rate": samples["plain"]["mean"],
            "snippets": len({(o.paper, o.snippet) for o in outcomes}),
            "total_weight": sum(o.weight for o in outcomes if o.sample == min(x.sample for x in outcomes)),
        }
    return out
