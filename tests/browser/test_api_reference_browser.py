"""/api/: the API reference, Swagger UI (vendored from npm) drawing the site's OpenAPI document in Chromium."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
VENDOR = ROOT / "static" / "vendor" / "swagger-ui"

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_reference_lists_every_operation_of_the_document(live_server, browser, client):
    from django.core.cache import cache

    cache.clear()
    document = client.get("/api/v1/openapi.json").json()
    operations = {(method.upper(), path) for path, item in document["paths"].items()
                  for method in item if method in {"get", "post", "put", "patch", "delete"}}
    context = browser.new_context(viewport={"width": 1366, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    outside: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("request", lambda r: r.url.startswith(live_server.url) or outside.append(r.url))
    page.goto(live_server.url + "/")
    page.locator("nav[aria-label='Main'] a", has_text="API").click()
    page.wait_for_selector("#api-reference[data-rendered='1'] .opblock", timeout=20000)
    shown = set(zip(page.locator(".opblock-summary-method").all_inner_texts(),
                    page.locator(".opblock-summary-path").evaluate_all("els => els.map(e => e.getAttribute('data-path'))")))
    assert shown == operations
    assert page.locator("h1").first.inner_text() == "API reference"
    assert errors == [] and outside == []  # no CSP breakage, nothing fetched from another site
    context.close()


def test_the_vendored_viewer_is_the_version_package_lock_pins():
    lock = json.loads((ROOT / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/swagger-ui-dist"]["version"]
    assert (VENDOR / "VERSION").read_text().strip() == pinned, "run scripts/vendor_swagger_ui.sh"
    assert (VENDOR / "swagger-ui-bundle.js").stat().st_size > 500_000
    assert "sourceMappingURL" not in (VENDOR / "swagger-ui.css").read_text()
