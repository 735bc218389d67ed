"""One warm parent per environment (``--zygote``): the environment's modules imported once, a paper's
server forked from it per request. Standard library only; runs inside the sandbox."""
from __future__ import annotations

import argparse
import gc
import json
import os
import re
import selectors
import signal
import sys
import traceback

from .cleanup import _kill_until_gone, _proc_entries, _reap_any, remove_tree
from .common import _ID_RE, _THREAD_ENV, ARGS_PRELOAD, PROTOCOL, split_lines
from .launch import snapshot_prepare
from .runs import _Capture
from .scan import ALWAYS_PRELOAD, UNSAFE_TO_FORK, import_testing, parent_names, preload
from .server import Server


# --------------------------------------------------------------------------- one warm parent per environment
# ``--zygote``: the environment's modules (``--modules``: a paper's third-party imports and the
# submodules of them it names, torch and scipy.stats say, as the host read them: ``parent_names``)
# are imported once; then, per request, a paper's Server is forked from it and serves that paper as
# a standalone runner would (own work folder, own run uid block, its own imports on top). A paper that does not import
# everything the parent imported gets ``{"ok": false}`` (a fresh interpreter would not hold those
# modules): the host starts another parent or a standalone runner for it (``warm_client.parent_pick``).
#
# Two ways to reach it. bwrap (``--control-fd``): requests on a SOCK_SEQPACKET socket, each with two
# descriptors (the server's protocol socket and a stderr pipe) that the server uses directly.
# docker (``--mux``): the container has one stream, the parent's stdin/stdout; every line carries a
# tag before a tab — empty for the parent itself (JSON: ``{"op": "serve"|"close"|"kill", "re": id,
# "tag": T, ...}`` in, ``{"ready"...}``, ``{"re": id, "ok", "pid"|"why"}``, ``{"stderr": T, "data"}``,
# ``{"ended": T}`` out), else the tag of the paper server the line goes to or comes from (its protocol
# lines as they are). The parent relays; it runs no paper code and reads nothing a run wrote.
# When a server ends (or is killed) every process left with a uid of its block is killed; under
# ``--mux`` its paper folder and work folder are removed too.

_TAG_RE = re.compile(r"^[A-Za-z0-9]{1,64}$")


def _zygote_prepare(args: argparse.Namespace) -> tuple[list[str], str, tuple[bytes, bytes], tuple | None]:
    """Import the environment's modules once: (what was imported, why no paper can be served, what
    the imports printed, the snapshot of them every server brings up to date: ``snapshot_prepare``,
    taken once here rather than in every server)."""
    import threading

    for var in _THREAD_ENV:
        os.environ.setdefault(var, "1")
    threads = set(threading.enumerate())
    # named by the host (its scan of a paper, parent_names): never a module of this interpreter's
    # standard library, nor a submodule of one
    std = set(getattr(sys, "stdlib_module_names", ())) | set(sys.builtin_module_names)
    first = [m.strip() for m in (args.modules or "").split(",") if m.strip() and m.strip().split(".")[0] not in std]
    origin = args.papers
    wanted = [m for m in dict.fromkeys(first + ARGS_PRELOAD) if m.split(".")[0] not in UNSAFE_TO_FORK]
    with _Capture() as captured:
        preloaded, _failed = preload(wanted, origin)
        preload([m for m in ALWAYS_PRELOAD if m not in sys.modules], origin)
        import_testing()
    refused = ""
    extra = sorted(t.name for t in set(threading.enumerate()) - threads if t.is_alive())
    if [m for m in UNSAFE_TO_FORK if m in sys.modules]:
        refused = "a module unsafe to fork was imported"
    elif extra:
        refused = f"imports left threads running ({', '.join(extra)})"
    prepared = None
    if not refused:
        prepared = snapshot_prepare()
        gc.freeze()  # never walked by the servers' and runs' collections: no copy-on-write for it
    return preloaded, refused, captured.output, prepared


