"""``python -m benchmark_core submit``: upload predictions to a ResearchCodeBench Hub site; ``run-here``:
have the site ask a model's endpoint itself (an evaluation "run here") and follow it like ``submit --wait``.

Standard library only (urllib), so it runs wherever the engine runs. Exit codes: 0 accepted
(with ``--wait``: scored to the end), 1 rejected, failed or cancelled, 2 usage or connection
problem, 3 ``--wait`` gave up after ``--timeout`` seconds.
"""
from __future__ import annotations

import argparse
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, TextIO

__all__ = ["add_submit_parser", "cmd_submit", "add_run_here_parser", "cmd_run_here", "submission_upload", "submission_status", "submission_action",
           "SubmitError"]

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TIMEOUT = 0, 1, 2, 3
TERMINAL = ("finished", "failed", "cancelled")
USER_AGENT = "benchmark_core-submit/1"


class SubmitError(Exception):
    def __init__(self, message: str, *, status: int | None = None, problems: list[dict] | None = None,
                 payload: dict | None = None):
        super().__init__(message)
        self.status = status
        self.problems = problems or []
        self.payload = payload or {}


def add_submit_parser(sub: Any) -> None:
    p = sub.add_parser("submit", help="upload a predictions file to a ResearchCodeBench Hub site for scoring")
    p.add_argument("file", metavar="FILE", help="predictions, one JSON object per line")
    p.add_argument("--url", required=True, help="the site, e.g. https://rcb.example.org")
    p.add_argument("--token", default=os.environ.get("RCB_TOKEN"), help="API token (default: $RCB_TOKEN)")
    p.add_argument("--model-name", required=True)
    p.add_argument("--organisation", default="")
    p.add_argument("--open-weights", action="store_true")
    p.add_argument("--knowledge-cutoff", default="", help="YYYY, YYYY-MM or YYYY-MM-DD")
    p.add_argument("--link", default="", help="model card or paper URL")
    p.add_argument("--release", default="", help="release slug (default: the site's default release)")
    p.add_argument("--without-paper", action="store_true", help="the prompts left the paper text out")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--run-card", metavar="PATH",
                   help="run card written by 'generate' (default: the one beside FILE, when there is one); its "
                        "decoding, samples, tokens and cost are shown on the site")
    p.add_argument("--no-run-card", action="store_true", help="do not send the run card beside FILE")
    p.add_argument("--publish", action="store_true", help="publish on the leaderboard as soon as scoring finishes")
    p.add_argument("--complete-only", action="store_true",
                   help="refuse to send a file that leaves snippets of the release without a prediction")
    p.add_argument("--wait", action="store_true", help="follow the scoring until it ends; exit 0 only when finished")
    p.add_argument("--poll", type=float, default=3.0, help="seconds between progress checks (default: 3)")
    p.add_argument("--timeout", type=float, default=0.0, help="give up waiting after S seconds (default: never)")


def _request(url: str, *, token: str, data: bytes | None = None, timeout: float = 300.0,
             content_type: str = "application/x-ndjson") -> dict:
    headers = {"Authorization": f"Token {token}", "Accept": "application/json", "User-Agent": USER_AGENT}
    if data is not None:
        headers["Content-Type"] = content_type
    req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", "replace")
        try:
            payload = json.loads(body)
            message, problems = str(payload.get("error") or body), payload.get("problems") or []
        except ValueError:
            message, problems, payload = body.strip()[:500] or exc.reason, [], {}
        raise SubmitError(message, status=exc.code, problems=problems,
                          payload=payload if isinstance(payload, dict) else {}) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SubmitError(f"cannot reach {url}: {reason}") from None
    except ValueError as exc:
        raise SubmitError(f"the site answered something that is not JSON: {exc}") from None


def submission_upload(*, url: str, token: str, data: bytes, meta: dict[str, Any], file_name: str) -> dict:
    query = {k: ("1" if v is True else v) for k, v in meta.items() if v not in (None, "", False)}
    query["file_name"] = file_name
    endpoint = url.rstrip("/") + "/api/v1/submissions?" + urllib.parse.urlencode(query)
    return _request(endpoint, token=token, data=data)


def submission_status(*, status_url: str, token: str) -> dict:
    return _request(status_url, token=token, timeout=60)


