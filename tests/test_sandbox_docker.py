"""The docker backend against the real Docker engine (scripts/docker.sh starts one).

Without an engine these tests skip with a loud message; under CI=true or RCB_REQUIRE_DOCKER=1
(.ci/run sets both) they fail instead. The default sandbox serves papers from warm parent
containers (tests/test_sandbox_docker_shared_parent.py has their own tests); ``alone`` gives each
paper a container of its own.
"""
from __future__ import annotations

import io
import json
import os
import socket
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest

from benchmark_core.cli import main as cli_main
from benchmark_core.problemset import load_problemset
from benchmark_core.sandbox import Limits, PaperSpec, SandboxUnavailable, get_sandbox
from benchmark_core.sandbox.docker_containers import PARENT_PIDS, RUNNER_CPUS

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "demo"
TORCH_PSET = ROOT / "tests" / "data" / "torch_pset"

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _no_engine(reason: str):
    banner = "!" * 78
    message = f"\n{banner}\nDOCKER TESTS SKIPPED: {reason}\nrun scripts/docker.sh (as root) to install and start the engine\n{banner}\n"
    if os.environ.get("CI", "").lower() == "true" or os.environ.get("RCB_REQUIRE_DOCKER") == "1":
        pytest.fail(f"CI=true / RCB_REQUIRE_DOCKER=1 but the Docker engine is unavailable: {reason}")
    print(message, file=sys.stderr)
    pytest.skip(f"DOCKER TESTS SKIPPED (no engine): {reason}")


@pytest.fixture(scope="module")
def sandbox():
    try:
        from benchmark_core.sandbox.docker_images import docker_client

        docker_client().close()
        box = get_sandbox("docker", limits=Limits(memory_mb=1024, tmpfs_mb=64), parallel=2)
    except SandboxUnavailable as exc:
        _no_engine(str(exc))
    yield box
    box.close()


@pytest.fixture(scope="module")
def demo_paper():
    pset = load_problemset(DEMO)
    return PaperSpec.from_paper(pset.papers[0])


@pytest.fixture(scope="module")
def session(sandbox, demo_paper):
    sess = sandbox.open(demo_paper)
    yield sess
    sess.close()


def _probe(session, code: str, *, timeout: float = 30.0):
    """Run ``code`` as the paper's test script; return the run result and the JSON it printed last."""
    result = session.run({"paper2code_test.py": code}, timeout=timeout)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith("{")]
    return result, (json.loads(lines[-1]) if lines else None)


def _score(*args: str) -> dict:
    out, err = io.StringIO(), io.StringIO()
    path = Path(os.environ.get("PYTEST_TMP", "/tmp")) / f"rcb-docker-score-{os.getpid()}-{time.monotonic_ns()}.json"
    try:
        code = cli_main(["score", *args, "--backend", "docker", "--quiet", "--output", str(path)], out, err)
        if code == 3 and path.exists():  # environment errors: say which and why
            raise AssertionError(f"environment errors: {json.loads(path.read_text())['summary'].get('environment_errors')}")
        assert code == 0, err.getvalue()
        return json.loads(path.read_text())
    finally:
        path.unlink(missing_ok=True)


# --------------------------------------------------------------------------- scoring

def test_demo_reference_scores_100_and_blank_0(sandbox):
    ref = _score(str(DEMO), "--reference")
    assert ref["backend"].startswith("docker")
    assert ref["summary"]["snippets"] == 50
    failed = [(r["paper"], r["snippet"], r["category"], r["output_tail"][-300:]) for r in ref["snippets"] if not r["passed"]]
    assert failed == []
    assert ref["summary"]["scaled_pass_rate"] == 100.0
    blank = _score(str(DEMO), "--blank")
    assert blank["summary"]["passed"] == 0
    assert blank["summary"]["scaled_pass_rate"] == 0.0


