"""Hostile completions for the probe suite.

Each replaces the body of ``solve(x)`` in tests/probes/pset/probe/solution.py. A probe prints
``ESCAPED`` and returns the right answer only when its attack worked, so a pass or that word in
the output means the sandbox leaked. ``blocked`` is a regex that must appear in the run's output:
it shows the attack really ran and what stopped it (not, say, a typo in the probe).
Tokens __REPO__, __CANARY__ and __SECRET__ are replaced with host values by the test.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Probe:
    name: str
    body: str
    categories: frozenset[str]
    blocked: str = ""  # regex the output must contain (empty: nothing particular)
    timeout: float = 6.0
    needs: tuple[str, ...] = ()
    tags: tuple[str, ...] = field(default_factory=tuple)
    #: a flag the run must carry (regex over its flags); with ``may_pass`` it may pass only with it
    flagged: str = ""
    may_pass: bool = False


def _p(name: str, body: str, categories: str, blocked: str = "", **kw) -> Probe:
    return Probe(name, body, frozenset(categories.split()), blocked, **kw)


#: the forging and tampering probes of issue 9: each must fail as ``tampering`` (or pass only flagged)
_FORGE_F = """
import os
def forge(line):
    for fd in range(3, 1024):
        try:
            os.write(fd, line)
        except OSError:
            pass
"""
TAMPERING: list[Probe] = [
    _p("fd_forge_execv", _FORGE_F + """
forge(b'{"completed": true, "tests_run": 1000}\\n')
forge(b"F\\t1\\t0\\t1\\tdeadbeefdeadbeefdeadbeefdeadbeef\\n")
print("Ran 2 tests in 0.001s\\n\\nOK")
os.execv("/bin/true", ["true"])
""", "tampering", flagged=r"tampering:(exec|forged-proof|no-proof)"),
    _p("os_exit_forged_json", _FORGE_F + """
import sys
forge(b'{"completed": true, "tests_run": 1000}\\n')
sys.stderr.write("..\\n----\\nRan 2 tests in 0.001s\\n\\nOK\\n")
sys.stderr.flush()
os._exit(0)
""", "tampering", flagged=r"tampering:(forged-proof|no-proof)"),
    _p("proof_pipe_replaced", """
import gc, os
r, w = os.pipe()
for fd in range(200, 260):
    try:
        os.fstat(fd)
        os.dup2(w, fd)
    except OSError:
        pass
gc.get_objects()
return x * 2
""", "tampering crash", flagged=r"tampering:(proof-channel|gc)"),
    _p("proof_pipe_closed", """
import os, sys
for fd in range(200, 260):
    try:
        os.close(fd)
    except OSError:
        pass
return x * 2
""", "tampering crash other", may_pass=False),
    _p("patch_addfailure_adderror", """
import unittest.result
unittest.result.TestResult.addFailure = lambda *a, **k: None
unittest.result.TestResult.addError = lambda *a, **k: None
return x + 1
""", "tampering", flagged=r"tampering:patch"),
    _p("patch_assert_equal_built_names", """
m = __import__("unit" + "test")
setattr(getattr(m, "Test" + "Case"), "assert" + "Equal", lambda *a, **k: None)
return x + 1
""", "tampering", flagged=r"tampering:patch"),
    _p("patch_torch_allclose", """
import torch
torch.allclose = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
return x * 2
""", "tampering", flagged=r"tampering:patch", timeout=60.0, needs=("torch",)),
    _p("patch_ref_module", """
import solution_ref
solution_ref.solve = lambda x: None
return None
""", "tampering", flagged=r"tampering:patch"),
    _p("patch_ref_via_dict", """
import sys
vars(sys.modules["solution_ref"])["solve"] = lambda x: None
return None
""", "tampering", flagged=r"tampering:patch"),
    _p("rebind_main_names", """
import sys, types
fake = types.ModuleType("solution_ref")
fake.solve = lambda x: None
sys.modules["__main__"].solution_ref = fake
return None
""", "tampering", flagged=r"tampering:patch"),
    _p("patch_test_class", """
import sys
main = sys.modules["__main__"]
main.TestSolve.test_many = lambda self: None
return 42
""", "tampering", flagged=r"tampering:patch"),
    _p("patch_builtins", """