def _serve_refusal(request: dict, papers: str, preloaded: list[str], refused: str) -> tuple[str, str]:
    """(the paper's folder, why it cannot be served here: "" when it can)."""
    paper = os.path.realpath(str(request.get("paper") or ""))
    if refused:
        return paper, refused
    if not paper.startswith(papers + os.sep) or not os.path.isfile(os.path.join(paper, "paper2code_test.py")):
        return paper, f"{paper} is not a paper of this parent"
    if not _ID_RE.match(str(request.get("work") or "")):
        return paper, "bad work folder name"
    missing = sorted(set(preloaded) - set(parent_names(paper)))
    if missing:
        return paper, f"the paper does not import {', '.join(missing)} (the parent did)"
    return paper, ""


def _kill_uid_block(base: int) -> None:
    """Kill every process whose uid is in the run uid block starting at ``base`` (what a server that
    died or was killed left running)."""
    if base > 0:
        _kill_until_gone(lambda: [p for p, _pp, _g, _s, uid, st in _proc_entries()
                                  if base <= uid < base + 1000 and st != "Z"], _reap_any, rounds=50)


def zygote_serve(args: argparse.Namespace) -> int:
    if args.mux:
        # protocol lines go to a private copy of stdout; anything else printed lands on stderr
        out_fd = os.dup(1)
        os.dup2(2, 1)
        preloaded, refused, output, prepared = _zygote_prepare(args)
        return _zygote_mux(args, out_fd, preloaded, refused, output, prepared)
    import socket

    ctl = socket.socket(fileno=args.control_fd)
    papers = os.path.realpath(args.papers)
    preloaded, refused, output, prepared = _zygote_prepare(args)
    blocks: dict[int, int] = {}  # server pid -> its run uid block

    def reply(obj: dict) -> None:
        ctl.send(json.dumps(obj).encode())

    reply({"ready": True, "preloaded": preloaded, "refused": refused})
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(ctl, 1 << 16, 4)
        except OSError:
            break
        if not data:
            for fd in fds:
                os.close(fd)
            break
        _reap_any()
        try:
            request = json.loads(data)
        except ValueError:
            request = {}
        if request.get("kill"):
            try:
                pid = int(request["kill"])
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, ValueError, TypeError):
                pid = 0
            _kill_uid_block(blocks.pop(pid, 0))
            for fd in fds:
                os.close(fd)
            continue
        paper, why = _serve_refusal(request, papers, preloaded, refused)
        if not why and len(fds) != 2:
            why = "two descriptors expected (protocol socket, stderr pipe)"
        if why:
            for fd in fds:
                os.close(fd)
            reply({"ok": False, "why": why})
            continue
        # forked once (a fork of a parent holding torch costs milliseconds): the servers that ended
        # are reaped at the next request
        server_pid = os.fork()
        if server_pid == 0:
            _paper_server(request, paper, fds, output, args, prepared)
        for fd in fds:
            os.close(fd)
        blocks[server_pid] = int(request.get("run_uid_base") or 0)
        reply({"ok": True, "pid": server_pid})
    return 0


class _Relay:
    """A paper server of a ``--mux`` parent: its socket and stderr pipe, what waits to go either way."""

    def __init__(self, tag: str, pid: int, sock, err: int, paper: str, work: str, uid_base: int):
        self.tag, self.pid, self.sock, self.err = tag, pid, sock, err
        self.paper, self.work, self.uid_base = paper, work, uid_base
        self.to_server = bytearray()
        self.from_server = bytearray()
        self.closing = False  # the host ended its stdin: shut the socket's write side once flushed
        self.eof = False  # the server's stdout ended
        self.exited = False


def _zygote_mux(args: argparse.Namespace, out_fd: int, preloaded: list[str], refused: str,
                output: tuple[bytes, bytes], prepared: tuple | None) -> int:
    return _Mux(args, out_fd, preloaded, refused, output, prepared).run()