def submission_action(*, url: str, token: str, submission_id: int, action: str) -> dict:
    """POST publish or withdraw for a submission of the token's owner."""
    endpoint = f"{url.rstrip('/')}/api/v1/submissions/{int(submission_id)}/{action}"
    return _request(endpoint, token=token, data=b"")


def _progress_line(payload: dict) -> str:
    p = payload.get("progress") or {}
    done, total = p.get("done", 0), p.get("total", 0)
    width = 30
    filled = int(width * done / total) if total else 0
    return f"[{'#' * filled}{'.' * (width - filled)}] {done}/{total} snippets ({p.get('percent', 0.0)} %) {payload.get('status')}"


def _wait(payload: dict, *, token: str, poll: float, timeout: float, out: TextIO, err: TextIO) -> int:
    started = time.monotonic()
    last = None
    failures = 0
    while True:
        line = _progress_line(payload)
        if line != last:
            print(line, file=out, flush=True)
            if payload.get("status") == "waiting":  # not the model's fault: the site's operators repair it
                print(f"waiting for an environment repair on the site: {payload.get('failure_reason') or '?'}",
                      file=err, flush=True)
            last = line
        status = payload.get("status")
        if status in TERMINAL:
            break
        if timeout and time.monotonic() - started > timeout:
            print(f"still {status} after {timeout:.0f}s; stopped waiting (follow it at {payload.get('url')})", file=err)
            return EXIT_TIMEOUT
        time.sleep(poll)
        try:
            payload = submission_status(status_url=payload["status_url"], token=token)
            failures = 0
        except SubmitError as exc:
            if exc.status is not None and exc.status < 500:
                print(f"error: {exc}", file=err)
                return EXIT_FAILED
            failures += 1  # the site restarts or a proxy hiccups: keep following, slower
            print(f"warning: {exc} (retrying)", file=err)
            time.sleep(min(60.0, poll * 2**failures))
    if payload["status"] == "finished":
        result = payload.get("result") or {}
        rate, plain = result.get("scaled_pass_rate"), result.get("pass_rate")
        if rate is not None:
            print(f"finished: scaled pass rate {rate:.2f} %, pass rate {plain:.2f} %", file=out)
        else:
            print("finished", file=out)
        coverage = result.get("coverage")
        if coverage is not None and coverage < 100:
            print(f"coverage {coverage:.1f} % of the release's snippets", file=out)
        reason = result.get("unranked_reason")
        if reason:  # a flag, missing snippets, ...: shown on the leaderboard once published, not ranked
            print(f"shown, not ranked: {reason}", file=out)
        if payload.get("published"):
            print("published on the leaderboard" + (" (not ranked until the reason above is resolved)" if reason
                                                    else ""), file=out)
        return EXIT_OK
    reason = payload.get("failure_reason") or ""
    print(f"{payload['status']}{': ' + reason if reason else ''}", file=err)
    return EXIT_FAILED


def _run_card(args: argparse.Namespace, path: Path) -> dict | None:
    """The public part of the run card to send with the file (None: no card)."""
    from .generate import card_path, card_public

    if args.no_run_card:
        return None
    card_file = Path(args.run_card) if args.run_card else card_path(path)
    if not card_file.exists():
        if args.run_card:
            raise ValueError(f"cannot read the run card {card_file}")
        return None
    try:
        return card_public(json.loads(card_file.read_text(encoding="utf-8")))
    except ValueError as exc:  # RunCardError and JSON errors alike
        raise ValueError(f"{card_file} is not a run card: {exc}") from None


def _meta_from_card(meta: dict[str, Any], card: dict) -> None:
    """Settings the card records fill what the command line left out; a contradiction is refused."""
    decoding = card.get("decoding") or {}
    for name in ("temperature", "top_p", "max_tokens"):
        given, recorded = meta.get(name), decoding.get(name)
        if given is not None and recorded is not None and float(given) != float(recorded):
            raise ValueError(f"--{name.replace('_', '-')} {given} but the run card records {recorded}")
        if given is None and recorded is not None:
            meta[name] = recorded
    if "with_paper" in card:
        if meta.get("without_paper") and card["with_paper"]:
            raise ValueError("--without-paper but the run card records prompts with the paper")
        meta["without_paper"] = not card["with_paper"]
    meta["run_card"] = json.dumps(card, separators=(",", ":"), sort_keys=True)


