"""Cleaning up after runs: folder trees, processes, cgroups and SysV IPC objects a run left."""
from __future__ import annotations

import errno
import os
import shutil
import signal
import time


def _disk_full(exc: BaseException) -> bool:
    """Whether preparing a run failed for want of disk (shutil.copytree gathers its errors)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    return "No space left" in str(exc) or "Disk quota" in str(exc)


def remove_tree(path: str) -> None:
    """Delete a file or folder tree iteratively, one directory fd at a time.

    A run may leave a folder chain thousands deep (``shutil.rmtree`` recurses and its paths grow
    past PATH_MAX), read-only or unreadable folders, and symlinks anywhere: this walks down by
    name relative to the current folder's fd, never follows a link, and climbs back with "..".
    """
    parent, name = os.path.split(os.path.abspath(path))
    try:
        top_parent = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        try:
            os.unlink(name, dir_fd=top_parent)
            return
        except IsADirectoryError:
            pass
        except OSError as exc:
            if exc.errno != errno.EISDIR and exc.errno != errno.EPERM:
                return
        try:
            os.chmod(name, 0o700, dir_fd=top_parent, follow_symlinks=True)
            cur = os.open(name, _WALK_FLAGS, dir_fd=top_parent)
        except OSError:
            return
        _remove_below(cur, name, top_parent)
    finally:
        os.close(top_parent)


_WALK_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW


def _remove_below(cur: int, name: str, top_parent: int) -> None:
    """``remove_tree``'s walk from the open folder ``cur`` (``name`` in ``top_parent``): down into
    the first subfolder left, files unlinked on the way, up with ".." once a folder is empty."""
    depth = 0
    while True:
        subdir = _unlink_files(cur)
        if subdir is not None:
            try:
                os.chmod(subdir, 0o700, dir_fd=cur)
                child = os.open(subdir, _WALK_FLAGS, dir_fd=cur)
            except OSError:
                child = -1
            if child >= 0:
                os.close(cur)
                cur, depth = child, depth + 1
                continue
            try:  # cannot enter it: it may still be empty
                os.rmdir(subdir, dir_fd=cur)
                continue
            except OSError:
                break  # not removable at all: leave the rest rather than loop
        if depth == 0:
            os.close(cur)
            cur = -1
            try:
                os.rmdir(name, dir_fd=top_parent)
            except OSError:
                pass
            return
        me = os.fstat(cur)
        up = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=cur)
        os.close(cur)
        cur, depth = up, depth - 1
        try:
            with os.scandir(cur) as entries:
                for entry in entries:
                    if entry.inode() == me.st_ino and entry.is_dir(follow_symlinks=False):
                        os.rmdir(entry.name, dir_fd=cur)
                        break
        except OSError:
            pass
    if cur >= 0:
        os.close(cur)


def _unlink_files(cur: int) -> str | None:
    """Unlink every entry of the open folder ``cur`` that is not a folder; return a subfolder's name."""
    subdir = None
    try:
        with os.scandir(cur) as entries:
            for entry in entries:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        subdir = subdir or entry.name
                    else:
                        os.unlink(entry.name, dir_fd=cur)
                except OSError:
                    pass
    except OSError:
        pass
    return subdir


def _kill_until_gone(find, reap, *, rounds: int) -> None:
    """SIGKILL every pid ``find()`` lists, reaping after, until it lists none (at most ``rounds`` times)."""
    for _ in range(rounds):
        pids = find()
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        reap()
        time.sleep(0.002)


def _reap_any() -> None:
    try:
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass
    except ChildProcessError:
        pass


def _proc_entries() -> list[tuple[int, int, int, int, int, str]]:
    """(pid, ppid, pgid, sid, uid, state) of every visible process."""
    rows = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as fh:
                stat = fh.read().decode(errors="replace")
            fields = stat[stat.rindex(")") + 2:].split()
            with open(f"/proc/{name}/status", "rb") as fh:
                uid_line = next(ln for ln in fh.read().decode(errors="replace").splitlines() if ln.startswith("Uid:"))
            rows.append((int(name), int(fields[1]), int(fields[2]), int(fields[3]), int(uid_line.split()[1]), fields[0]))
        except (OSError, ValueError, StopIteration, IndexError):
            continue
    return rows


def _cgroup_dirs(spec: str) -> dict[str, str]:
    """``--cgroups v1:/root`` or ``v2:/root`` -> the folders runs' cgroups are made in, by kind."""
    version, _, root = spec.partition(":")
    if not root:
        return {}
    names = ("memory", "pids") if version == "v1" else ("unified",) if version == "v2" else ()
    return {name: os.path.join(root, name) for name in names if os.path.isdir(os.path.join(root, name))}


def _cgroup_write(path: str, name: str, value: str, *, optional: bool = False) -> None:
    try:
        with open(os.path.join(path, name), "w", encoding="ascii") as fh:
            fh.write(value)
    except OSError:
        if not optional:
            raise


def _cgroup_oom_kills(path: str, kind: str) -> int:
    """The OOM kills a memory cgroup has counted (v1 memory.oom_control, v2 memory.events)."""
    try:
        with open(os.path.join(path, "memory.oom_control" if kind == "memory" else "memory.events"),
                  encoding="ascii") as fh:
            for line in fh:
                name, _, value = line.partition(" ")
                if name == "oom_kill":
                    return int(value)
    except (OSError, ValueError):
        pass
    return 0


#: the SysV IPC tables (/proc/sysvipc) and the ipcrm option removing an entry of each
_SYSV_TABLES = (("shm", "-m"), ("msg", "-q"), ("sem", "-s"))


def ipc_remove(uid: int) -> int:
    """Remove every SysV IPC object of this IPC namespace that ``uid`` created or owns (a run's
    leftovers: memory beyond its limits, a channel to the next run); return how many were found.
    Reading the tables costs microseconds; ``ipcrm`` runs, as ``uid``, only when something is there
    (call it once the run's processes are gone: none of them can make another meanwhile)."""
    doomed: list[str] = []
    for table, option in _SYSV_TABLES:
        try:
            with open(f"/proc/sysvipc/{table}", encoding="ascii") as fh:
                header = fh.readline().split()
                rows = [line.split() for line in fh]
        except OSError:
            continue
        try:
            ident, owner, creator = header.index("shmid" if table == "shm" else "msqid" if table == "msg" else "semid"), \
                header.index("uid"), header.index("cuid")
        except ValueError:
            continue
        for row in rows:
            if len(row) > max(ident, owner, creator) and str(uid) in (row[owner], row[creator]):
                doomed += [option, row[ident]]
    if doomed:
        ipcrm = shutil.which("ipcrm") or "/usr/bin/ipcrm"
        try:
            pid = os.fork()
        except OSError:
            return len(doomed) // 2
        if pid == 0:
            try:
                os.closerange(3, 65536)
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 1)
                os.dup2(null, 2)
                # the creator may remove what it made (the runner has no CAP_SYS_ADMIN to do it)
                os.setgroups([])
                os.setresgid(uid, uid, uid)
                os.setresuid(uid, uid, uid)
                os.execv(ipcrm, [ipcrm, *doomed])
            finally:
                os._exit(127)
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    return len(doomed) // 2
