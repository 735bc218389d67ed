"""Plotly figure specs built server-side; pages embed them as JSON and static/js/charts.js draws them.

Every function takes plain lists (already read by a selector) and returns a JSON-ready dict
``{"data": [...], "layout": {...}}``. An empty template keeps the payload small; the look is set
here explicitly so charts match the site's CSS.
"""
from __future__ import annotations

import json
from typing import Any, Sequence

import plotly.graph_objects as go

from catalog.models import CATEGORY_LABELS

__all__ = [
    "ci_bar_figure",
    "heatmap_figure",
    "error_stack_figure",
    "ablation_figure",
    "papers_timeline_figure",
    "cost_score_figure",
    "CATEGORY_COLORS",
]

FONT = "system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif"
ACCENT = "#2563eb"
MUTED = "#94a3b8"
# Okabe-Ito: distinguishable for the common colour-vision deficiencies
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000", "#999999", "#8C564B", "#7F7F7F"]
CATEGORY_COLORS = {
    "syntax": "#D55E00", "name": "#E69F00", "type": "#CC79A7", "attribute": "#F0E442", "index": "#56B4E9",
    "import": "#8C564B", "logic": "#0072B2", "timeout": "#009E73", "crash": "#000000", "other": "#999999",
    "missing": "#cbd5e1", "tampering": "#7F0000", "invalid": "#5B3A29",
}


def _layout(*, height: int, title: str = "", **extra: Any) -> go.Layout:
    return go.Layout(
        template=go.layout.Template(),
        title={"text": title, "x": 0, "font": {"size": 15}} if title else None,
        font={"family": FONT, "size": 12, "color": "#1e293b"},
        paper_bgcolor="rgba(0,0,0,0)",
        plot_bgcolor="rgba(0,0,0,0)",
        height=height,
        **{"margin": {"l": 10, "r": 20, "t": 40 if title else 10, "b": 40}, **extra},
    )


def _spec(fig: go.Figure) -> dict[str, Any]:
    return json.loads(fig.to_json())


def ci_bar_figure(
    *,
    names: Sequence[str],
    values: Sequence[float],
    lows: Sequence[float | None],
    highs: Sequence[float | None],
    highlight: Sequence[bool] | None = None,
    title: str = "",
    axis_title: str = "Scaled pass rate (%)",
) -> dict[str, Any]:
    """Horizontal bars (best at the top) with asymmetric 95 % interval whiskers."""
    plus = [(h - v) if h is not None and v is not None else 0 for v, h in zip(values, highs)]
    minus = [(v - lo) if lo is not None and v is not None else 0 for v, lo in zip(values, lows)]
    colors = [ACCENT if (highlight is None or h) else MUTED for h in (highlight or [True] * len(names))]
    hover = [
        f"{n}<br>{v:.2f}% (95% CI {lo if lo is not None else float('nan'):.2f}–{hi if hi is not None else float('nan'):.2f})"
        for n, v, lo, hi in zip(names, values, lows, highs)
    ]
    fig = go.Figure(
        go.Bar(
            x=list(values), y=list(names), orientation="h", marker={"color": colors},
            error_x={"type": "data", "symmetric": False, "array": plus, "arrayminus": minus, "color": "#334155", "thickness": 1.2},
            hovertext=hover, hoverinfo="text",
        ),
        layout=_layout(
            height=max(220, 28 * len(names) + 80), title=title,
            xaxis={"title": axis_title, "rangemode": "tozero", "gridcolor": "#e2e8f0", "zeroline": False},
            yaxis={"autorange": "reversed", "automargin": True},
        ),
    )
    return _spec(fig)


def heatmap_figure(*, models: Sequence[str], papers: Sequence[str], z: Sequence[Sequence[float | None]]) -> dict[str, Any]:
    """Model x paper scaled pass rate; empty cells (no result) stay blank."""
    text = [["" if v is None else f"{v:.0f}" for v in row] for row in z]
    fig = go.Figure(
        go.Heatmap(
            # one decimal, as the hover shows it: a full float is 17 characters of 5,000 cells a page
            z=[[None if v is None else round(v, 1) for v in row] for row in z], x=list(papers), y=list(models), text=text, texttemplate="%{text}",
            colorscale="Blues", zmin=0, zmax=100, colorbar={"title": {"text": "scaled %"}},
            hovertemplate="%{y}<br>%{x}: %{z:.1f}%<extra></extra>", xgap=1, ygap=1,
        ),
        layout=_layout(
            height=max(260, 26 * len(models) + 140),
            xaxis={"tickangle": -35, "automargin": True, "side": "top"},
            yaxis={"autorange": "reversed", "automargin": True},
        ),
    )
    return _spec(fig)


