"""The parts of a site in small that drills start for real: no Django here, only processes and sockets.

Used by the two-host drill (tests/test_two_hosts_drill.py), the fault drill (tests/test_fault_drill_real.py,
through tests/submissions_support.py) and the chaos soak (bench/chaos.py, tests/test_chaos_soak.py):

- ``RedisServer``: a redis-server of our own on a free port (optionally append-only, to survive a stop);
- ``PgCluster``: a PostgreSQL cluster of our own (``initdb`` + ``pg_ctl``, run as the ``postgres``
  user when we are root, since initdb refuses root), on its own port, restartable;
- ``S3Server``: an S3-compatible server, moto's server mode (``moto[server]``, requirements-dev.txt:
  maintained, pure Python, pip-installable from the ordinary index; no image or registry needed),
  behind a ``Forwarder`` listener that can *refuse* connections for a while (a bucket that is away);
- ``Forwarder``: TCP forwarders on an asyncio loop in a thread (the host side of a namespace's veth,
  or the refusing front of the bucket);
- ``Hosts``: worker "hosts": network namespaces of our own (``ip netns`` + a veth pair each), each
  reaching the services only over TCP through the forwarders, each worker in a mount namespace of
  its own with an empty var folder, its own paper cache (a small tmpfs) and the folders it must not
  see hidden under empty tmpfs mounts. Nothing is shared between hosts but those TCP ports.
"""
from __future__ import annotations

