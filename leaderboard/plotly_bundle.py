"""The browser's plotly.js: the cartesian bundle (bar, scatter, heatmap: all our charts draw), vendored.

``static/vendor/plotly-cartesian.min.js`` is the npm package ``plotly.js-cartesian-dist-min`` at
the plotly.js version the pinned Python ``plotly`` writes figures for (1.5 MB instead of the full
4.8 MB bundle); ``scripts/vendor_plotly.sh`` fetches it with npm and regenerates
``static/css/plotly.css``. A test checks that the versions agree and the CSS is current.
"""
from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

__all__ = ["PLOTLY_STATIC_PATH", "plotly_bundle_path", "plotly_bundle_version", "plotly_css_text", "plotly_inline_css_ids"]

PLOTLY_STATIC_PATH = "vendor/plotly-cartesian.min.js"


def plotly_bundle_path() -> Path:
    return Path(__file__).resolve().parent.parent / "static" / PLOTLY_STATIC_PATH


@lru_cache(maxsize=1)
def _source() -> str:
    return plotly_bundle_path().read_text(encoding="utf-8")


def plotly_bundle_version() -> str:
    """The plotly.js version in the vendored bundle's header ('' when it names none)."""
    match = re.search(r"plotly\.js \([^)]*\) v(\d+\.\d+\.\d+)", _source()[:500])
    return match.group(1) if match else ""


def plotly_css_text() -> str:
    """The global CSS rules the bundle would inject with an inline <style> (blocked by our CSP).

    static/css/plotly.css holds this text; the page links it with id "plotly.js-style-global" and
    class "no-inline-styles", which tells plotly.js to skip its own injection.
    """
    match = re.search(r'=\{("X,X div":.*?)\};for\(', _source(), re.S)
    if match is None:
        raise ValueError(f"{PLOTLY_STATIC_PATH}: the global style rules were not found (plotly changed its bundle)")
    pairs = re.findall(r'"((?:[^"\\]|\\.)*)":(?:"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\')', match.group(1))
    lines = ["/* generated from the plotly.js bundle (its global styles): leaderboard.plotly_bundle.plotly_css_text */"]
    for selector, dq, sq in pairs:
        selector = re.sub(r"^,", " ,", selector).replace("X", ".js-plotly-plot .plotly").replace("Y", ".plotly-notifier")
        lines.append(f"{selector}{{{dq or sq}}}")
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=1)
def plotly_inline_css_ids() -> tuple[str, ...]:
    """Ids of the <style> blocks the bundle injects unless an element with that id exists.

    The bundle embeds third-party CSS behind such a guard; a hidden element with the id keeps it
    from touching the DOM under our CSP.
    """
    return tuple(sorted(set(re.findall(r'getElementById\("([0-9a-f]{64})"\)', _source()))))