class _Mux:
    """A ``--mux`` parent's relay: requests and every paper server's streams as tagged lines on its
    stdin/stdout (the warm parent's own process: no paper code runs here)."""

    def __init__(self, args: argparse.Namespace, out_fd: int, preloaded: list[str], refused: str,
                 output: tuple[bytes, bytes], prepared: tuple | None):
        self.args, self.out_fd, self.preloaded, self.refused, self.output = args, out_fd, preloaded, refused, output
        self.prepared = prepared
        self.papers = os.path.realpath(args.papers)
        self.sel = selectors.DefaultSelector()
        self.out = bytearray()
        self.relays: dict[str, _Relay] = {}
        self.by_pid: dict[int, _Relay] = {}
        self.inbuf = bytearray()
        self.stdin_open = True
        self.writing = False

    def emit(self, tag: str, payload: bytes) -> None:
        self.out.extend(tag.encode() + b"\t" + payload + b"\n")

    def control(self, obj: dict) -> None:
        self.emit("", json.dumps(obj).encode())

    def interest(self, relay: _Relay) -> None:
        events = 0 if relay.eof else selectors.EVENT_READ
        if relay.to_server:
            events |= selectors.EVENT_WRITE
        key = self.sel.get_map().get(relay.sock.fileno())
        if key is None and events:
            self.sel.register(relay.sock, events, ("sock", relay))
        elif key is not None and not events:
            self.sel.unregister(relay.sock)
        elif key is not None and key.events != events:
            self.sel.modify(relay.sock, events, ("sock", relay))

    @staticmethod
    def shut(relay: _Relay) -> None:
        import socket

        if relay.closing and not relay.to_server:
            try:
                relay.sock.shutdown(socket.SHUT_WR)
            except OSError:
                pass

    @staticmethod
    def kill(relay: _Relay) -> None:
        try:
            os.kill(relay.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _kill_uid_block(relay.uid_base)

    def serve(self, request: dict) -> None:
        import socket

        rid, tag = request.get("re"), str(request.get("tag") or "")
        paper, why = _serve_refusal(request, self.papers, self.preloaded, self.refused)
        if not why and (not _TAG_RE.match(tag) or tag in self.relays):
            why = "bad or used tag"
        if why:
            self.control({"re": rid, "ok": False, "why": why})
            return
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        err_r, err_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            mine.close()
            os.close(err_r)
            _paper_server(request, paper, [theirs.detach(), err_w], self.output, self.args, self.prepared)
        theirs.close()
        os.close(err_w)
        mine.setblocking(False)
        os.set_blocking(err_r, False)
        relay = _Relay(tag, pid, mine, err_r, paper, os.path.join(os.path.realpath(self.args.work), request["work"]),
                       int(request.get("run_uid_base") or 0))
        self.relays[tag] = relay
        self.by_pid[pid] = relay
        self.interest(relay)
        self.sel.register(err_r, selectors.EVENT_READ, ("err", relay))
        self.control({"re": rid, "ok": True, "pid": pid})

    def on_host_line(self, line: bytes) -> None:
        tag, sep, payload = line.partition(b"\t")
        if not sep:
            return
        if tag:
            relay = self.relays.get(tag.decode(errors="replace"))
            if relay is not None and not relay.closing and not relay.eof:
                relay.to_server += payload + b"\n"
                self.interest(relay)
            return
        try:
            request = json.loads(payload)
        except ValueError:
            return
        if not isinstance(request, dict):
            return
        op = request.get("op")
        relay = self.relays.get(str(request.get("tag") or ""))
        if op == "serve":
            self.serve(request)
        elif op == "close" and relay is not None:
            relay.closing = True
            self.shut(relay)
        elif op == "kill" and relay is not None:
            self.kill(relay)

    def drain_err(self, relay: _Relay) -> bool:
        """Relay what the server wrote to stderr; False once the pipe is closed."""
        while True:
            try:
                data = os.read(relay.err, 65536)
            except BlockingIOError:
                return True
            except OSError:
                data = b""
            if not data:
                return False
            self.control({"stderr": relay.tag, "data": data.decode("utf-8", "replace")})

    def finish(self, relay: _Relay) -> None:
        self.drain_err(relay)
        if relay.err in self.sel.get_map():
            self.sel.unregister(relay.err)
        os.close(relay.err)
        if relay.sock.fileno() in self.sel.get_map():
            self.sel.unregister(relay.sock)
        relay.sock.close()
        _kill_uid_block(relay.uid_base)
        for folder in (relay.work, relay.paper):
            remove_tree(folder)
        self.relays.pop(relay.tag, None)
        self.by_pid.pop(relay.pid, None)
        self.control({"ended": relay.tag})

    def on_stdin(self) -> None:
        try:
            data = os.read(0, 1 << 20)
        except BlockingIOError:
            return
        if not data:
            # the host is gone: so are the servers, then this parent
            self.stdin_open = False
            self.sel.unregister(0)
            for each in list(self.relays.values()):
                self.kill(each)
            return
        self.inbuf += data
        for line in split_lines(self.inbuf):
            self.on_host_line(line)

    def on_stdout(self) -> None:
        try:
            done = os.write(self.out_fd, self.out)
            del self.out[:done]
        except BlockingIOError:
            pass
        except OSError:
            self.out.clear()  # nobody reads: nothing can be told
        if not self.out:
            self.sel.unregister(self.out_fd)
            self.writing = False

    def on_sock(self, relay: _Relay, events: int) -> None:
        if events & selectors.EVENT_WRITE and relay.to_server:
            try:
                sent = relay.sock.send(relay.to_server)
                del relay.to_server[:sent]
            except BlockingIOError:
                pass
            except OSError:
                relay.to_server.clear()
            self.shut(relay)
        if events & selectors.EVENT_READ:
            try:
                data = relay.sock.recv(1 << 20)
            except BlockingIOError:
                data = None
            except OSError:
                data = b""
            if data == b"":
                relay.eof = True
                relay.to_server.clear()
            elif data:
                relay.from_server += data
                for line in split_lines(relay.from_server):
                    self.emit(relay.tag, line)
        self.interest(relay)

    def reap(self) -> None:
        """Servers that exited, and those whose stream ended too: finished."""
        try:
            while True:
                pid, _status = os.waitpid(-1, os.WNOHANG)
                if pid == 0:
                    break
                if pid in self.by_pid:
                    self.by_pid[pid].exited = True
        except ChildProcessError:
            pass
        for relay in list(self.relays.values()):
            if relay.eof and relay.exited:
                self.finish(relay)

    def run(self) -> int:
        self.control({"ready": True, "protocol": PROTOCOL, "preloaded": self.preloaded, "refused": self.refused,
                      "mux": True})
        os.set_blocking(0, False)
        os.set_blocking(self.out_fd, False)
        self.sel.register(0, selectors.EVENT_READ, ("stdin", None))
        while self.stdin_open or self.relays:
            if self.out and not self.writing:
                self.sel.register(self.out_fd, selectors.EVENT_WRITE, ("stdout", None))
                self.writing = True
            for key, events in self.sel.select(0.5):
                kind, relay = key.data
                if kind == "stdin":
                    self.on_stdin()
                elif kind == "stdout":
                    self.on_stdout()
                elif kind == "err":
                    if not self.drain_err(relay):
                        self.sel.unregister(relay.err)
                elif kind == "sock":
                    self.on_sock(relay, events)
            self.reap()
        # what is still owed to the host
        os.set_blocking(self.out_fd, True)
        try:
            os.write(self.out_fd, self.out)
        except OSError:
            pass
        return 0


def _paper_server(request: dict, paper: str, fds: list[int], output: tuple[bytes, bytes],
                  args: argparse.Namespace, prepared: tuple | None) -> None:
    """In the forked server: take the paper's channel as stdin/stdout and serve it (never returns);
    ``prepared``: the parent's snapshot, which the server brings up to date after its preloads."""
    code = 1
    try:
        channel, err = fds
        os.dup2(channel, 0)
        os.dup2(channel, 1)
        os.dup2(err, 2)
        # nothing of the parent's stays open here: its control socket, other papers' channels
        os.closerange(3, 65536)
        token = str(request.get("work") or "")
        if not _ID_RE.match(token):
            raise ValueError(f"bad work folder name {token!r}")
        server_args = argparse.Namespace(
            paper=paper, work=os.path.join(os.path.realpath(args.work), token), fresh=False, python=args.python,
            run_uid_base=int(request.get("run_uid_base") or 0), cgroups=getattr(args, "cgroups", ""),
        )
        server = Server(server_args)
        server.inherited_output = output
        server.prepared = prepared
        # other papers' runs share this sandbox's disks: the disk guard watches even a lone run
        server.shared = True
        code = server.serve()
    except BaseException:  # noqa: BLE001 - never back into the parent's loop
        try:
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)
