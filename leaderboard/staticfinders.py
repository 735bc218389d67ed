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
