"""The daily quota holds under concurrency: 30 simultaneous API uploads against a quota of 5 store 5.

Real HTTP against a live server (one thread per request, each with its own database connection);
on PostgreSQL (CI) the user's row lock serialises the uploads, on SQLite the IMMEDIATE transactions do.
"""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request

import pytest
from django.contrib.auth.models import User
from django.core.servers.basehttp import ThreadedWSGIServer
from django.test.testcases import LiveServerThread, _StaticFilesHandler

from accounts.services import api_token_create
from catalog.models import Evaluation
from submissions.models import PredictionSubmission

from submissions_support import demo_release_create, predictions_bytes

UPLOADS = 30
QUOTA = 5


class _Server(ThreadedWSGIServer):
    # the test server's listen backlog is 10: thirty connections at once would overflow it and be
    # reset by the kernel before Django saw them (a production server listens with a far larger one)
    request_queue_size = 128


class _ServerThread(LiveServerThread):
    server_class = _Server


@pytest.fixture
def server():
    thread = _ServerThread("127.0.0.1", _StaticFilesHandler)
    thread.daemon = True
    thread.start()
    thread.is_ready.wait()
    if thread.error:
        raise thread.error
    yield f"http://127.0.0.1:{thread.port}"
    thread.terminate()
    thread.join()


@pytest.mark.django_db(transaction=True)
def test_thirty_concurrent_uploads_against_a_quota_of_five_store_exactly_five(server, settings):
    settings.RCB_SUBMISSIONS_PER_DAY = QUOTA
    settings.RQ_QUEUES = {name: {"URL": "redis://127.0.0.1:1/0"} for name in ("default", "scoring", "contributions")}
    demo_release_create(papers=["rope"])
    user = User.objects.create_user("racer", "r@example.org", "pw-racer-123!")
    token = api_token_create(user=user)[1]
    lines = predictions_bytes(papers=["rope"]).splitlines()
    # every upload a different file (same content would be a duplicate, answered with the first one)
    bodies = [b"\n".join(lines[:-1] + [json.dumps({**json.loads(lines[-1]), "completion": f"x = {n}"}).encode()])
              for n in range(UPLOADS)]
    start = threading.Barrier(UPLOADS)
    answers: list[tuple[int, dict]] = []
    lock = threading.Lock()

    def upload(body: bytes) -> None:
        request = urllib.request.Request(
            f"{server}/api/v1/submissions?model_name=Racer&allow_partial=1", data=body, method="POST",
            headers={"Authorization": f"Token {token}", "Content-Type": "application/x-ndjson"},
        )
        start.wait(30)
        try:
            with urllib.request.urlopen(request, timeout=120) as resp:
                answer = (resp.status, json.loads(resp.read()))
        except urllib.error.HTTPError as exc:
            answer = (exc.code, json.loads(exc.read() or b"{}"))
        except Exception as exc:  # noqa: BLE001 - recorded, so the assertion shows what went wrong
            answer = (0, {"error": repr(exc)})
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=upload, args=(body,)) for body in bodies]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    statuses = sorted(code for code, _ in answers)
    assert len(answers) == UPLOADS and 0 not in statuses, answers
    assert statuses.count(201) == QUOTA and statuses.count(429) == UPLOADS - QUOTA, statuses
    assert all("daily quota" in body["error"] for code, body in answers if code == 429)
    assert PredictionSubmission.objects.filter(user=user).count() == QUOTA
    assert Evaluation.objects.filter(submission__user=user).count() == QUOTA
