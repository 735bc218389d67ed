"""Turn tasks into predictions with any OpenAI-compatible chat-completions endpoint.

Every answer is appended to the output (and flushed) the moment it arrives, so a crash, Ctrl-C
or SIGKILL loses at most the requests in flight; running the same command again asks only for
the (paper, snippet, sample) lines the file lacks. A run card (``<output>.card.json`` without the
``.jsonl``) beside the output records what produced it: model, endpoint host, decoding, prompt
version, source hash, counts, tokens, cost, wall time and errors; never the API key.
"""
from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import fcntl
import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TextIO

from . import __version__
from .hashing import folder_hash, release_hash
from .masking import PROMPT_VERSION, task_record
from .problemset import ProblemSet

__all__ = [
    "GenerateError", "GenerateOptions", "GenerateOutcome", "GenTask", "Progress", "STOPPED", "card_path", "generate",
    "problemset_hash", "task_from_row", "tasks_from_problemset", "tasks_from_site", "predictions_read", "card_public", "card_parse", "RunCardError",
]

CARD_VERSION = 1
#: the outcome's ``fatal`` when the caller's ``stop()`` ended the run
STOPPED = "stopped on request"
USER_AGENT = f"benchmark_core-generate/{__version__}"
MAX_RETRY_AFTER = 600.0  # a server asking for more than ten minutes is waited on for ten
_CARD_EVERY = 2.0  # seconds between card rewrites during a run


class GenerateError(Exception):
    """A stop the user must act on (bad key, unknown model, unusable output or source)."""


@dataclass(frozen=True)
class GenTask:
    paper: str
    file: str
    snippet: str
    prompt: str
    prompt_version: str = PROMPT_VERSION

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.paper, self.file, self.snippet)


@dataclass(frozen=True)
class GenerateOptions:
    base_url: str
    model: str
    api_key: str = "EMPTY"  # local servers (vLLM, Ollama) accept any key; the SDK wants one
    samples: int = 1
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    seed: int | None = None
    with_paper: bool = True
    concurrency: int = 4
    timeout: float = 600.0
    price_in: float | None = None  # USD per million input tokens
    price_out: float | None = None
    max_retries: int = 8
    backoff_base: float = 1.0
    backoff_cap: float = 60.0
    # a site calling users' endpoints turns redirects off: a redirect could lead to its own network
    follow_redirects: bool = True

    def decoding(self) -> dict[str, Any]:
        """Decoding settings as sent (unset ones are the server's defaults and say so)."""
        return {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens, "seed": self.seed}


@dataclass
class GenerateOutcome:
    card: dict
    written: int  # answers written by this run
    skipped: int  # answers already in the file
    failed: list[dict] = field(default_factory=list)  # {paper, file, snippet, samples, error}
    fatal: str | None = None  # 401 / 404 / ... : the run stopped


# --------------------------------------------------------------------------- tasks
def tasks_from_problemset(pset: ProblemSet, *, with_paper: bool) -> list[GenTask]:
    """The tasks of a problem set, prompts exactly as the ``tasks`` command writes them."""
    return [task_from_row(task_record(paper, snip, with_paper=with_paper)) for paper, snip in pset.snippets]


def problemset_hash(pset: ProblemSet) -> str:
    """SHA-256 over the papers' content hashes (ids and files), in a stable order."""
    return release_hash((p.id, folder_hash(p.folder)) for p in pset.papers)


def task_from_row(row: dict) -> GenTask:
    return GenTask(row["paper"], row.get("file") or "", row["snippet"], row["prompt"],
                   row.get("prompt_version") or PROMPT_VERSION)


def tasks_from_site(*, url: str, release: str, with_paper: bool, papers: list[str] | None = None,
                    timeout: float = 120.0) -> tuple[list[GenTask], dict]:
    """Download a release's tasks (JSON lines, as ``tasks`` writes them) and its description."""
    base = url.rstrip("/")
    query = urllib.parse.urlencode({"without_paper": "1"} if not with_paper else {})
    # the download the release page offers (the rows ``tasks`` writes, built by the site from its copies)
    endpoint = f"{base}/releases/{urllib.parse.quote(release)}/tasks.jsonl" + (f"?{query}" if query else "")
    raw = _http_get(endpoint, timeout=timeout)
    tasks: list[GenTask] = []
    for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            task = task_from_row(row)
        except (ValueError, KeyError, TypeError) as exc:
            raise GenerateError(f"{endpoint}: line {number} is not a task ({exc})") from None
        if papers is None or task.paper in papers:
            tasks.append(task)
    info: dict[str, Any] = {"kind": "release", "site": base, "release": release, "hash": ""}
    try:
        listing = json.loads(_http_get(f"{base}/api/v1/releases", timeout=timeout))
        rows = listing.get("releases", listing) if isinstance(listing, dict) else listing
        for r in rows if isinstance(rows, list) else []:
            if isinstance(r, dict) and r.get("slug") == release:
                info["hash"] = r.get("content_hash") or ""
    except GenerateError:
        pass  # the hash is for the card; the tasks are what matter
    return tasks, info