def cmd_submit(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.token:
        print("error: give --token or set RCB_TOKEN (create a token on your profile page)", file=err)
        return EXIT_USAGE
    path = Path(args.file)
    try:
        data = path.read_bytes()
    except OSError as exc:
        print(f"error: cannot read {args.file}: {exc.strerror}", file=err)
        return EXIT_USAGE
    meta = {
        "model_name": args.model_name,
        "organisation": args.organisation,
        "open_weights": args.open_weights,
        "knowledge_cutoff": args.knowledge_cutoff,
        "link": args.link,
        "release": args.release,
        "without_paper": args.without_paper,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_tokens": args.max_tokens,
        "publish": args.publish,
    }
    try:
        card = _run_card(args, path)
        if card is not None:
            _meta_from_card(meta, card)
    except ValueError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_USAGE
    try:
        try:
            payload = submission_upload(url=args.url, token=args.token, data=data, meta=meta, file_name=path.name)
        except SubmitError as exc:
            if exc.status != 409 or "coverage" not in exc.payload:
                raise
            # the site stored nothing and says how much of the release the file predicts
            print(f"warning: {exc}", file=err, flush=True)
            missing = exc.payload["coverage"].get("missing_snippets") or []
            for m in missing[:20]:
                print(f"  no prediction: {m.get('paper')}/{m.get('file')}: {m.get('snippet')}", file=err)
            if len(missing) > 20:
                print(f"  ... and {len(missing) - 20} more", file=err)
            if args.complete_only:
                print("not sent (--complete-only): add the missing predictions", file=err)
                return EXIT_FAILED
            print("sending it anyway (use --complete-only to refuse partial files)", file=err, flush=True)
            payload = submission_upload(url=args.url, token=args.token, data=data,
                                        meta={**meta, "allow_partial": True}, file_name=path.name)
    except SubmitError as exc:
        print(f"error: {exc}", file=err)
        for problem in exc.problems:
            print(f"{args.file}:{problem.get('line')}: {problem.get('message')}", file=err)
        return EXIT_USAGE if exc.status is None else EXIT_FAILED
    note = " (identical to an earlier upload: the existing submission)" if payload.get("duplicate") else ""
    print(f"submission {payload['id']} {payload['status']}{note}", file=out)
    if payload.get("duplicate_note"):
        print(payload["duplicate_note"], file=err)
    print(f"status: {payload['status_url']}", file=out)
    print(f"page: {payload['url']}", file=out, flush=True)
    if args.publish and payload.get("duplicate") and not (payload.get("published") or payload.get("publish_when_finished")):
        # the earlier upload was sent without --publish: ask for it now
        try:
            payload = {**payload, **submission_action(url=args.url, token=args.token, submission_id=payload["id"],
                                                      action="publish")}
        except SubmitError as exc:
            print(f"error: could not publish: {exc}", file=err)
            return EXIT_FAILED
    if args.publish:
        print("it will be published when scoring finishes" if not payload.get("published") else "published", file=out)
    if not args.wait:
        return EXIT_OK
    return _wait(payload, token=args.token, poll=args.poll, timeout=args.timeout, out=out, err=err)


# --------------------------------------------------------------------------- run-here
def add_run_here_parser(sub: Any) -> None:
    p = sub.add_parser("run-here", help="have a ResearchCodeBench Hub site evaluate a model's endpoint itself "
                                        "(the result carries the 'run here' badge); follows it to its end")
    p.add_argument("--url", required=True, help="the site, e.g. https://rcb.example.org")
    p.add_argument("--token", default=os.environ.get("RCB_TOKEN"), help="API token (default: $RCB_TOKEN)")
    p.add_argument("--model-name", required=True, help="as shown on the leaderboard")
    p.add_argument("--base-url", required=True, help="the model's OpenAI-compatible endpoint, reachable by the site")
    p.add_argument("--model", required=True, help="the model as the endpoint knows it")
    p.add_argument("--api-key-env", metavar="VAR", help="environment variable holding the endpoint's API key "
                                                        "(sent to the site for this run only; default: none)")
    p.add_argument("--release", default="", help="release slug (default: the site's default release)")
    p.add_argument("--samples", type=int, default=1)
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--without-paper", action="store_true", help="leave the paper text out of the prompts")
    p.add_argument("--price-in", type=float, metavar="USD", help="USD per million input tokens (for the cost)")
    p.add_argument("--price-out", type=float, metavar="USD", help="USD per million output tokens")
    p.add_argument("--max-cost", type=float, metavar="USD", help="stop (and refuse up front) above this cost")
    p.add_argument("--no-wait", action="store_true", help="print the run's id and status URL, do not follow it")
    p.add_argument("--poll", type=float, default=3.0, help="seconds between progress checks (default: 3)")
    p.add_argument("--timeout", type=float, default=0.0, help="give up waiting after S seconds (default: never)")


RUN_TERMINAL = ("finished", "failed", "cancelled")


def _run_line(payload: dict) -> str:
    p = payload.get("progress") or {}
    scoring = p.get("scoring") or {}
    cost = f", ${p['cost_usd']:.4f}" if p.get("cost_usd") is not None else ""
    scored = f"; scored {scoring.get('done', 0)}/{scoring.get('total', 0)}" if scoring else ""
    return (f"{payload.get('status')}: {p.get('answers', 0)}/{p.get('expected', 0)} answers, "
            f"{p.get('tokens_in', 0)} tokens in / {p.get('tokens_out', 0)} out{cost}{scored}")


def cmd_run_here(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    if not args.token:
        print("error: an API token is needed (--token or $RCB_TOKEN)", file=err)
        return EXIT_USAGE
    body: dict[str, Any] = {"model_name": args.model_name, "base_url": args.base_url, "model": args.model,
                            "samples": args.samples, "with_paper": not args.without_paper}
    if args.api_key_env:
        if not os.environ.get(args.api_key_env):
            print(f"error: --api-key-env {args.api_key_env}: that variable is not set", file=err)
            return EXIT_USAGE
        body["api_key"] = os.environ[args.api_key_env]
    for name, value in (("release", args.release), ("temperature", args.temperature), ("top_p", args.top_p),
                        ("max_tokens", args.max_tokens), ("seed", args.seed), ("price_in", args.price_in),
                        ("price_out", args.price_out), ("max_cost_usd", args.max_cost)):
        if value not in (None, ""):
            body[name] = value
    try:
        payload = _request(args.url.rstrip("/") + "/api/v1/runs", token=args.token,
                           data=json.dumps(body).encode(), content_type="application/json")
    except SubmitError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_FAILED if exc.status is not None else EXIT_USAGE
    print(f"run {payload['id']} {payload['status']}; status: {payload['status_url']}; page: {payload['url']}",
          file=out, flush=True)
    if args.no_wait:
        return EXIT_OK
    started, last, failures = time.monotonic(), None, 0
    while payload.get("status") not in RUN_TERMINAL:
        if args.timeout and time.monotonic() - started > args.timeout:
            print(f"still {payload.get('status')} after {args.timeout:.0f}s; stopped waiting", file=err)
            return EXIT_TIMEOUT
        time.sleep(args.poll)
        try:
            payload = _request(payload["status_url"], token=args.token, timeout=60)
            failures = 0
        except SubmitError as exc:
            if exc.status is not None and exc.status < 500:
                print(f"error: {exc}", file=err)
                return EXIT_FAILED
            failures += 1
            print(f"warning: {exc} (retrying)", file=err)
            time.sleep(min(60.0, args.poll * 2**failures))
            continue
        line = _run_line(payload)
        if line != last:
            print(line, file=out, flush=True)
            last = line
    result = payload.get("result") or {}
    if payload["status"] == "finished" and result.get("scaled_pass_rate") is not None:
        print(f"finished: scaled pass rate {result['scaled_pass_rate']:.2f} %, pass rate "
              f"{result['pass_rate']:.2f} % (run here)", file=out)
        return EXIT_OK
    print(f"{payload['status']}{': ' + payload['error'] if payload.get('error') else ''}", file=err)
    return EXIT_OK if payload["status"] == "finished" else EXIT_FAILED
