"""A real OpenAI-compatible chat-completions server on 127.0.0.1 for the generate tests.

It answers each prompt from a table (prompt -> answer text, e.g. the demo's reference code), can
fail on purpose (429 with Retry-After, 500, a dropped connection, a slow answer, 401), counts the
requests in flight, and records every answer it gave with the tokens it reported.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

from benchmark_core.masking import build_prompt
from benchmark_core.problemset import ProblemSet
from benchmark_core.runner import reference_code


def reference_answers(pset: ProblemSet, *, with_paper: bool = True) -> dict[str, str]:
    """Prompt -> an answer whose fenced block is the snippet's reference code."""
    table = {}
    for paper, snip in pset.snippets:
        code = "\n".join(reference_code(paper, snip))
        table[build_prompt(paper, snip, with_paper=with_paper)] = f"Here it is:\n```python\n{code}\n```\n"
    return table


def tokens(text: str) -> int:
    return max(1, len(text) // 4)


@dataclass
class ChatServer:
    answers: dict[str, str]
    # decide(number) -> None (answer) or one of "429", "500", "drop", "slow", "401"; number counts from 1
    decide: Callable[[int], str | None] = lambda number: None
    support_n: bool = True
    delay: float = 0.0  # seconds each answer takes (to measure concurrency, or to kill mid-run)
    slow_seconds: float = 5.0
    retry_after: str = "1"
    models: set[str] | None = None  # None: any model name is answered
    lock: threading.Lock = field(default_factory=threading.Lock)
    received: int = 0
    in_flight: int = 0
    max_in_flight: int = 0
    failures: dict[str, int] = field(default_factory=dict)
    given: list[dict] = field(default_factory=list)  # one per 200 answer: prompt, n, usage
    auth_seen: list[str] = field(default_factory=list)

    def start(self) -> "ChatServer":
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _send(self, status: int, payload: dict, headers: dict | None = None) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                request = json.loads(self.rfile.read(length) or b"{}")
                if self.path != "/v1/chat/completions":
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                if server.models is not None and request.get("model") not in server.models:
                    self._send(404, {"error": {"message": f"The model `{request.get('model')}` does not exist",
                                               "type": "invalid_request_error", "code": "model_not_found"}})
                    return
                with server.lock:
                    server.received += 1
                    number = server.received
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                    server.auth_seen.append(self.headers.get("Authorization", ""))
                try:
                    self._answer(number, request)
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def _answer(self, number: int, request: dict) -> None:
                action = server.decide(number)
                if action:
                    with server.lock:
                        server.failures[action] = server.failures.get(action, 0) + 1
                if action == "429":
                    self._send(429, {"error": {"message": "slow down", "type": "rate_limit"}},
                               {"Retry-After": server.retry_after})
                    return
                if action == "500":
                    self._send(500, {"error": {"message": "internal error", "type": "server_error"}})
                    return
                if action == "401":
                    self._send(401, {"error": {"message": "Incorrect API key provided: sk-te****", "type": "auth"}})
                    return
                if action == "drop":  # the connection dies before any answer
                    self.close_connection = True
                    try:
                        self.connection.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return
                if action == "slow":
                    time.sleep(server.slow_seconds)
                elif server.delay:
                    time.sleep(server.delay)
                prompt = request["messages"][-1]["content"]
                answer = server.answers.get(prompt, "```python\nraise RuntimeError('unknown prompt')\n```")
                n = int(request.get("n") or 1) if server.support_n else 1
                usage = {"prompt_tokens": tokens(prompt), "completion_tokens": tokens(answer) * n,
                         "total_tokens": tokens(prompt) + tokens(answer) * n}
                payload = {
                    "id": f"chatcmpl-{number}", "object": "chat.completion", "created": int(time.time()),
                    "model": request.get("model", "?"),
                    "choices": [{"index": i, "message": {"role": "assistant", "content": answer},
                                 "finish_reason": "stop"} for i in range(n)],
                    "usage": usage,
                }
                if action != "slow":
                    with server.lock:
                        server.given.append({"prompt": prompt, "n": n, "usage": usage, "request": request})
                self._send(200, payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