b = __import__("built" + "ins")
setattr(b, "isinstance", lambda *a: True)
return x * 2
""", "tampering", flagged=r"tampering:patch"),
    _p("frame_walk_forge", """
import sys, os
f = sys._getframe()
key = None
while f is not None:
    if "key" in f.f_locals and isinstance(f.f_locals["key"], bytes):
        key = f.f_locals["key"]
    f = f.f_back
if key is None:
    raise RuntimeError("no key found")
import _blake2
for line in (b"T\\tstart", b"T\\tstart", b"F\\t1\\t0\\t" + str(os.getpid()).encode()):
    mac = _blake2.blake2b(line, key=key, digest_size=16).hexdigest().encode()
    for fd in range(200, 260):
        try:
            os.write(fd, line + b"\\t" + mac + b"\\n")
        except OSError:
            pass
print("Ran 2 tests in 0.001s\\n\\nOK")
os._exit(0)
""", "tampering", flagged=r"tampering:frame"),
    _p("inspect_stack_key", """
import inspect
for info in inspect.stack():
    info.frame.f_locals.get("key")
return x * 2
""", "tampering", flagged=r"tampering:frame"),
    _p("traceback_frame_walk", """
try:
    raise ValueError
except ValueError as exc:
    f = exc.__traceback__.tb_frame
    while f.f_back is not None:
        f = f.f_back
return x * 2
""", "tampering", flagged=r"tampering:frame"),
    _p("gc_walk_key", """
import gc
keys = [o for o in gc.get_objects() if isinstance(o, bytes) and len(o) == 32]
return x * 2
""", "tampering", flagged=r"tampering:gc"),
    _p("gc_referents_of_function", """
import gc, unittest.result
gc.get_referents(unittest.result.TestResult.startTest)
return x * 2
""", "tampering", flagged=r"tampering:gc"),
    _p("ctypes_memory_read", """
import ctypes
ctypes.string_at(id(x), 16)
return x * 2
""", "tampering", flagged=r"tampering:ctypes"),
    _p("proc_self_mem", """
try:
    with open("/proc/self/mem", "rb") as fh:
        fh.read(1)
except OSError as exc:
    print("mem", exc)
return x * 2
""", "tampering", flagged=r"tampering:proc-mem"),
    _p("settrace_hook", """
import sys
sys.settrace(lambda *a: None)
sys.settrace(None)
return x * 2
""", "tampering", flagged=r"tampering:trace"),
    _p("atexit_execv", """
import atexit, os
atexit.register(os.execv, "/bin/true", ["true"])
return x * 2
""", "tampering crash", flagged=r"tampering:(exec|no-proof)"),
    _p("skip_the_tests", """
import unittest
raise unittest.SkipTest("not today")
""", "tampering", flagged=r"tampering:skip"),
    _p("thread_dup2_race", """
import gc, os, threading
r, w = os.pipe()
stop = []
def flip():
    while not stop:
        for fd in range(200, 260):
            try:
                os.dup2(w, fd)
            except OSError:
                pass
t = threading.Thread(target=flip, daemon=True)
t.start()
for _ in range(50):
    gc.get_objects()
stop.append(1)
return x * 2
""", "tampering crash", flagged=r"tampering:|audit:thread"),
    _p("code_spoofed_filename", """
import sys
code = compile("import sys\\nframe = sys._getframe()", sys.prefix + "/lib/inspect.py", "exec")
exec(code, {})
return x * 2
""", "tampering", flagged=r"tampering:(frame|code-spoof)"),
    _p("frozen_importlib_spoof", """
code = compile("import gc\\ngc.get_objects()", "<frozen importlib._bootstrap>", "exec")
exec(code, {})
return x * 2
""", "tampering", flagged=r"tampering:code-spoof"),
    _p("sys_exit_noop_and_stdio_to_devnull", """
import os, sys
sys.exit = lambda *a, **k: None
null = os.open(os.devnull, os.O_WRONLY)
os.dup2(null, 1)
os.dup2(null, 2)
return None
""", "tampering", flagged=r"tampering:(stdio|patch)"),
    _p("audit_event_count_spoof", """
