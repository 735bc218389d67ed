"""HTTPS settings from the environment (docs/deploy.md "HTTPS"): check --deploy and the headers, in a
process started with the variables, as a deployment starts it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

HTTPS_ENV = {
    "DJANGO_SECURE_HSTS_SECONDS": "31536000",
    "DJANGO_SECURE_SSL_REDIRECT": "1",
    "DJANGO_SECURE_PROXY_SSL_HEADER": "X-Forwarded-Proto",
}

PROBE = """
import json, os, django
django.setup()
from django.test import Client
client = Client()
secure = client.get("/api/v1/ping", HTTP_X_FORWARDED_PROTO="https", HTTP_HOST="localhost")
plain = client.get(os.environ["PROBE_PLAIN_URL"], HTTP_HOST="localhost")
ping = client.get("/api/v1/ping", HTTP_HOST="localhost")
print(json.dumps({"hsts": secure.headers.get("Strict-Transport-Security"), "secure_status": secure.status_code,
                  "plain_status": plain.status_code, "plain_location": plain.headers.get("Location"),
                  "ping_status": ping.status_code, "ping_hsts": ping.headers.get("Strict-Transport-Security")}))
"""


def _env(tmp_path: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DJANGO_", "DATABASE_URL", "REDIS_URL", "RCB_CACHE"))}
    return {**env, "DJANGO_DEBUG": "0", "DJANGO_SECRET_KEY": "s" * 20 + "-a-long-random-looking-secret-" + "k" * 30,
            "DJANGO_ALLOWED_HOSTS": "localhost", "RCB_VAR_DIR": str(tmp_path), "DJANGO_SETTINGS_MODULE": "rcbsite.settings",
            **extra}


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)


def test_check_deploy_is_quiet_about_https_when_the_variables_are_set(tmp_path):
    without = _run(["manage.py", "check", "--deploy"], _env(tmp_path, {}))
    assert "security.W004" in without.stderr + without.stdout and "security.W008" in without.stderr + without.stdout

    with_https = _run(["manage.py", "check", "--deploy"], _env(tmp_path, HTTPS_ENV))
    out = with_https.stderr + with_https.stdout
    assert "security.W004" not in out and "security.W008" not in out, out


def test_a_request_through_the_tls_proxy_gets_hsts_and_plain_http_is_redirected(tmp_path):
    result = _run(["-c", PROBE], _env(tmp_path, {**HTTPS_ENV, "PROBE_PLAIN_URL": "/leaderboard/"}))
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["secure_status"] == 200 and seen["hsts"] == "max-age=31536000"
    assert seen["plain_status"] == 301 and seen["plain_location"] == "https://localhost/leaderboard/"
    # the proxy's health check over plain HTTP is answered, without HSTS (not a secure request)
    assert seen["ping_status"] == 200 and seen["ping_hsts"] is None


def test_plain_http_by_default_as_scripts_run_sh_serves_it(tmp_path):
    # a plain request to a URL that needs no database nor collected static files (this process has neither)
    result = _run(["-c", PROBE], _env(tmp_path, {"PROBE_PLAIN_URL": "/api/v1/no-such-endpoint"}))
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["plain_status"] != 301 and seen["hsts"] is None
    assert 'DJANGO_SECURE_SSL_REDIRECT="${DJANGO_SECURE_SSL_REDIRECT:-0}"' in (ROOT / "scripts/run.sh").read_text()