def error_stack_figure(*, models: Sequence[str], counts: dict[str, Sequence[float]]) -> dict[str, Any]:
    """Stacked horizontal bars: failures per model, one colour per error category."""
    traces = [
        go.Bar(
            name=CATEGORY_LABELS.get(category, category), y=list(models), x=list(values), orientation="h",
            marker={"color": CATEGORY_COLORS.get(category, PALETTE[i % len(PALETTE)])},
            hovertemplate=f"%{{y}}<br>{CATEGORY_LABELS.get(category, category)}: %{{x}}<extra></extra>",
        )
        for i, (category, values) in enumerate(counts.items())
    ]
    fig = go.Figure(
        traces,
        layout=_layout(
            height=max(260, 26 * len(models) + 140), barmode="stack", margin={"l": 10, "r": 20, "t": 40, "b": 40},
            xaxis={"title": "failed snippets", "gridcolor": "#e2e8f0"},
            yaxis={"autorange": "reversed", "automargin": True},
            # above the plot, in category order, so it never collides with the axis title
            legend={"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "traceorder": "normal"},
        ),
    )
    return _spec(fig)


def ablation_figure(
    *, names: Sequence[str], deltas: Sequence[float], lows: Sequence[float], highs: Sequence[float]
) -> dict[str, Any]:
    """With-paper minus without-paper scaled pass rate, paired interval; 0 marks 'no effect'."""
    colors = [PALETTE[2] if lo > 0 else (PALETTE[3] if hi < 0 else MUTED) for lo, hi in zip(lows, highs)]
    fig = go.Figure(
        go.Scatter(
            x=list(deltas), y=list(names), mode="markers", marker={"size": 10, "color": colors},
            error_x={"type": "data", "symmetric": False, "array": [h - d for d, h in zip(deltas, highs)],
                     "arrayminus": [d - lo for d, lo in zip(deltas, lows)], "color": "#334155"},
            hovertemplate="%{y}<br>Δ %{x:.2f} points<extra></extra>",
        ),
        layout=_layout(
            height=max(200, 32 * len(names) + 90),
            xaxis={"title": "with paper − without paper (scaled pass rate, points)", "zeroline": True,
                   "zerolinecolor": "#64748b", "gridcolor": "#e2e8f0"},
            yaxis={"autorange": "reversed", "automargin": True},
        ),
    )
    return _spec(fig)


def papers_timeline_figure(*, papers: Sequence[str], dates: Sequence[str], inside: Sequence[bool]) -> dict[str, Any]:
    """Papers by their code's first commit date; those inside the chosen window are highlighted."""
    fig = go.Figure(
        go.Scatter(
            x=list(dates), y=[0] * len(dates), mode="markers", text=list(papers),
            marker={"size": 12, "color": [ACCENT if i else MUTED for i in inside], "line": {"width": 1, "color": "#fff"}},
            hovertemplate="%{text}<br>first commit %{x}<extra></extra>",
        ),
        layout=_layout(height=110, xaxis={"type": "date", "gridcolor": "#e2e8f0"},
                       yaxis={"visible": False, "range": [-1, 1]}, margin={"l": 20, "r": 20, "t": 10, "b": 30}),
    )
    return _spec(fig)


def cost_score_figure(
    *, names: Sequence[str], costs: Sequence[float], scores: Sequence[float], measured: Sequence[bool],
    front: Sequence[bool],
) -> dict[str, Any]:
    """Cost per snippet (log scale) against scaled pass rate; the Pareto front joined by a line."""
    def points(keep):
        idx = [i for i in range(len(names)) if keep(i)]
        return [costs[i] for i in idx], [scores[i] for i in idx], [names[i] for i in idx]

    traces = []
    for label, symbol, keep in (("measured (run card)", "circle", lambda i: measured[i]),
                                ("list price, estimated", "diamond-open", lambda i: not measured[i])):
        x, y, text = points(keep)
        if x:
            traces.append(go.Scatter(
                x=x, y=y, text=text, mode="markers", name=label,
                marker={"size": 10, "symbol": symbol, "color": ACCENT, "line": {"width": 1.5, "color": ACCENT}},
                hovertemplate="%{text}<br>$%{x:.4g} per snippet<br>%{y:.2f} %<extra></extra>",
            ))
    x, y, text = points(lambda i: front[i])
    traces.append(go.Scatter(
        x=x, y=y, text=text, mode="lines+markers+text", name="Pareto front", textposition="top center",
        line={"color": PALETTE[3], "width": 1.5, "shape": "hv"}, marker={"size": 6, "color": PALETTE[3]},
        textfont={"size": 10, "color": "#334155"}, hoverinfo="skip",
    ))
    fig = go.Figure(traces, layout=_layout(
        height=460,
        xaxis={"title": "USD per snippet (log scale)", "type": "log", "gridcolor": "#e2e8f0"},
        yaxis={"title": "Scaled pass rate (%)", "rangemode": "tozero", "gridcolor": "#e2e8f0", "automargin": True},
        margin={"l": 10, "r": 30, "t": 30, "b": 40},
        legend={"orientation": "h", "y": -0.2},
    ))
    return _spec(fig)
