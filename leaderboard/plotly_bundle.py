"""Serve plotly.min.js from the installed plotly package as our own static file (no CDN, works offline)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

__all__ = ["PlotlyFinder", "PLOTLY_STATIC_PATH"]

PLOTLY_STATIC_PATH = "vendor/plotly.min.js"


def _package_data() -> Path:
    import plotly

    return Path(plotly.__file__).resolve().parent / "package_data"


class PlotlyFinder(BaseFinder):
    """Expose site-packages/plotly/package_data/plotly.min.js as static 'vendor/plotly.min.js'.

    collectstatic copies it like any other file, so the pinned plotly version and the
    browser bundle never drift apart and nothing is committed twice.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(_package_data()))
        # collectstatic uses the storage prefix to place the file under vendor/
        self.storage.prefix = "vendor"

    def check(self, **kwargs):
        if not (_package_data() / "plotly.min.js").is_file():
            from django.core.checks import Error

            return [Error("plotly.min.js is missing from the installed plotly package", id="leaderboard.E001")]
        return []

    def find(self, path: str, find_all: bool = False, **kwargs) -> str | list[str]:
        if path == PLOTLY_STATIC_PATH:
            found = str(_package_data() / "plotly.min.js")
            return [found] if find_all else found
        return [] if find_all else None  # type: ignore[return-value]

    def list(self, ignore_patterns) -> Iterator[tuple[str, FileSystemStorage]]:
        yield "plotly.min.js", self.storage


def plotly_css_text() -> str:
    """The global CSS rules plotly.min.js would inject with an inline <style> (blocked by our CSP).

    static/css/plotly.css holds this text; the page links it with id "plotly.js-style-global" and
    class "no-inline-styles", which tells plotly.js to skip its own injection. A test checks the
    committed file still matches the installed plotly.
    """
    import re

    source = (_package_data() / "plotly.min.js").read_text(encoding="utf-8")
    match = re.search(r'=\{("X,X div":.*?)\};for\(', source, re.S)
    if match is None:
        raise ValueError("plotly.min.js: the global style rules were not found (plotly changed its bundle)")
    pairs = re.findall(r'"((?:[^"\\]|\\.)*)":(?:"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\')', match.group(1))
    lines = [f"/* generated from plotly.min.js (plotly.js global styles): leaderboard.staticfinders.plotly_css_text */"]
    for selector, dq, sq in pairs:
        selector = re.sub(r"^,", " ,", selector).replace("X", ".js-plotly-plot .plotly").replace("Y", ".plotly-notifier")
        lines.append(f"{selector}{{{dq or sq}}}")
    return "\n".join(lines) + "\n"


_marker_ids: list[str] | None = None


def plotly_inline_css_ids() -> list[str]:
    """Ids of the <style> blocks plotly.min.js injects unless an element with that id exists.

    The bundle embeds third-party CSS (maplibre, for map traces we never draw) behind such a
    guard; a hidden element with the id keeps it from touching the DOM under our CSP.
    """
    global _marker_ids
    if _marker_ids is None:
        import re

        source = (_package_data() / "plotly.min.js").read_text(encoding="utf-8")
        _marker_ids = sorted(set(re.findall(r'getElementById\("([0-9a-f]{64})"\)', source)))
    return _marker_ids