import asyncio
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], bool], *, timeout: float, what: str | Callable[[], str],
             interval: float = 0.2) -> None:
    """Wait until ``predicate()``; else fail saying ``what`` (a callable: evaluated then, e.g. for logs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")


def _pings(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


class RedisServer:
    """A redis-server of our own so a test may lose its data without touching others'.

    No persistence by default; with ``data_dir`` an append-only file there (fsync'd at every write,
    as a production Redis with ``--appendonly yes`` keeps its data over a stop), so ``outage`` can
    stop it and start it again on the same port with what it held.
    """

    def __init__(self, data_dir: Path | None = None, *, host: str = "127.0.0.1") -> None:
        self.port = free_port()
        self.host = host
        self.proc: subprocess.Popen | None = None
        self.data_dir = data_dir

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        keep = ["--appendonly", "no"]
        if self.data_dir is not None:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            keep = ["--dir", str(self.data_dir), "--appendonly", "yes", "--appendfsync", "always"]
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", self.host, "--save", "", *keep],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        import redis

        client = redis.Redis.from_url(self.url)
        wait_for(lambda: _pings(client), timeout=10, what="redis-server to start")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def restart(self) -> None:
        """Stop and start again: every key is gone, as after a crash of an unpersisted Redis."""
        self.stop()
        self.start()

    def outage(self, seconds: float) -> None:
        """Stop, stay away ``seconds``, start again on the same port (with its data if it keeps any)."""
        self.stop()
        time.sleep(seconds)
        self.start()


class PgCluster:
    """A PostgreSQL cluster of our own: ``initdb`` into ``data_dir``, served on its own port by ``pg_ctl``.

    Trust authentication on 127.0.0.1 only (a drill's throwaway cluster); ``fsync=off`` (a drill
    needs no durability against power loss, and the machine is busy). As root, initdb and the
    server run as the ``postgres`` user (initdb refuses root).
    """

    def __init__(self, *, user: str = "postgres") -> None:
        # a folder of its own in /tmp: the server's user must reach it (a test's tmp_path is root's, 0700)
        self.folder = Path(tempfile.mkdtemp(prefix="rcb-pg-"))
        self.data_dir = self.folder / "data"
        self.port = free_port()
        self.user = user
        self.log = self.folder / "postgres.log"

    def _as_owner(self, *cmd: str) -> list[str]:
        if os.geteuid() == 0:
            return ["runuser", "-u", self.user, "--", *cmd]
        return list(cmd)

    def _run(self, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(self._as_owner(*cmd), capture_output=True, text=True, check=check, cwd="/")

    def init(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            entry = pwd.getpwnam(self.user)
            for path in (self.data_dir, self.folder):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            self.log.touch()
            os.chown(self.log, entry.pw_uid, entry.pw_gid)
        made = self._run(shutil.which("initdb") or "initdb", "-D", str(self.data_dir), "-U", "postgres",
                         "--auth=trust", "--no-sync", "-E", "UTF8", check=False)
        if made.returncode != 0:
            raise RuntimeError(f"initdb failed: {made.stderr.strip()[-800:]}")

    def start(self) -> None:
        opts = (f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data_dir} -c fsync=off "
                "-c synchronous_commit=off -c full_page_writes=off -c max_connections=300")
        started = self._run(shutil.which("pg_ctl") or "pg_ctl", "-D", str(self.data_dir), "-l", str(self.log),
                            "-o", opts, "-w", "-t", "60", "start", check=False)
        if started.returncode != 0:
            raise RuntimeError(f"pg_ctl start failed: {started.stderr.strip()[-800:]}\n{self.log_tail()}")

    def stop(self, mode: str = "fast") -> None:
        self._run(shutil.which("pg_ctl") or "pg_ctl", "-D", str(self.data_dir), "-m", mode, "-w", "-t", "60",
                  "stop", check=False)

    def restart(self, *, down: float = 0.0) -> None:
        """Stop (every connection ends), stay down ``down`` seconds, start again on the same port."""
        self.stop()
        time.sleep(down)
        self.start()

    def remove(self) -> None:
        """Stop the server at once and delete the cluster."""
        self.stop(mode="immediate")
        shutil.rmtree(self.folder, ignore_errors=True)

    def url(self, db: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{db}"

    def createdb(self, name: str) -> None:
        made = self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres",
                         "-c", f'CREATE DATABASE "{name}"', check=False)
        if made.returncode != 0 and "already exists" not in made.stderr:
            raise RuntimeError(f"createdb {name} failed: {made.stderr.strip()}")

    def terminate_connections(self, db: str) -> int:
        """End every connection to ``db`` (``pg_terminate_backend``); how many there were."""
        out = self._run("psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", "postgres",
                        "-tAc", "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                f"WHERE datname = '{db}' AND pid <> pg_backend_pid()", check=False)
        return int(out.stdout.strip() or 0) if out.returncode == 0 else -1

    def log_tail(self, n: int = 2000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""


class Forwarder:
    """TCP forwarders on an asyncio loop in a thread; a listener can refuse connections for a while."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="drill-forwarder", daemon=True)
        self.thread.start()
        self.servers: dict[tuple[str, int], asyncio.AbstractServer] = {}
        self.targets: dict[tuple[str, int], tuple[str, int]] = {}
        self.open_writers: dict[tuple[str, int], set[asyncio.StreamWriter]] = {}

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    async def _start(self, key: tuple[str, int]) -> None:
        target = self.targets[key]
        writers = self.open_writers.setdefault(key, set())

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                up_reader, up_writer = await asyncio.open_connection(*target)
            except (OSError, asyncio.CancelledError):
                writer.close()
                return
            writers.update((writer, up_writer))
            try:
                await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer),
                                     return_exceptions=True)
            except asyncio.CancelledError:  # the forwarder closes: the connection ends with it
                pass
            finally:
                writers.discard(writer)
                writers.discard(up_writer)

        self.servers[key] = await asyncio.start_server(handle, key[0], key[1], reuse_address=True)

    def _call(self, coro) -> None:
        asyncio.run_coroutine_threadsafe(coro, self.loop).result(10)

    def listen(self, *, host: str, port: int, target: tuple[str, int]) -> None:
        key = (host, port)
        self.targets[key] = target
        self._call(self._start(key))

    def refuse(self, *, host: str, port: int) -> None:
        """Stop listening (new connections are refused) and cut the connections open through it."""
        key = (host, port)

        async def stop() -> None:
            server = self.servers.pop(key, None)
            if server is not None:
                server.close()
            for writer in list(self.open_writers.get(key, ())):
                writer.transport.abort()

        self._call(stop())

    def accept(self, *, host: str, port: int) -> None:
        """Listen again after ``refuse``."""
        self._call(self._start((host, port)))

    def close(self) -> None:
        async def stop() -> None:
            for server in self.servers.values():
                server.close()
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        self._call(stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class S3Server:
    """moto's S3-compatible server on a private port, reached through a front port that can refuse.

    ``endpoint`` (the front) is what the site's ``RCB_PAPER_S3_ENDPOINT_URL`` names; ``outage``
    makes it refuse every connection (and cut those open) for a while, as a bucket that is away.
    moto keeps its objects in memory: the server itself is never stopped during a drill.
    """

    REGION = "us-east-1"
    KEY, SECRET = "drill-key", "drill-secret"

    def __init__(self, log: Path, forwarder: Forwarder) -> None:
        self.port = free_port()
        self.front = free_port()
        self.forwarder = forwarder
        self.log = log
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.front}"

    def env(self, bucket: str, *, endpoint: str | None = None) -> dict[str, str]:
        """The settings of a site process whose papers storage is ``bucket`` here."""
        return {
            "RCB_PAPER_STORAGE": "s3", "RCB_PAPER_S3_BUCKET": bucket,
            "RCB_PAPER_S3_ENDPOINT_URL": endpoint or self.endpoint, "RCB_PAPER_S3_REGION": self.REGION,
            "RCB_PAPER_S3_PREFIX": "papers", "AWS_ACCESS_KEY_ID": self.KEY, "AWS_SECRET_ACCESS_KEY": self.SECRET,
            # a refusing bucket is reported after a few seconds, not after boto's default minute of retries
            "AWS_MAX_ATTEMPTS": "2", "AWS_RETRY_MODE": "standard",
        }

    def start(self) -> None:
        log = open(self.log, "wb")
        self.proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

        def up() -> bool:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return True
            except OSError:
                return False

        wait_for(up, timeout=60, what=f"moto's S3 server on port {self.port}")
        self.forwarder.listen(host="127.0.0.1", port=self.front, target=("127.0.0.1", self.port))

    def bucket_create(self, bucket: str) -> None:
        import boto3

        boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.port}", region_name=self.REGION,
                     aws_access_key_id=self.KEY, aws_secret_access_key=self.SECRET).create_bucket(Bucket=bucket)

    def keys(self, bucket: str) -> list[str]:
        import boto3

        client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{self.port}", region_name=self.REGION,
                              aws_access_key_id=self.KEY, aws_secret_access_key=self.SECRET)
        return [o["Key"] for o in client.list_objects_v2(Bucket=bucket).get("Contents", [])]

    def refuse(self) -> None:
        self.forwarder.refuse(host="127.0.0.1", port=self.front)

    def accept(self) -> None:
        self.forwarder.accept(host="127.0.0.1", port=self.front)

    def stop(self) -> None:
        if self.proc is not None:
            process_group_kill(self.proc)
            self.proc = None