def test_torch_problem_set_scores_in_docker(sandbox):
    if not TORCH_PSET.joinpath("papers.yaml").exists():
        pytest.fail("tests/data/torch_pset is missing")
    from benchmark_core.sandbox.docker_images import requirements_for_paper

    pset = load_problemset(TORCH_PSET)
    # the papers declare no requirements: the backend pins what they import (torch among them)
    for paper in pset.papers:
        assert any(r.startswith("torch") for r in requirements_for_paper(PaperSpec.from_paper(paper)))
    ref = _score(str(TORCH_PSET), "--reference")
    assert ref["summary"]["snippets"] > 0
    assert [r for r in ref["snippets"] if not r["passed"]] == []
    blank = _score(str(TORCH_PSET), "--blank")
    assert blank["summary"]["passed"] == 0


# --------------------------------------------------------------------------- containment

def test_container_is_configured_locked_down(sandbox, session):
    attrs = sandbox.client.containers.get(session.container_id).attrs
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["ReadonlyRootfs"] is True
    assert host["CapDrop"] == ["ALL"]
    # only what the runner needs to give each run its own uid (the runs get none of it)
    assert sorted(c.removeprefix("CAP_") for c in host["CapAdd"]) == ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL",
                                                                       "SETGID", "SETUID"]
    assert "no-new-privileges" in host["SecurityOpt"]
    assert host["Memory"] == sandbox.container_memory_mb * 1024 * 1024
    assert host["MemorySwap"] == host["Memory"]
    # the runs' processes, the runner's, and (a warm parent serving several papers) their servers'
    assert 0 < host["PidsLimit"] <= sandbox.limits.pids * sandbox.parallel + 64 + PARENT_PIDS
    # the runs' CPU share plus the runner's control work, in quota and weight (docker_containers.Boxes.create)
    assert host["NanoCpus"] == int(min(sandbox.engine_cpus, sandbox.cpus + RUNNER_CPUS) * 1e9)
    assert host["CpuShares"] == 1024 * (sandbox.parallel + 1)
    if sandbox.client.info().get("CgroupDriver") == "cgroupfs":
        assert host["CgroupParent"] == "/"  # beside the host's processes, not below one shared group
    assert "size=64m" in host["Tmpfs"]["/tmp"]
    assert attrs["Config"]["User"] == "0:0"
    assert not host.get("Binds"), "nothing of the worker's file system is mounted"
    assert attrs["Config"]["Labels"]["org.rcbhub.sandbox"] == "session"


_IDENTITY = """
import json, os
status = dict(line.split(':', 1) for line in open('/proc/self/status') if ':' in line)
print(json.dumps({'uid': os.getuid(), 'euid': os.geteuid(), 'gid': os.getgid(),
                  'cap_eff': status['CapEff'].strip(), 'cap_prm': status['CapPrm'].strip(),
                  'cap_bnd': status['CapBnd'].strip(), 'nnp': status['NoNewPrivs'].strip(),
                  'root_setuid': __import__('subprocess').run(['python', '-c', 'import os; os.setuid(0)'],
                                                              capture_output=True).returncode}))
"""


def test_runs_have_their_own_uid_and_no_capabilities(session):
    result, seen = _probe(session, _IDENTITY)
    assert seen is not None, result.stderr
    assert seen["uid"] == seen["euid"] == seen["gid"] and seen["uid"] >= 61000
    assert int(seen["cap_eff"], 16) == 0 and int(seen["cap_prm"], 16) == 0
    assert seen["nnp"] == "1"
    assert seen["root_setuid"] != 0


def test_without_uid_per_run_everything_is_nobody_with_no_capability(demo_paper):
    box = get_sandbox("docker", limits=Limits(memory_mb=1024, tmpfs_mb=64), parallel=1, uid_per_run=False, spare=False)
    sess = box.open(demo_paper)
    try:
        attrs = box.client.containers.get(sess.container_id).attrs
        assert attrs["Config"]["User"] == "65534:65534" and not attrs["HostConfig"].get("CapAdd")
        result, seen = _probe(sess, _IDENTITY)
        assert seen is not None, result.stderr
        assert seen["uid"] == seen["euid"] == 65534 and seen["gid"] == 65534
        assert int(seen["cap_eff"], 16) == 0 and int(seen["cap_prm"], 16) == 0 and int(seen["cap_bnd"], 16) == 0
        assert seen["nnp"] == "1" and seen["root_setuid"] != 0
        assert _score_with(box, demo_paper) == 0
    finally:
        sess.close()
        box.close()