import sys
for _ in range(100):
    sys.audit("rcb.test", "start")
import unittest.result
for _ in range(100):
    unittest.result.TestResult.startTest(unittest.result.TestResult(), None)
return x * 2
""", "tampering", flagged=r"tampering:count"),
    _p("fork_child_gc", """
import os
pid = os.fork()
if pid == 0:
    import gc
    gc.get_objects()
    os._exit(0)
os.waitpid(pid, 0)
return x * 2
""", "tampering", flagged=r"tampering:gc"),
    _p("call_the_reference", """
import solution_ref
return solution_ref.solve(x)
""", "", may_pass=True, flagged=r"audit:ref-module"),
    _p("subprocess_spawn", """
import subprocess
subprocess.run(["true"])
return x * 2
""", "", may_pass=True, flagged=r"audit:spawn"),
    _p("thread_start", """
import threading
t = threading.Thread(target=lambda: None)
t.start()
t.join()
return x * 2
""", "", may_pass=True, flagged=r"audit:thread"),
]

#: runner robustness probes of issue 9: each ends contained and the next honest run passes
ROBUSTNESS: list[Probe] = [
    _p("deep_folder_chain", """
import os
home = os.environ["HOME"]
if os.path.exists("chains-made"):
    return None
open("chains-made", "w").close()
for base in (home, ".", ".."):
    fd = os.open(base, os.O_RDONLY)
    for i in range(1500):
        os.mkdir("d", dir_fd=fd)
        nxt = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    os.close(fd)
print("made three 1500-deep chains")
return None
""", "logic", r"made three 1500-deep chains", timeout=30.0),
    _p("fill_result_folder", """
import os
block = b"\\0" * (4 << 20)
written = 0
try:
    for i in range(100000):
        with open(os.path.join("..", f"fill{i}"), "wb") as fh:
            for _ in range(8):
                fh.write(block)
                written += len(block)
except OSError as exc:
    print("stopped after", written >> 20, "MB:", exc)
return None
""", "logic other crash", r"stopped after|^$", timeout=30.0),
    _p("many_small_files", """
import os
os.mkdir("many")
n = 0
try:
    for i in range(60000):
        os.close(os.open(f"many/{i}", os.O_CREAT | os.O_WRONLY))
        n += 1
except OSError as exc:
    print("stopped", exc)
print("made", n, "files")
return None
""", "logic crash other", r"made \d+ files|^$", timeout=30.0),
    _p("unshare_user_namespace", """
import subprocess
r = subprocess.run(["unshare", "--user", "--map-root-user", "true"], capture_output=True, text=True)
if r.returncode == 0:
    print("ESCAPED: created a user namespace")
    return x * 2
print("userns blocked:", r.returncode, r.stderr.strip()[:200])
return None
""", "logic", r"userns blocked"),
    _p("nul_byte", "return x * 2  # \x00", "syntax"),
]


#: issue 20: completions that reach out of their snippet to dodge the static reading (they call the
#: reference: each may pass only flagged ast:scope and audit:ref-module), and completions the host's
#: parser cannot read (each is its own failure: ``invalid`` when not run, ``syntax`` when its run
#: fails to compile). Lines starting with __COL0__ go in at column 0.
_SCOPE = r"(?=.*ast:scope)(?=.*audit:ref-module)"
STATIC: list[Probe] = [
    # ends in a backslash: the closing tag line is joined to its last line (it parses only in its file)
    _p("backslash_into_closing_tag", """
import solution_ref
return solution_ref.solve(x) \\
""", "", may_pass=True, flagged=_SCOPE),
    # a line at column 0 ends ``solve`` (its result computed by then) and opens a function of its own
    _p("column0_new_function", """
import solution_ref
return solution_ref.solve(x)
__COL0__def _hidden():
__COL0__    pass
""", "", may_pass=True, flagged=_SCOPE),
    # a form feed sends the tokenizer back to column 0 on a line that looks indented
    _p("form_feed_dedent", """
import solution_ref
return solution_ref.solve(x)
\fdef _hidden():
\f    pass
""", "", may_pass=True, flagged=_SCOPE),
    _p("column0_class_and_decorator", """
