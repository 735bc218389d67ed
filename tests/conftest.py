import os
from pathlib import Path

import pytest

# the site's settings refuse to start without a secret unless debug is on
os.environ.setdefault("DJANGO_DEBUG", "1")

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"
DEMO = ROOT / "demo"


@pytest.fixture
def shared_upstream() -> Path:
    path = SHARED / "upstream"
    if not path.exists():
        pytest.fail(f"../shared/upstream is missing (expected at {path})")
    return path