def _score_with(box, paper) -> int:
    """Failures of the paper's reference run in its own session of ``box``."""
    sess = box.open(paper)
    try:
        return int(sess.run({}, timeout=60).exit_code != 0)
    finally:
        sess.close()


def test_no_network_at_all(session):
    # the worker's own Redis (6379) and PostgreSQL (5432) on the host, the Docker bridge gateway,
    # a public address, IPv6 and DNS: all must fail
    result, seen = _probe(session, """
import json, socket
out = {}
def attempt(name, family, kind, addr):
    try:
        s = socket.socket(family, kind); s.settimeout(2)
        if kind == socket.SOCK_STREAM:
            s.connect(addr)
        else:
            s.sendto(b'x', addr)
        out[name] = 'connected'
    except OSError as exc:
        out[name] = type(exc).__name__ + ': ' + str(exc)
attempt('redis_local', socket.AF_INET, socket.SOCK_STREAM, ('127.0.0.1', 6379))
attempt('postgres_local', socket.AF_INET, socket.SOCK_STREAM, ('127.0.0.1', 5432))
attempt('bridge_gateway', socket.AF_INET, socket.SOCK_STREAM, ('172.17.0.1', 6379))
attempt('public', socket.AF_INET, socket.SOCK_STREAM, ('1.1.1.1', 443))
attempt('udp_dns', socket.AF_INET, socket.SOCK_DGRAM, ('8.8.8.8', 53))
attempt('ipv6', socket.AF_INET6, socket.SOCK_STREAM, ('2606:4700:4700::1111', 443))
try:
    socket.getaddrinfo('pypi.org', 443); out['dns'] = 'resolved'
except OSError as exc:
    out['dns'] = str(exc)
out['interfaces'] = sorted(name for _, name in socket.if_nameindex())
print(json.dumps(out))
""")
    assert seen is not None, result.stderr
    for name in ("redis_local", "postgres_local", "bridge_gateway", "public", "udp_dns", "ipv6", "dns"):
        assert seen[name] not in ("connected", "resolved"), (name, seen[name])
    assert seen["interfaces"] == ["lo"]


def test_host_redis_really_listens(session):
    """The network test above means something only if the worker itself can reach Redis."""
    with socket.create_connection(("127.0.0.1", 6379), timeout=2):
        pass


def test_root_and_paper_are_read_only_and_tmp_is_bounded(session):
    # the paper as the runner holds it: /rcb/paper in a container of its own, under /rcb/papers (0700) in a warm parent
    paper = getattr(session, "paper_dir", "/rcb/paper")
    result, seen = _probe(session, """
import errno, json, os
out = {}
for path in ('/etc/rcb-probe', '/opt/rcb/bin/rcb-probe', '/usr/lib/python3.11/os.py', '""" + paper + """/rope.py',
             '/rcb/warm.py/audit.py', '/rcb/warm.py/sitecustomize.py', '/rcb/rcb-probe'):
    try:
        with open(path, 'a') as fh:
            fh.write('x')
        out[path] = 'written'
    except OSError as exc:
        out[path] = errno.errorcode.get(exc.errno, str(exc.errno))
# the run's own copy is writable (it is where the completion lives)
with open('rope.py', 'a') as fh:
    fh.write('# ok')
out['root_mount'] = [ln.split()[3] for ln in open('/proc/self/mounts') if ln.split()[1] == '/'][-1]
print(json.dumps(out))
""")
    assert seen is not None, result.stderr
    assert "ro" in seen["root_mount"].split(","), seen["root_mount"]
    for path in ("/etc/rcb-probe", "/opt/rcb/bin/rcb-probe"):
        assert seen[path] == "EROFS", (path, seen[path])
    assert seen["/usr/lib/python3.11/os.py"] in ("EROFS", "EACCES")
    # the runner (a folder: its files, and a new file beside them) is root's
    for path in (f"{paper}/rope.py", "/rcb/warm.py/audit.py", "/rcb/warm.py/sitecustomize.py", "/rcb/rcb-probe"):
        assert seen[path] == "EACCES", (path, seen[path])
    # /tmp is bounded twice: the container's tmpfs (64 MB: ENOSPC) and the runner's watch of a run's
    # /tmp use (22 MB), which stops the run when it samples it over; which one comes first is timing
    result, filled = _probe(session, """
import errno, json
out = {}
chunk = b'x' * (1 << 20)
written = 0
try:
    with open('/tmp/fill', 'wb') as fh:
        for _ in range(200):
            fh.write(chunk); fh.flush(); written += 1
except OSError as exc:
    out['tmp_fill'] = errno.errorcode.get(exc.errno, str(exc.errno))
out['tmp_written_mb'] = written
print(json.dumps(out))
""")
    if filled is None:
        assert "the run was stopped" in result.stderr and "of /tmp" in result.stderr, result.stderr
    else:
        assert filled["tmp_fill"] == "ENOSPC" and filled["tmp_written_mb"] <= 64, filled