import solution_ref
return solution_ref.solve(x)
__COL0__@staticmethod
__COL0__def _hidden():
__COL0__    pass
__COL0__class _Hidden:
__COL0__    pass
""", "", may_pass=True, flagged=_SCOPE),
    # carriage returns are line breaks to the interpreter: the second "line" is at column 0
    _p("carriage_return_dedent", "import solution_ref\nreturn solution_ref.solve(x)\rdef _hidden():\r    pass",
       "", may_pass=True, flagged=_SCOPE),
    _p("semicolon_import", """
y = x; import solution_ref; return solution_ref.solve(y)
""", "", may_pass=True, flagged=r"audit:ref-module"),
    _p("exec_of_a_string", """
exec("import solution_" + "ref")
import sys
return sys.modules["solution_" + "ref"].solve(x)
""", "", may_pass=True, flagged=r"ast:exec"),
    _p("tag_comment_inside", """
# </paper2code name="solve">
import solution_ref
# <paper2code name="solve">
return solution_ref.solve(x)
""", "", may_pass=True, flagged=r"audit:ref-module"),
    _p("nested_unary_100000", "return " + "-" * 100000 + "x", "invalid"),
    _p("nested_attribute_50000", "return x" + ".real" * 50000, "invalid"),
    _p("nested_parentheses_10000", "return " + "(" * 10000 + "x" + ")" * 10000, "syntax invalid"),
    _p("nested_lists_10000", "return " + "[" * 10000 + "]" * 10000, "syntax invalid"),
    _p("lone_surrogate", "return x * 2  # \ud800", "invalid"),
]

NETWORK = "other name attribute type logic crash"
PROBES: list[Probe] = [
    _p("tcp_internet", """
import socket
socket.create_connection(("151.101.0.223", 443), timeout=3)
print("ESCAPED: tcp connect to the internet")
return x * 2
""", NETWORK, r"Network is unreachable|timed out|Errno"),
    _p("udp_internet", """
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(2)
s.sendto(b"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x06google\\x03com\\x00\\x00\\x01\\x00\\x01",
         ("8.8.8.8", 53))
s.recvfrom(512)
print("ESCAPED: udp answer")
return x * 2
""", NETWORK, r"Network is unreachable|timed out|Errno"),
    _p("ipv6_internet", """
import socket
socket.create_connection(("2606:4700:4700::1111", 443), timeout=3)
print("ESCAPED: ipv6 connect")
return x * 2
""", NETWORK, r"unreachable|Cannot assign|timed out|Errno"),
    _p("dns_lookup", """
import socket
print(socket.getaddrinfo("pypi.org", 443))
print("ESCAPED: dns answer")
return x * 2
""", NETWORK, r"gaierror|Temporary failure|Name or service|Errno"),
    _p("host_redis_tcp", """
import socket
s = socket.create_connection(("127.0.0.1", 6379), timeout=3)
s.sendall(b"PING\\r\\n")
print("ESCAPED: redis said", s.recv(64))
return x * 2
""", NETWORK, r"Connection refused|unreachable|Errno"),
    _p("host_postgres_tcp", """
import socket
s = socket.create_connection(("127.0.0.1", 5432), timeout=3)
print("ESCAPED: postgres accepted a connection")
return x * 2
""", NETWORK, r"Connection refused|unreachable|Errno"),
    _p("host_unix_sockets", """
import glob, socket
paths = []
for pattern in ("/run/postgresql/.s.PGSQL.*", "/var/run/postgresql/.s.PGSQL.*", "/tmp/.s.PGSQL.*",
                "/run/redis/*.sock", "/var/run/redis/*.sock", "/tmp/redis*.sock", "/run/docker.sock",
                "/var/run/docker.sock", "/run/*/*.sock", "/var/lib/postgresql/*"):
    paths += glob.glob(pattern)
for path in paths:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        print("ESCAPED: unix socket", path)
        return x * 2
    except OSError as exc:
        print("blocked", path, exc)
raise ConnectionError(f"no host unix socket reachable ({len(paths)} visible)")
""", NETWORK, r"no host unix socket reachable"),
    _p("fork_bomb", """
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
""", "timeout crash other tampering", timeout=5.0),
    _p("thread_bomb", """