def _http_get(url: str, *, timeout: float) -> bytes:
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, "Accept": "application/x-ndjson, application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read()
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8", "replace")
        try:
            body = str(json.loads(body).get("error") or body)
        except (ValueError, AttributeError):
            pass
        raise GenerateError(f"{url}: HTTP {exc.code}: {body.strip()[:300]}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise GenerateError(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None


# --------------------------------------------------------------------------- output file
def card_path(output: Path | str) -> Path:
    """``p.jsonl`` -> ``p.card.json`` (beside it)."""
    out = Path(output)
    stem = out.name[: -len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(stem + ".card.json")


def predictions_read(output: Path) -> list[dict]:
    """Lines already generated; a last line cut by a kill is dropped from the file (it was never whole)."""
    if not output.exists():
        return []
    data = output.read_bytes()
    rows: list[dict] = []
    good = 0  # bytes up to the end of the last complete line
    for number, raw in enumerate(data.split(b"\n"), start=1):
        end = good + len(raw) + 1
        last = end > len(data)
        if not raw.strip():
            good = min(end, len(data))
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
            if not isinstance(row, dict) or not {"paper", "snippet", "completion"} <= row.keys():
                raise ValueError("not a prediction")
        except (ValueError, UnicodeDecodeError) as exc:
            if last:  # an unfinished write: the answer is asked for again
                with output.open("r+b") as fh:
                    fh.truncate(good)
                break
            raise GenerateError(f"{output}:{number}: not a prediction line ({exc}); "
                                "fix or move the file, nothing was sent") from None
        if last:  # a whole object without its newline: complete it so the next append starts a line
            with output.open("ab") as fh:
                fh.write(b"\n")
        rows.append(row)
        good = min(end, len(data))
    return rows


def _line_key(row: dict) -> tuple[str, str, str, int]:
    return (row["paper"], row.get("file") or "", row["snippet"], int(row.get("sample", 0)))


def _host(base_url: str) -> str:
    parts = urllib.parse.urlsplit(base_url)
    return parts.netloc.rsplit("@", 1)[-1] or base_url  # never a user:password@ in the card


def _settings(options: GenerateOptions, source: dict) -> dict:
    """What must not change between the runs that fill one output file."""
    return {
        "model": options.model,
        "endpoint_host": _host(options.base_url),
        "decoding": options.decoding(),
        "with_paper": options.with_paper,
        "source_hash": source.get("hash", ""),
    }


def _card_compatible(old: dict, options: GenerateOptions, source: dict, prompt_version: str) -> list[str]:
    new = _settings(options, source)
    diffs = []
    for key, value in new.items():
        before = old.get("source", {}).get("hash", "") if key == "source_hash" else old.get(key)
        if before != value:
            diffs.append(f"{key}: {before!r} then, {value!r} now")
    if old.get("prompt_version") not in (None, prompt_version):
        diffs.append(f"prompt_version: {old.get('prompt_version')!r} then, {prompt_version!r} now")
    return diffs


def card_build(*, rows: list[dict], tasks: list[GenTask], options: GenerateOptions, source: dict,
               runs: list[dict], failed: list[dict]) -> dict:
    """The run card: settings, and counts/tokens/cost recomputed from the file's lines."""
    requests: dict[str, dict] = {}
    finish: dict[str, int] = {}
    for row in rows:
        finish[str(row.get("finish_reason"))] = finish.get(str(row.get("finish_reason")), 0) + 1
        rid = str(row.get("request") or id(row))
        requests.setdefault(rid, row.get("usage") or {})
    tokens_in = sum(int(u.get("prompt_tokens") or 0) for u in requests.values())
    tokens_out = sum(int(u.get("completion_tokens") or 0) for u in requests.values())
    cost = None
    if options.price_in is not None or options.price_out is not None:
        cost = round(tokens_in * (options.price_in or 0) / 1e6 + tokens_out * (options.price_out or 0) / 1e6, 6)
    errors: dict[str, int] = {}
    for run in runs:
        for kind, count in run.get("errors", {}).items():
            errors[kind] = errors.get(kind, 0) + count
    wanted = {(*t.key, s) for t in tasks for s in range(options.samples)}
    have = {_line_key(r) for r in rows}
    prompt_versions = sorted({t.prompt_version for t in tasks}) or [PROMPT_VERSION]
    return {
        "card_version": CARD_VERSION,
        "generator": f"benchmark_core {__version__}",
        "model": options.model,
        "endpoint_host": _host(options.base_url),
        "protocol": "openai-chat-completions",
        "decoding": options.decoding(),
        "samples": options.samples,
        "prompt_version": prompt_versions[0] if len(prompt_versions) == 1 else ",".join(prompt_versions),
        "with_paper": options.with_paper,
        "source": source,
        "counts": {
            "snippets": len(tasks),
            "expected": len(tasks) * options.samples,
            "answers": len(rows),
            "answered": len(have & wanted),
            "snippets_answered": len({k[:3] for k in have & wanted}),
            "failed": sum(len(f.get("samples", [])) for f in failed),
            "finish_reasons": dict(sorted(finish.items())),
        },
        "complete": wanted <= have,
        "requests": len(requests),
        "tokens": {"input": tokens_in, "output": tokens_out},
        "prices_usd_per_million": {"input": options.price_in, "output": options.price_out},
        "cost_usd": cost,
        "cost_per_snippet_usd": round(cost / len(tasks), 8) if cost is not None and tasks else None,
        "wall_seconds": round(sum(float(r.get("seconds", 0)) for r in runs), 2),
        "errors": dict(sorted(errors.items())),
        "failed": failed[:200],
        "runs": runs,
    }


#: the card as it travels with a submission: key -> expected type(s); nested dicts are listed below
_PUBLIC: dict[str, tuple[type, ...]] = {
    "card_version": (int,), "generator": (str,), "model": (str,), "endpoint_host": (str,), "protocol": (str,),
    "samples": (int,), "prompt_version": (str,), "with_paper": (bool,), "complete": (bool,), "requests": (int,),
    "cost_usd": (int, float), "cost_per_snippet_usd": (int, float), "wall_seconds": (int, float),
}
_PUBLIC_DICTS = {
    "decoding": ("temperature", "top_p", "max_tokens", "seed"),
    "tokens": ("input", "output"),
    "prices_usd_per_million": ("input", "output"),
    "counts": ("snippets", "expected", "answers", "answered", "snippets_answered", "failed"),
    "source": ("kind", "release", "hash"),
}


class RunCardError(ValueError):
    pass


def card_public(card: Any) -> dict:
    """The part of a run card a site keeps: known keys, checked types, short strings (never paths or keys)."""
    if not isinstance(card, dict):
        raise RunCardError("the run card must be a JSON object")
    out: dict[str, Any] = {}
    for key, types in _PUBLIC.items():
        value = card.get(key)
        if value is None:
            continue
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            raise RunCardError(f"run card: {key!r} must be {'/'.join(t.__name__ for t in types)}, got {value!r:.80}")
        out[key] = value[:200] if isinstance(value, str) else value
    for key, names in _PUBLIC_DICTS.items():
        value = card.get(key)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise RunCardError(f"run card: {key!r} must be an object")
        kept = {}
        for name in names:
            v = value.get(name)
            if v is None:
                continue
            if isinstance(v, str):
                kept[name] = v[:200]
            elif isinstance(v, (int, float)) and not isinstance(v, bool):
                kept[name] = v
            else:
                raise RunCardError(f"run card: {key}.{name} must be a number or text, got {v!r:.80}")
        out[key] = kept
    for key in ("errors", "finish_reasons"):
        value = card.get(key) if key == "errors" else (card.get("counts") or {}).get(key)
        if isinstance(value, dict):
            clean = {str(k)[:40]: v for k, v in list(value.items())[:30] if isinstance(v, int) and not isinstance(v, bool)}
            if key == "errors":
                out[key] = clean
            else:
                out.setdefault("counts", {})[key] = clean
    runs = card.get("runs")  # the runs' list on disk; their number once public (so this is idempotent)
    if isinstance(runs, list):
        out["runs"] = len(runs)
    elif isinstance(runs, int) and not isinstance(runs, bool):
        out["runs"] = runs
    return out


CARD_MAX_BYTES = 20_000  # a card from `generate` is well under 2 kB


def card_parse(raw: str | bytes) -> dict:
    """A run card as sent to a site (JSON text), reduced by ``card_public``; RunCardError says why not."""
    if len(raw) > CARD_MAX_BYTES:
        raise RunCardError(f"the run card is larger than {CARD_MAX_BYTES // 1000} kB")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RunCardError(f"not a run card: {exc}") from None
    return card_public(data)


def _card_write(path: Path, card: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(card, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    tmp.replace(path)  # a kill mid-write leaves the previous card, never half of one


# --------------------------------------------------------------------------- requests
class _Fatal(Exception):
    pass


class _NotSupported(Exception):
    """The server refused ``n`` > 1: ask for each sample separately."""


def _retry_after(exc: Exception) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    if headers is None:
        return None
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return float(ms) / 1000
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        when = email.utils.parsedate_to_datetime(value) if value else None
        if when is None:
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=dt.timezone.utc)
        return max(0.0, (when - dt.datetime.now(dt.timezone.utc)).total_seconds())


def _server_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict):
            return str(inner.get("message") or inner)
        return str(inner or body.get("message") or body)
    return str(getattr(exc, "message", None) or exc)


class Progress:
    """One line on a terminal: answers, rate, tokens, cost, retries."""

    def __init__(self, *, total: int, done: int, stream: TextIO | None, enabled: bool):
        self.total, self.done, self.start_done = total, done, done
        self.stream, self.enabled = stream, enabled and stream is not None and total > 0
        self.started = time.monotonic()
        self.tokens_in = self.tokens_out = self.retries = 0
        self.cost: float | None = None

    def update(self) -> None:
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / self.total) if self.total else width
        elapsed = max(time.monotonic() - self.started, 1e-6)
        rate = (self.done - self.start_done) / elapsed
        cost = f", ${self.cost:.4f}" if self.cost is not None else ""
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} answers, {rate:.2f}/s, "
            f"tokens {_k(self.tokens_in)} in / {_k(self.tokens_out)} out{cost}, {self.retries} retries "
        )
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _k(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


class _Run:
    """One invocation: a queue of (task, samples) jobs worked by a bounded pool of coroutines."""

    def __init__(self, *, tasks: list[GenTask], options: GenerateOptions, output: Path, source: dict,
                 rows: list[dict], runs: list[dict], progress: Progress, log: Callable[[str], None],
                 stop: Callable[[], bool] = lambda: False, on_answer: Callable[[Progress], None] | None = None):
        self.tasks, self.options, self.output, self.source = tasks, options, output, source
        self.stop, self.on_answer = stop, on_answer
        self.rows, self.previous_runs = rows, runs
        self.progress, self.log = progress, log
        self.errors: dict[str, int] = {}
        self.failed: list[dict] = []
        self.fatal: str | None = None
        self.interrupted = False  # a Ctrl-C came (``_sigint_noted``)
        self.written = 0
        self.attempts = 0  # HTTP requests sent, failed ones included
        self.answered = 0  # requests that got an answer
        self.n_supported: bool | None = None if options.samples > 1 else False
        self.started_at = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        self.started = time.monotonic()
        self.last_card = 0.0
        self.fh: Any = None

    # ---- bookkeeping
    def _count(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1

    def run_entry(self) -> dict:
        return {
            "started_at": self.started_at,
            "seconds": round(time.monotonic() - self.started, 2),
            "attempts": self.attempts,
            "answers": self.written,
            "errors": dict(sorted(self.errors.items())),
            **({"stopped": self.fatal} if self.fatal else {}),
        }

    def card(self) -> dict:
        return card_build(rows=self.rows, tasks=self.tasks, options=self.options, source=self.source,
                          runs=[*self.previous_runs, self.run_entry()], failed=self.failed)

    def card_save(self, *, force: bool = False) -> dict | None:
        now = time.monotonic()
        if not force and now - self.last_card < _CARD_EVERY:
            return None
        self.last_card = now
        card = self.card()
        _card_write(card_path(self.output), card)
        return card

    def _write(self, row: dict) -> None:
        # one write of one whole line, flushed: a kill after it keeps the answer, before it loses only it
        self.fh.write(json.dumps(row, ensure_ascii=False) + "\n")
        self.fh.flush()
        self.rows.append(row)
        self.written += 1
        self.progress.done += 1

    # ---- requests
    async def _create(self, client: Any, task: GenTask, n: int) -> Any:
        """One chat completion, retried on 429 / 5xx / timeouts / dropped connections."""
        import openai

        o = self.options
        kwargs: dict[str, Any] = {"model": o.model, "messages": [{"role": "user", "content": task.prompt}]}
        for name in ("temperature", "top_p", "max_tokens", "seed"):
            if getattr(o, name) is not None:
                kwargs[name] = getattr(o, name)
        if n > 1:
            kwargs["n"] = n
        attempt = 0
        while True:
            if self.fatal:
                raise _Fatal(self.fatal)
            if self.stop():  # asked to stop: no request more (not even a retry)
                raise _Fatal(STOPPED)
            wait: float | None = None
            try:
                self.attempts += 1
                return await client.chat.completions.create(**kwargs)
            except (openai.AuthenticationError, openai.PermissionDeniedError, openai.NotFoundError) as exc:
                raise _Fatal(f"HTTP {exc.status_code} from {_host(o.base_url)}: {_server_message(exc)}") from None
            except openai.APITimeoutError:
                kind, detail = "timeout", f"no answer within {o.timeout:g}s"
            except openai.APIConnectionError as exc:
                kind, detail = "connection", str(exc.__cause__ or exc)
            except openai.APIStatusError as exc:
                status = exc.status_code
                if status == 429:
                    kind = "rate_limited"
                elif status >= 500:
                    kind = f"http_{status}"
                elif status in (408, 409):
                    kind = f"http_{status}"
                elif n > 1 and status in (400, 422):
                    raise _NotSupported(_server_message(exc)) from None
                else:
                    self._count(f"http_{status}")
                    raise RuntimeError(f"HTTP {status}: {_server_message(exc)}") from None
                wait, detail = _retry_after(exc), f"HTTP {status}: {_server_message(exc)}"
            self._count(kind)
            if attempt >= o.max_retries:
                if not self.answered:  # not one answer yet, anywhere: the endpoint is down or wrong
                    raise _Fatal(f"{_host(o.base_url)} gave no answer after {attempt + 1} attempts ({detail})")
                raise RuntimeError(f"gave up after {attempt + 1} attempts (last: {kind}: {detail})")
            if wait is None:  # exponential back-off with full jitter
                wait = random.uniform(0, min(o.backoff_cap, o.backoff_base * 2**attempt))
            else:  # the server said when: honour it, with a little jitter so the pool does not return at once
                wait = min(wait, MAX_RETRY_AFTER) * random.uniform(1.0, 1.1)
            attempt += 1
            self.progress.retries += 1
            self.progress.update()
            await asyncio.sleep(wait)

    async def _job(self, client: Any, task: GenTask, samples: list[int], queue: asyncio.Queue) -> None:
        n = len(samples) if self.n_supported is not False and len(samples) > 1 else 1
        began = time.monotonic()
        try:
            response = await self._create(client, task, n)
        except _NotSupported as exc:
            if self.n_supported is None:
                self.log(f"the server refused n={n} ({exc}); asking for each sample separately")
            self.n_supported = False
            for s in samples:
                queue.put_nowait((task, [s]))
            return
        except _Fatal as exc:
            self.fatal = self.fatal or str(exc)
            return
        except Exception as exc:  # a request that cannot succeed: the others go on, the card lists it
            self.failed.append({"paper": task.paper, "file": task.file, "snippet": task.snippet,
                                "samples": samples, "error": str(exc)[:300]})
            return
        choices = sorted(response.choices or [], key=lambda c: c.index)
        if not choices:  # nothing to keep: say so rather than lose the sample silently
            self.failed.append({"paper": task.paper, "file": task.file, "snippet": task.snippet,
                                "samples": samples, "error": "the answer held no choices"})
            return
        if n > 1:
            honoured = len(choices) >= n
            if not honoured and self.n_supported is not False:  # the server ignores n: one request per sample
                self.log(f"the server answered {len(choices)} of n={n} choices; asking for each sample separately")
            self.n_supported = honoured if self.n_supported is None else self.n_supported and honoured
        usage = response.usage.model_dump(exclude_none=True) if response.usage is not None else None
        if usage is None:
            self._count("no_usage")
        self.answered += 1
        rid = uuid.uuid4().hex[:16]
        seconds = round(time.monotonic() - began, 3)
        for sample, choice in zip(samples[: n], choices):
            self._write({
                "paper": task.paper, "file": task.file, "snippet": task.snippet, "sample": sample,
                "completion": (choice.message.content if choice.message else None) or "",
                "finish_reason": choice.finish_reason,
                "usage": usage, "request": rid, "model": response.model, "seconds": seconds,
            })
        if usage is not None:
            self.progress.tokens_in += int(usage.get("prompt_tokens") or 0)
            self.progress.tokens_out += int(usage.get("completion_tokens") or 0)
        if self.options.price_in is not None or self.options.price_out is not None:
            self.progress.cost = (self.progress.tokens_in * (self.options.price_in or 0)
                                  + self.progress.tokens_out * (self.options.price_out or 0)) / 1e6
        self.progress.update()
        self.card_save()
        if self.on_answer is not None:
            self.on_answer(self.progress)
        rest = samples[len(choices[:n]):]  # asked for separately
        for s in rest:
            queue.put_nowait((task, [s]))

    async def main(self, todo: list[tuple[GenTask, list[int]]]) -> None:
        from openai import AsyncOpenAI, DefaultAsyncHttpxClient

        o = self.options
        http = {} if o.follow_redirects else {"http_client": DefaultAsyncHttpxClient(follow_redirects=False)}
        client = AsyncOpenAI(base_url=o.base_url, api_key=o.api_key, max_retries=0, timeout=o.timeout,
                             default_headers={"User-Agent": USER_AGENT}, **http)
        queue: asyncio.Queue = asyncio.Queue()
        for job in todo:
            queue.put_nowait(job)

        async def worker() -> None:
            while not self.fatal and not self.interrupted:
                if self.stop():
                    self.fatal = STOPPED
                    return
                try:
                    task, samples = queue.get_nowait()
                except asyncio.QueueEmpty:
                    if busy[0] == 0:
                        return
                    await asyncio.sleep(0.02)  # a running job may still put split samples back
                    continue
                busy[0] += 1
                try:
                    await self._job(client, task, samples, queue)
                finally:
                    busy[0] -= 1

        busy = [0]
        restore = _sigint_noted(self)
        try:
            async with client:
                await asyncio.gather(*(worker() for _ in range(max(1, o.concurrency))))
        finally:
            restore()


def generate(*, tasks: list[GenTask], options: GenerateOptions, output: Path | str, source: dict,
             progress_stream: TextIO | None = None, progress: bool = False,
             log: Callable[[str], None] = lambda msg: None, stop: Callable[[], bool] = lambda: False,
             on_answer: Callable[[Progress], None] | None = None) -> GenerateOutcome:
    """Ask the endpoint for every (task, sample) the output lacks; append each answer as it arrives.

    ``stop()`` is asked before every request (retries included): once true, nothing more is sent and
    the outcome's ``fatal`` is ``STOPPED``. ``on_answer(progress)`` is called after each answer is
    written (answers, tokens and cost so far).
    """
    if options.samples < 1:
        raise GenerateError("--samples must be at least 1")
    if options.concurrency < 1:
        raise GenerateError("--concurrency must be at least 1")
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    with output.open("a", encoding="utf-8") as fh:
        try:  # two runs appending to one file would ask twice and write duplicates
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise GenerateError(f"another generate is writing to {output}; wait for it or use another -o") from None
        return _generate(tasks=tasks, options=options, output=output, fh=fh, source=source,
                         progress_stream=progress_stream, progress=progress, log=log, stop=stop, on_answer=on_answer)


def _generate(*, tasks: list[GenTask], options: GenerateOptions, output: Path, fh: TextIO, source: dict,
              progress_stream: TextIO | None, progress: bool, log: Callable[[str], None],
              stop: Callable[[], bool], on_answer: Callable[[Progress], None] | None) -> GenerateOutcome:
    rows = predictions_read(output)
    runs: list[dict] = []
    prompt_version = tasks[0].prompt_version if tasks else PROMPT_VERSION
    cpath = card_path(output)
    if cpath.exists():
        try:
            old = json.loads(cpath.read_text(encoding="utf-8"))
        except ValueError as exc:
            raise GenerateError(f"{cpath} is not a run card ({exc}); move it away to start afresh") from None
        diffs = _card_compatible(old, options, source, prompt_version) if rows else []
        if diffs:
            raise GenerateError(f"{output} was generated with other settings ({'; '.join(diffs)}); "
                                "write to another -o file (nothing was sent)")
        runs = list(old.get("runs") or []) if rows else []
    elif rows:
        log(f"{output} has {len(rows)} lines but no run card; they are kept and not asked for again")
    done = {_line_key(r) for r in rows}
    todo: list[tuple[GenTask, list[int]]] = []
    for task in tasks:
        missing = [s for s in range(options.samples) if (*task.key, s) not in done]
        if missing:
            todo.append((task, missing))
    wanted = {(*t.key, s) for t in tasks for s in range(options.samples)}
    skipped = len(done & wanted)
    bar = Progress(total=len(wanted), done=skipped, stream=progress_stream, enabled=progress)
    run = _Run(tasks=tasks, options=options, output=output, source=source, rows=rows, runs=runs,
               progress=bar, log=log, stop=stop, on_answer=on_answer)
    if not todo:  # nothing to ask for: no request, and the card stays as the runs left it
        if cpath.exists() and rows:
            card = json.loads(cpath.read_text(encoding="utf-8"))
        else:
            card = card_build(rows=rows, tasks=tasks, options=options, source=source, runs=runs, failed=[])
            _card_write(cpath, card)
        return GenerateOutcome(card=card, written=0, skipped=skipped)
    try:
        run.fh = fh
        bar.update()
        asyncio.run(run.main(todo))
        if run.interrupted:  # a Ctrl-C the HTTP client's own cancel scope absorbed: still an interruption
            raise KeyboardInterrupt
    finally:
        bar.finish()
        card = run.card_save(force=True)
    assert card is not None
    return GenerateOutcome(card=card, written=run.written, skipped=skipped, failed=run.failed, fatal=run.fatal)


def _sigint_noted(run: Any) -> Callable[[], None]:
    """Note a Ctrl-C on ``run`` (``run.interrupted``) before asyncio's own handler cancels the main
    task; return what puts the handler back. asyncio turns the cancel into KeyboardInterrupt only
    when the task ends cancelled, and the HTTP client's cancel scope (anyio) can take a cancel that
    lands inside a request for its own: the generation then went on to the end and exited 0. Outside
    the main thread (no signal handling there) nothing is noted."""
    import signal  # noqa: PLC0415
    import threading  # noqa: PLC0415

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = signal.getsignal(signal.SIGINT)

    def noted(signum, frame):
        run.interrupted = True
        if callable(previous):
            previous(signum, frame)

    signal.signal(signal.SIGINT, noted)
    return lambda: signal.signal(signal.SIGINT, previous)


# --------------------------------------------------------------------------- command line
EXIT_OK, EXIT_STOPPED, EXIT_USAGE, EXIT_INCOMPLETE = 0, 1, 2, 3


def _add_generate_options(p: Any) -> None:
    p.add_argument("--base-url", required=True, help="the endpoint, e.g. http://127.0.0.1:8000/v1 (vLLM) or "
                                                     "http://127.0.0.1:11434/v1 (Ollama)")
    p.add_argument("--model", required=True, help="model name as the endpoint knows it")
    p.add_argument("--api-key-env", metavar="VAR",
                   help="environment variable holding the API key, e.g. OPENAI_API_KEY (default: none is sent; "
                        "local servers need none)")
    p.add_argument("--samples", type=int, default=1, help="answers per snippet (sample 0..N-1; default 1)")
    p.add_argument("--temperature", type=float)
    p.add_argument("--top-p", type=float)
    p.add_argument("--max-tokens", type=int)
    p.add_argument("--seed", type=int)
    p.add_argument("--without-paper", action="store_true", help="leave the paper text out of the prompts (ablation)")
    p.add_argument("--papers", help="comma-separated paper ids (default: all)")
    p.add_argument("--concurrency", type=int, default=4, help="requests in flight at most (default 4)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per request before it is retried (default 600)")
    p.add_argument("--max-retries", type=int, default=8, help="retries per request on 429/5xx/timeouts (default 8)")
    p.add_argument("--price-in", type=float, metavar="USD", help="USD per million input tokens (for the cost)")
    p.add_argument("--price-out", type=float, metavar="USD", help="USD per million output tokens")
    p.add_argument("--quiet", action="store_true", help="no progress bar")


def add_generate_parser(sub: Any) -> None:
    p = sub.add_parser("generate", help="ask an OpenAI-compatible endpoint for every snippet's answer (resumable)")
    p.add_argument("pset", nargs="?", metavar="PSET_DIR", help="problem-set folder (or --url and --release)")
    p.add_argument("--url", help="a ResearchCodeBench Hub site to take the tasks from")
    p.add_argument("--release", help="release slug on that site")
    _add_generate_options(p)
    p.add_argument("-o", "--output", required=True, help="predictions.jsonl (appended to; the run card goes beside it)")


def add_run_parser(sub: Any) -> None:
    p = sub.add_parser("run", help="generate, score and report in one go (optionally submit)")
    p.add_argument("pset", metavar="PSET_DIR", help="problem-set folder")
    _add_generate_options(p)
    p.add_argument("-o", "--output", default="predictions.jsonl", help="predictions file (default predictions.jsonl)")
    p.add_argument("--results", help="results.json (default: beside the predictions, <name>.results.json)")
    p.add_argument("--backend", help="sandbox backend for scoring (as for score)")
    p.add_argument("--python", help="interpreter with the papers' dependencies (as for score)")
    p.add_argument("--workers", type=int, help="parallel test runs (as for score)")
    p.add_argument("--test-timeout", type=float, help="seconds per test run (score's --timeout)")
    p.add_argument("--submit-to", metavar="URL", help="upload the predictions and run card to this site")
    p.add_argument("--token", help="API token for --submit-to (default: $RCB_TOKEN)")
    p.add_argument("--release", default="", help="release slug on the site for --submit-to")


def _options(args: Any, env: dict[str, str]) -> GenerateOptions:
    # no key unless named: OPENAI_API_KEY is not sent to whatever --base-url points at by default
    api_key = "EMPTY"
    if args.api_key_env:
        if not env.get(args.api_key_env):
            raise GenerateError(f"--api-key-env {args.api_key_env}: that variable is not set")
        api_key = env[args.api_key_env]
    return GenerateOptions(
        base_url=args.base_url, model=args.model, api_key=api_key, samples=args.samples,
        temperature=args.temperature, top_p=args.top_p, max_tokens=args.max_tokens, seed=args.seed,
        with_paper=not args.without_paper, concurrency=args.concurrency, timeout=args.timeout,
        price_in=args.price_in, price_out=args.price_out, max_retries=args.max_retries,
    )


def _papers(value: str | None) -> list[str] | None:
    return [p.strip() for p in value.split(",") if p.strip()] if value else None


def generate_command(args: Any, out: TextIO, err: TextIO, *, env: dict[str, str]) -> int:
    """``generate``: the tasks, the endpoint, the output; prints where things stand."""
    from .problemset import ProblemSetError, load_problemset

    try:
        options = _options(args, env)
        if getattr(args, "url", None) or getattr(args, "release", None):
            if args.pset or not (args.url and args.release):
                print("error: give either PSET_DIR, or --url SITE with --release SLUG", file=err)
                return EXIT_USAGE
            tasks, source = tasks_from_site(url=args.url, release=args.release, with_paper=options.with_paper,
                                            papers=_papers(args.papers))
        elif args.pset:
            try:
                pset = load_problemset(args.pset, papers=_papers(args.papers))
            except ProblemSetError as exc:
                for problem in exc.problems:
                    print(problem, file=err)
                print(f"{len(exc.problems)} problem(s) in {args.pset}; nothing was sent", file=err)
                return EXIT_STOPPED
            tasks = tasks_from_problemset(pset, with_paper=options.with_paper)
            source = {"kind": "problem_set", "path": str(args.pset), "hash": problemset_hash(pset),
                      "papers": [p.id for p in pset.papers]}
        else:
            print("error: give either PSET_DIR, or --url SITE with --release SLUG", file=err)
            return EXIT_USAGE
        if not tasks:
            print("error: no tasks (check --papers)", file=err)
            return EXIT_USAGE
        outcome = generate(tasks=tasks, options=options, output=args.output, source=source, progress_stream=err,
                           progress=not args.quiet and err.isatty(), log=lambda m: print(f"note: {m}", file=err))
    except GenerateError as exc:
        print(f"error: {exc}", file=err)
        return EXIT_STOPPED
    except KeyboardInterrupt:
        print(f"\ninterrupted: the answers so far are in {args.output}; run the same command to go on", file=err)
        return 130
    card = outcome.card
    counts = card["counts"]
    cost = f", ${card['cost_usd']:.4f}" if card.get("cost_usd") is not None else ""
    print(f"{args.output}: {counts['answered']}/{counts['expected']} answers ({outcome.written} new, "
          f"{outcome.skipped} already there), {card['tokens']['input']} tokens in / "
          f"{card['tokens']['output']} out{cost}; run card {card_path(args.output)}", file=out)
    if outcome.fatal:
        print(f"error: stopped: {outcome.fatal}", file=err)
        if "HTTP 401" in outcome.fatal and not args.api_key_env:
            print("hint: no API key was sent; name the variable that holds it with --api-key-env VAR", file=err)
        return EXIT_STOPPED
    if outcome.failed:
        for f in outcome.failed[:20]:
            print(f"failed: {f['paper']}/{f['snippet']} samples {f['samples']}: {f['error']}", file=err)
        print(f"{len(outcome.failed)} request(s) failed; run the same command again to ask for them", file=err)
        return EXIT_INCOMPLETE
    if not card["complete"]:
        return EXIT_INCOMPLETE
    return EXIT_OK


def run_command(args: Any, out: TextIO, err: TextIO, *, env: dict[str, str], cli_main: Any) -> int:
    """``run``: generate, then score, then the report; then submit when asked (``cli_main`` runs those commands)."""

    args.url = None
    release, args.release = args.release, None
    code = generate_command(args, out, err, env=env)
    if code not in (EXIT_OK, EXIT_INCOMPLETE):  # stopped, bad usage or interrupted: nothing to score
        return code
    results = args.results or str(card_path(args.output)).replace(".card.json", ".results.json")
    score = ["score", args.pset, args.output, "-o", results]
    for flag, value in (("--papers", args.papers), ("--backend", args.backend), ("--python", args.python),
                        ("--workers", args.workers), ("--timeout", args.test_timeout)):
        if value is not None:
            score += [flag, str(value)]
    scored = cli_main(score, out, err)
    if scored != EXIT_OK:
        return scored
    if code != EXIT_OK:
        print("not every answer was generated: scored with the missing ones failed; not submitted", file=err)
        return code
    if args.submit_to:
        token = args.token or env.get("RCB_TOKEN", "")
        submit = ["submit", args.output, "--url", args.submit_to, "--model-name", args.model, "--token", token]
        if release:
            submit += ["--release", release]
        return cli_main(submit, out, err)
    return EXIT_OK