def test_worker_environment_does_not_leak(session, monkeypatch):
    monkeypatch.setenv("RCB_CANARY_SECRET", "do-not-leak-7f3a")
    result, seen = _probe(session, """
import json, os
try:
    environ1 = open('/proc/1/environ', 'rb').read().decode(errors='replace')
except OSError as exc:
    environ1 = 'denied: ' + type(exc).__name__
print(json.dumps({'env': dict(os.environ), 'environ1': environ1}))
""")
    assert seen is not None, result.stderr
    blob = json.dumps(seen)
    for secret in ("do-not-leak-7f3a", "DATABASE_URL", "REDIS_URL", "DJANGO_SECRET_KEY", "DOCKER_HOST"):
        assert secret not in blob
    assert seen["env"]["HOME"].startswith("/rcb/runs/")


def test_timeout_kills_the_run_and_the_session_lives_on(session):
    result = session.run({"paper2code_test.py": "import os\nos.fork()\nwhile True:\n    pass\n"}, timeout=2)
    assert result.timed_out
    assert result.seconds < 20
    ok, seen = _probe(session, "import json\nprint(json.dumps({'alive': True}))\n")
    assert seen == {"alive": True}
    # nothing of either run is left: the paper's runner has no child but its spare (the next
    # run's child, forked ahead: named rcb-spare, with the server's user; forked runs would show
    # its command line too), and the container holds nothing but runners (a warm parent, servers)
    top = session.container.top(ps_args="-eo pid,ppid,user -o comm=NAME -o args")
    rows = [(int(pid), int(ppid), user, name, args) for pid, ppid, user, name, args in top["Processes"]]
    assert all("warm.py" in args for *_rest, args in rows), rows
    server = session.client.pid
    users = {pid: user for pid, _ppid, user, _name, _args in rows}
    assert server in users
    children = [r for r in rows if r[1] == server]
    assert [(name, user) for _pid, _ppid, user, name, _args in children] in ([], [("rcb-spare", users[server])]), rows


def test_concurrent_runs_from_threads_get_their_own_answers(session):
    results: dict[int, str] = {}

    def one(i: int) -> None:
        res = session.run({"paper2code_test.py": f"import time\ntime.sleep(0.2)\nprint('token-{i}')\n"}, timeout=30)
        results[i] = res.stdout

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(results) == list(range(12))
    for i, out in results.items():
        assert out.strip() == f"token-{i}"


def test_results_come_out_through_the_archive_api(sandbox, session):
    result = session.run({"paper2code_test.py": "print('via-archive')\n"}, timeout=30)
    assert result.exit_code == 0
    bits, _ = sandbox.client.containers.get(session.container_id).get_archive("/rcb/runs")
    found = []
    with tarfile.open(fileobj=io.BytesIO(b"".join(bits))) as tar:
        for member in tar.getmembers():
            if member.name.endswith("/result.json"):
                found.append(json.loads(tar.extractfile(member).read()))
    assert any(r["stdout"].strip() == "via-archive" and r["exit_code"] == 0 for r in found)
    rid = next(r["id"] for r in found if r["stdout"].strip() == "via-archive")
    assert session._fetch_result(session.container, rid)["stdout"].strip() == "via-archive"