import threading, time
threads = []
for _ in range(100000):
    t = threading.Thread(target=time.sleep, args=(60,), daemon=True)
    t.start()
    threads.append(t)
print("ESCAPED: 100000 threads")
return x * 2
""", "timeout crash other", timeout=8.0),
    _p("memory_bomb", """
hog = []
while True:
    hog.append(bytearray(64 * 1024 * 1024))
""", "crash timeout", r"MemoryError|Killed|memory|^$"),
    _p("cpu_loop_python", """
while True:
    pass
""", "timeout", timeout=3.0),
    _p("cpu_loop_c", """
import collections, itertools
collections.deque(itertools.product(range(1000), repeat=6), maxlen=0)
return x * 2
""", "timeout", timeout=3.0),
    _p("ignore_signals", """
import signal, time
for sig in (signal.SIGTERM, signal.SIGALRM, signal.SIGINT, signal.SIGHUP, signal.SIGXCPU):
    signal.signal(sig, signal.SIG_IGN)
signal.alarm(1)
time.sleep(3600)
return x * 2
""", "timeout", timeout=3.0),
    _p("sleep_forever", """
import time
time.sleep(10 ** 6)
""", "timeout", timeout=3.0),
    _p("setsid_child_left_running", """
import os, time
pid = os.fork()
if pid == 0:
    os.setsid()
    if os.fork() == 0:
        while True:
            time.sleep(0.2)
    os._exit(0)
os.waitpid(pid, 0)
print("left a daemon behind")
return None
""", "logic", r"left a daemon behind"),
    _p("stdout_flood_1gb", """
import sys
chunk = "x" * (1 << 20) + "\\n"
for _ in range(1024):
    sys.stdout.write(chunk)
sys.stdout.flush()
return None
""", "logic timeout other", timeout=30.0),
    _p("fill_disk", """
import os
block = b"\\0" * (8 << 20)
written = 0
for folder in (".", os.environ.get("TMPDIR", "."), "/tmp"):
    try:
        for i in range(100000):
            with open(os.path.join(folder, f"fill{i}"), "wb") as fh:
                for _ in range(1 << 14):
                    fh.write(block)
                    written += len(block)
    except OSError as exc:
        print("stopped after", written >> 20, "MB in", folder, ":", exc)
raise OSError(f"disk full after {written >> 20} MB")
""", "other crash timeout", r"No space left|File too large|Disk quota|Read-only|the run was stopped: it used", timeout=20.0),
    _p("overwrite_test_and_paper", """
import os
with open("paper2code_test.py", "w") as fh:
    fh.write("print('OK')\\n")
for path in ("/rcb/paper/paper2code_test.py", "__REPO__/tests/probes/pset/probe/paper2code_test.py",
             "__REPO__/tests/probes/pset/probe/solution.py"):
    try:
        with open(path, "a") as fh:
            fh.write("# overwritten\\n")
        print("ESCAPED: wrote", path)
    except OSError as exc:
        print("blocked", path, exc)
return None
""", "logic", r"blocked /rcb/paper|blocked __REPO__"),
    _p("other_runs_folders", """
import os
work = os.path.dirname(os.path.dirname(os.getcwd()))
try:
    os.chmod(work, 0o777)
except OSError as exc:
    print("blocked chmod", exc)
try:
    names = os.listdir(work)
except OSError as exc:
    names = []
    print("blocked listdir", exc)
mine = os.path.basename(os.path.dirname(os.getcwd()))
for name in names:
    if name == mine:
        continue
    target = os.path.join(work, name, "paper", "solution.py")
    try:
        with open(target, "w") as fh:
            fh.write("def solve(x):\\n    return x * 2\\n")
        print("ESCAPED: wrote", target)
    except OSError as exc:
        print("blocked", target, exc)
try:
    os.mkdir(os.path.join(work, "planted"))
    print("ESCAPED: planted a folder in the work root")
except OSError as exc:
    print("blocked mkdir", exc)
return None
""", "logic", r"blocked"),
    _p("symlink_out", """