def _reap(proc: subprocess.Popen) -> None:
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def process_group_kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Kill a process started with ``start_new_session`` with everything in its process group."""
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass
    _reap(proc)


def session_kill(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Kill a process started with ``start_new_session`` and everything of its session (process
    groups of its own included: RQ's work horses, a supervisor's workers)."""
    for pid in session_pids(proc.pid):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    _reap(proc)


def session_pids(sid: int) -> list[int]:
    """Every process of the session ``sid`` (a process started with ``start_new_session`` and all it started)."""
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[3]) == sid:  # the session id (fields after the command name: state, ppid, pgrp, session)
            pids.append(int(stat.parent.name))
    return pids


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def netns_problem() -> str:
    """Why worker hosts in network namespaces cannot be made here ('' when they can)."""
    if os.geteuid() != 0:
        return "worker hosts in network namespaces need root"
    for tool in ("ip", "unshare", "bwrap", "redis-server"):
        if shutil.which(tool) is None:
            return f"worker hosts need {tool!r}"
    probe = f"rcb-probe-{os.getpid()}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"'ip netns add' does not work here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return ""


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class Hosts:
    """Worker hosts: a network namespace each, reaching only the forwarded ports; close() removes them all.

    ``services`` maps each port a host may reach (on its veth's host-side address) to the local
    ``(address, port)`` it is forwarded to: the database, Redis, the bucket. ``hidden`` folders are
    covered by empty tmpfs mounts in each worker's mount namespace (the release folders, the demo,
    the web host's var/). Each host has its own var folder; its paper cache is a tmpfs of
    ``cache_mb`` MB of its own (so a drill can fill that disk).
    """

    def __init__(self, *, tmp: Path, count: int, services: dict[int, tuple[str, int]], hidden: list[Path],
                 cache_mb: int = 0, tag: str = "drill") -> None:
        self.tmp, self.count, self.services, self.hidden, self.cache_mb = tmp, count, services, hidden, cache_mb
        n = os.getpid() % 100000
        self.names = [f"rcb-{tag}{i}-{n}" for i in range(count)]
        self.veths = [f"rcb{tag[:2]}{i}v{n}"[:15] for i in range(count)]
        net = 16 + n % 200  # a /24 of 10.0.0.0/8 per run; a /30 per host
        third = {"drill": 77, "chaos": 78}.get(tag, 79)
        self.addrs = [(f"10.{net}.{third}.{4 * i + 1}", f"10.{net}.{third}.{4 * i + 2}") for i in range(count)]
        self.forwarder: Forwarder | None = None
        self.procs: dict[int, subprocess.Popen] = {}
        self.vars: list[Path] = []
        self.mounts: list[Path] = []

    def open(self) -> None:
        self.forwarder = Forwarder()
        for i, (ns, veth, (outer, inner)) in enumerate(zip(self.names, self.veths, self.addrs)):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # a leftover of a killed run
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", f"{veth}n")
            _ip("link", "set", f"{veth}n", "netns", ns)
            _ip("addr", "add", f"{outer}/30", "dev", veth)
            _ip("link", "set", veth, "up")
            _ip("-n", ns, "addr", "add", f"{inner}/30", "dev", f"{veth}n")
            _ip("-n", ns, "link", "set", f"{veth}n", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            # the host side forwards only these ports of its veth address to the local services
            for port, target in self.services.items():
                self.forwarder.listen(host=outer, port=port, target=target)
            var = self.tmp / f"host{i}" / "var"
            for sub in ("home", "cache", "tmp", "paper-cache"):
                (var / sub).mkdir(parents=True, exist_ok=True)
            if self.cache_mb:
                cache = var / "paper-cache"
                subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.cache_mb}m,mode=0755", f"rcb-cache{i}",
                                str(cache)], check=True, capture_output=True)
                self.mounts.append(cache)
            self.vars.append(var)

    def env(self, i: int, base: dict[str, str]) -> dict[str, str]:
        """The worker environment of host ``i``: ``base`` with its own folders."""
        var = self.vars[i]
        return {
            **base, "RCB_VAR_DIR": str(var), "RCB_PAPER_CACHE": str(var / "paper-cache"),
            "RCB_PSET_ROOT": str(var / "psets"), "RCB_REFERENCE_CACHE": str(var / "cache" / "references.sqlite3"),
            "RCB_MEDIA_ROOT": str(var / "media"), "RCB_PAPER_STORAGE_ROOT": str(var / "no-paper-store"),
            "RCB_GENERATION_DIR": str(var / "generation"),
            "HOME": str(var / "home"), "XDG_CACHE_HOME": str(var / "cache"), "TMPDIR": str(var / "tmp"),
        }

    def start(self, i: int, env: dict[str, str], command: list[str], *, log_name: str | None = None) -> subprocess.Popen:
        """Run ``command`` (a manage.py command line) as host ``i``'s worker, in its namespaces."""
        others = [self.tmp / f"host{j}" for j in range(self.count) if j != i]  # no host sees another's folders
        hide = "".join(f"mount -t tmpfs -o size=1m,mode=0700 rcb-hidden {shlex.quote(str(p))}; "
                       for p in [*self.hidden, *others] if p.is_dir())
        script = f"set -e; hostname {self.names[i]}; {hide}exec {shlex.join(command)}"
        log = open(self.tmp / (log_name or f"host{i}.log"), "ab")
        proc = subprocess.Popen(
            ["ip", "netns", "exec", self.names[i], "unshare", "--mount", "--propagation", "private", "--uts",
             "sh", "-c", script],
            cwd=ROOT, env=self.env(i, env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.procs[i] = proc
        return proc

    def outer(self, i: int) -> str:
        """Host ``i``'s view of the services: the host-side address of its veth."""
        return self.addrs[i][0]

    def logs(self, n: int = 3000) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-n:]}" for p in sorted(self.tmp.glob("host*.log")))

    def close(self) -> None:
        for proc in self.procs.values():
            for pid in session_pids(proc.pid):
                try:
                    os.kill(pid, signal.SIGCONT)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        if self.forwarder is not None:
            self.forwarder.close()
        for mount in self.mounts:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)
        for ns, veth in zip(self.names, self.veths):
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