def test_a_killed_container_is_replaced(sandbox, demo_paper):
    sess = sandbox.open(demo_paper)
    try:
        first = sess.container_id
        sandbox.client.containers.get(first).kill()
        deadline = time.monotonic() + 10
        while not sess.dead and time.monotonic() < deadline:
            time.sleep(0.05)
        result = sess.run({}, timeout=30)
        assert result.exit_code == 0, result.stderr
        assert sess.container_id != first
    finally:
        sess.close()


def test_fresh_process_papers_run_in_a_new_interpreter(sandbox, demo_paper):
    from dataclasses import replace

    sess = sandbox.open(replace(demo_paper, fresh_process=True))
    try:
        assert sess.ready["fresh"] is True and sess.ready["preloaded"] == []
        result = sess.run({}, timeout=60)
        assert result.exit_code == 0, result.stderr
        assert result.extra["completed"] is True
    finally:
        sess.close()


def test_container_memory_limit_stops_a_hog_and_the_session_survives(demo_paper):
    # a container budget below what one run may take: the cgroup, not the rlimit, stops the hog
    box = get_sandbox("docker", limits=Limits(memory_mb=2048, tmpfs_mb=64), parallel=1, memory_mb=200, spare=False)
    sess = box.open(demo_paper)
    try:
        hog = "blocks = []\nwhile True:\n    blocks.append(bytearray(32 * 1024 * 1024))\n"
        result = sess.run({"paper2code_test.py": hog}, timeout=60)
        assert result.exit_code != 0 and result.oom, (result.stderr[-500:], result.extra)
        assert result.signal == 9 or "MemoryError" in result.stderr
        again = sess.run({}, timeout=60)
        assert again.exit_code == 0, again.stderr
    finally:
        sess.close()
        box.close()


# --------------------------------------------------------------------------- life cycle and images

@pytest.fixture(scope="module")
def alone():
    """Papers in containers of their own (no warm parent)."""
    box = get_sandbox("docker", limits=Limits(memory_mb=1024, tmpfs_mb=64), parallel=2, shared_parent=False)
    yield box
    box.close()


def test_next_session_takes_a_container_started_in_advance(alone, demo_paper):
    first = alone.open(demo_paper)
    first.close()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and not alone.boxes.spares:
        time.sleep(0.1)
    spare_ids = {box[0].id for box in alone.boxes.spares.values()}
    assert spare_ids, "a spare container is started in the background"
    second = alone.open(demo_paper)
    try:
        assert second.container_id in spare_ids
        assert second.run({}, timeout=60).exit_code == 0
    finally:
        second.close()


def _ours(sandbox):
    return {c.id for c in sandbox.client.containers.list(all=True, filters={"label": "org.rcbhub.sandbox=session"})}


def test_close_removes_container_and_volume(alone, demo_paper):
    sess = alone.open(demo_paper)
    cid, volume = sess.container_id, sess.volume.name
    assert cid in _ours(alone)
    sess.close()
    assert cid not in _ours(alone)
    assert volume not in {v.name for v in alone.client.volumes.list()}


def test_a_warm_parent_lives_until_the_sandbox_closes(demo_paper):
    box = get_sandbox("docker", limits=Limits(memory_mb=1024, tmpfs_mb=64), parallel=1, spare=False)
    try:
        sess = box.open(demo_paper)
        cid, volume = sess.container_id, sess.volume.name
        sess.close()
        assert cid in _ours(box), "the parent waits for the next paper of its environment"
        again = box.open(demo_paper)
        assert again.container_id == cid and again.run({}, timeout=60).exit_code == 0
        again.close()
    finally:
        box.close()
    assert cid not in _ours(box)
    assert volume not in {v.name for v in box.client.volumes.list()}