import os
targets = ["/etc/shadow", "__REPO__/.env", "__REPO__/rcbsite/settings.py", "__CANARY__", "/proc/1/root/etc/shadow"]
for i, target in enumerate(targets):
    link = f"link{i}"
    if not os.path.lexists(link):
        os.symlink(target, link)
    try:
        with open(link) as fh:
            data = fh.read()
        print("ESCAPED: read", target, len(data))
    except OSError as exc:
        print("blocked", target, exc)
# try to make the runner write its result.json through a link to a host file
if not os.path.lexists(os.path.join("..", "result.json")):
    os.symlink("__CANARY__", os.path.join("..", "result.json"))
return None
""", "logic", r"blocked /etc/shadow"),
    _p("read_worker_environment", """
import glob, os
found = []
if "__SECRET__" in repr(dict(os.environ)):
    found.append("os.environ")
for path in glob.glob("/proc/*/environ") + ["/proc/1/environ", f"/proc/{os.getppid()}/environ"]:
    try:
        with open(path, "rb") as fh:
            if b"__SECRET__" in fh.read():
                found.append(path)
    except OSError as exc:
        print("blocked", path, type(exc).__name__)
if found:
    print("ESCAPED: secret in", found)
    return x * 2
print("secret not found")
return None
""", "logic", r"secret not found"),
    _p("read_settings", """
paths = ["__REPO__/.env", "__REPO__/rcbsite/settings.py", "__REPO__/.ci/run", "/etc/shadow",
         "/root/.bash_history", "__CANARY__"]
for path in paths:
    try:
        with open(path) as fh:
            fh.read()
        print("ESCAPED: read", path)
        return x * 2
    except OSError as exc:
        print("blocked", path, type(exc).__name__)
return None
""", "logic", r"blocked __REPO__/rcbsite/settings.py"),
    _p("proc1_environ", """
with open("/proc/1/environ", "rb") as fh:
    data = fh.read()
if b"__SECRET__" in data:
    print("ESCAPED: secret in /proc/1/environ")
    return x * 2
print("no secret in /proc/1/environ")
return None
""", "logic other", r"no secret in /proc/1/environ|Permission denied"),
    _p("os_exit_fake_pass", """
import os, sys
print("OK")
sys.stdout.flush()
os._exit(0)
""", "tampering crash other"),
    _p("fake_test_output", """
import os, sys
sys.stderr.write("..\\n----------------------------------------------------------------------\\nRan 2 tests in 0.001s\\n\\nOK\\n")
sys.stderr.flush()
os._exit(0)
""", "tampering crash other"),
    _p("sys_exit_zero", """
raise SystemExit(0)
""", "crash other logic tampering"),
    _p("neuter_unittest", """
import unittest
unittest.TestCase.run = lambda self, result=None: None
return x * 2
""", "tampering"),
    _p("atexit_exit_zero", """
import atexit, os
atexit.register(os._exit, 0)
return None
""", "logic crash other tampering"),
    _p("torch_num_threads_64", """
import torch
torch.set_num_threads(64)
a = torch.randn(800, 800)
for _ in range(5):
    a = torch.tanh(a @ a)
print("threads", torch.get_num_threads())
return None
""", "logic timeout crash tampering other", timeout=60.0, needs=("torch",)),  # crash: the pids limit stops its threads
    _p("read_stdin", """
import sys
data = sys.stdin.read()
print("stdin gave", len(data), "bytes")
return None
""", "logic", r"stdin gave 0 bytes"),
    _p("close_stdout_stderr", """
import os
os.close(1)
os.close(2)
return None
""", "tampering other crash logic"),
    _p("kill_the_runner", """
import os, signal
for target in (os.getppid(), 1):
    try:
        os.kill(target, signal.SIGKILL)
        print("killed", target)
    except OSError as exc:
        print("blocked kill", target, exc)
return None
""", "tampering logic crash other"),
    _p("stack_overflow_segfault", """
import sys
sys.setrecursionlimit(10 ** 8)
def down(n):
    return down(n + 1) + 1
return down(0)
""", "crash other timeout", timeout=10.0),
    _p("unremovable_files", """
import os
if not os.path.lexists("deep"):
    os.makedirs("deep/er")
    with open("deep/er/f", "w") as fh:
        fh.write("x")
    os.chmod("deep/er", 0)
    os.chmod("deep", 0)
return None
""", "logic"),
]
