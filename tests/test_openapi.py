"""The OpenAPI document of /api/v1/: complete, valid, and what the live server really answers.

The fuzz run (schemathesis, property-based) sends generated requests for every documented
operation to a live server holding a small release, models and a submission, and checks each
response: never a 5xx, a documented status code and content type, a body matching the schema.
"""
from __future__ import annotations

import itertools
import re

import pytest
import schemathesis
from django.contrib.auth.models import User
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, given
from hypothesis.errors import Unsatisfiable
from hypothesis import settings as hypothesis_settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.core.result import Err
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from accounts.services import api_token_create
from leaderboard.openapi import openapi_document

from factories import make_demo

# a bounded run: CI time, not exhaustiveness (a few hundred requests in all)
FUZZ_EXAMPLES = 12


def _api_routes() -> set[tuple[str, str]]:
    """Every /api/v1/ route of the URLconf as an OpenAPI path template (trailing-slash aliases folded)."""
    routes: set[str] = set()

    def walk(patterns, prefix: str) -> None:
        for p in patterns:
            text = prefix + str(p.pattern)
            if isinstance(p, URLResolver):
                walk(p.url_patterns, text)
            elif isinstance(p, URLPattern) and text.startswith("api/v1/"):
                routes.add(re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", text[len("api/v1"):]).rstrip("/"))

    walk(get_resolver().url_patterns, "")
    return {(r.replace("{pk}", "{id}"), r) for r in routes}


def test_every_api_route_is_documented_and_nothing_else():
    documented = set(openapi_document()["paths"])
    routes = {template for template, _ in _api_routes()}
    assert routes == documented, {"not documented": routes - documented, "no such route": documented - routes}


@pytest.mark.django_db
def test_the_document_is_served_and_refers_only_to_defined_schemas(client):
    resp = client.get("/api/v1/openapi.json")
    assert resp.status_code == 200 and resp["Content-Type"] == "application/json"
    doc = resp.json()
    assert doc == openapi_document() and doc["openapi"].startswith("3.1")
    refs = set(re.findall(r'"#/components/schemas/(\w+)"', resp.content.decode()))
    assert refs and refs <= set(doc["components"]["schemas"])
    # schemathesis parses and resolves it (an invalid document raises here)
    schema = schemathesis.openapi.from_dict(doc)
    operations = list(schema.get_all_operations())
    assert len(operations) == sum(len(methods) for methods in doc["paths"].values())
    assert not [r.err() for r in operations if isinstance(r, Err)]


@pytest.fixture
def fuzz_site(db):
    """A release with papers, models, a private upload and a token, for the fuzzer to find."""
    demo = make_demo(n_models=2, n_papers=2, slug="fuzz")
    user = User.objects.create_user("fuzzer", "f@example.org", "pw-fuzzer-123!", is_staff=True)
    return {"demo": demo, "token": api_token_create(user=user)[1]}


@pytest.mark.django_db(transaction=True)  # the live server's threads read the fixtures' rows
def test_fuzz_the_api_against_its_document(live_server, fuzz_site, settings):
    """Every documented operation, FUZZ_EXAMPLES generated requests each; every failure is listed."""
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/openapi.json")
    headers = {"Authorization": f"Token {fuzz_site['token']}"}
    checks = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
    failures: dict[str, str] = {}
    calls = 0
    statuses: dict[int, int] = {}
    operations = [result.ok() for result in schema.get_all_operations()]
    for operation, mode in itertools.product(operations, (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)):

        @given(case=operation.as_strategy(generation_mode=mode))
        @hypothesis_settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None, derandomize=True,
                  suppress_health_check=list(HealthCheck))
        def fuzz(case) -> None:
            nonlocal calls
            calls += 1
            response = case.call_and_validate(headers=headers, checks=checks, timeout=30)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1

        try:
            fuzz()
        except Unsatisfiable:  # nothing to make invalid (an operation without parameters, negatively)
            continue
        except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - collect every operation's failure
            failures[f"{operation.label} ({mode.value})"] = str(exc)[:3000]
    assert not failures, "\n\n".join(f"{label}:\n{text}" for label, text in failures.items())
    # the run reached the data, not only 404s: some answers are 2xx, and every operation was called
    assert calls >= 2 * len(operations) and sum(n for code, n in statuses.items() if code < 300) > len(operations)
    print(f"fuzz: {calls} requests, status codes {dict(sorted(statuses.items()))}")