def test_startup_removes_containers_of_dead_workers(sandbox):
    from benchmark_core.sandbox.docker_containers import containers_cleanup
    from benchmark_core.sandbox.docker_images import LABEL

    dead_pid = 2**22 + 12345  # above pid_max: no such process
    stale = sandbox.client.containers.create(
        sandbox.base, ["true"], labels={LABEL: "session", "org.rcbhub.owner": f"{socket.gethostname()}:{dead_pid}"},
        network_mode="none",
    )
    alive = sandbox.client.containers.create(
        sandbox.base, ["true"], labels={LABEL: "session", "org.rcbhub.owner": f"{socket.gethostname()}:{os.getpid()}"},
        network_mode="none",
    )
    try:
        containers_cleanup(sandbox.client)
        left = _ours(sandbox)
        assert stale.id not in left
        assert alive.id in left
    finally:
        for c in (stale, alive):
            try:
                c.remove(force=True)
            except Exception:  # noqa: BLE001
                pass


def test_env_images_are_named_by_requirements_and_reused(sandbox):
    from benchmark_core.sandbox.docker_images import env_image_ensure, env_image_tag

    base = sandbox.base
    assert env_image_tag(["numpy==2.4.6", "tqdm"], base=base) == env_image_tag(["tqdm", " numpy==2.4.6 "], base=base)
    assert env_image_tag(["numpy==2.4.6"], base=base) != env_image_tag(["numpy==2.4.5"], base=base)
    assert env_image_tag(["numpy==2.4.6"], base=base) != env_image_tag(["numpy==2.4.6"], base=base + "x")
    logs: list[str] = []
    tag = env_image_ensure(sandbox.client, ["numpy==2.4.6"], base=base, log=logs.append)
    first = sandbox.client.images.get(tag).id
    logs.clear()
    again = env_image_ensure(sandbox.client, ["numpy==2.4.6"], base=base, log=logs.append)
    assert again == tag
    assert sandbox.client.images.get(tag).id == first
    assert logs == [], "the second ensure must not build"
    # the image really holds the requirement, installed without network
    out = sandbox.client.containers.run(tag, ["python", "-c", "import numpy; print(numpy.__version__)"],
                                        network_mode="none", remove=True)
    assert out.decode().strip() == "2.4.6"


def test_requirements_come_from_the_paper_its_set_the_setting_or_its_imports(tmp_path, monkeypatch):
    from importlib.metadata import version

    from benchmark_core.sandbox.docker_images import requirements_for_paper

    folder = tmp_path / "pset" / "p"
    folder.mkdir(parents=True)
    (folder / "model.py").write_text("import numpy as np\nimport yaml\nimport rcb_not_installed_mod\nfrom . import x\n")
    (folder / "x.py").write_text("import model\n")
    paper = PaperSpec(id="p", folder=folder)
    monkeypatch.delenv("RCB_DOCKER_DEFAULT_REQUIREMENTS", raising=False)
    assert requirements_for_paper(PaperSpec(id="p", folder=folder, requirements=("a==1",))) == ("a==1",)
    (tmp_path / "pset" / "requirements.txt").write_text("# shared\nb==2\n")
    assert requirements_for_paper(paper) == ("b==2",)
    (tmp_path / "pset" / "requirements.txt").unlink()
    assert requirements_for_paper(paper, fallback=["c==3"]) == ("c==3",)
    monkeypatch.setenv("RCB_DOCKER_DEFAULT_REQUIREMENTS", "d==4, e")
    assert requirements_for_paper(paper) == ("d==4", "e")
    monkeypatch.setenv("RCB_DOCKER_DEFAULT_REQUIREMENTS", "")  # empty, as copied from .env.example
    inferred = requirements_for_paper(paper)
    # third-party imports pinned as installed here; the paper's own modules (model, x) are not
    assert set(inferred) == {f"numpy=={version('numpy')}", f"PyYAML=={version('PyYAML')}", "rcb_not_installed_mod"}


def test_unknown_requirement_is_a_clear_error(sandbox):
    from benchmark_core.sandbox.docker_images import env_image_ensure

    with pytest.raises(SandboxUnavailable, match="cannot download wheels"):
        env_image_ensure(sandbox.client, ["rcb-no-such-package-xyz==0.0.1"], base=sandbox.base, log=lambda m: None)
