"""Set-up as the README shows it: after scripts/run.sh's settings step, manage.py needs nothing exported."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# what manage.py imports: the project's code, templates and static files (no var/, no .env, no tests)
TREE = ["manage.py", "rcbsite", "catalog", "leaderboard", "submissions", "contributions", "accounts", "benchmark_core",
        "scoring", "templates", "static", "scripts", "requirements.txt"]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the checkout whose .venv is this one's (a link), without .env or var/."""
    dest = tmp_path / "checkout"
    dest.mkdir()
    for name in TREE:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(src, dest / name)
    (dest / ".venv").symlink_to(Path(sys.prefix))
    return dest


def clean_env(tree: Path, **extra: str) -> dict[str, str]:
    """An environment with no setting of the site at all: only what a login shell has."""
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tree), "LANG": "C.UTF-8", **extra}


def prepare(tree: Path, **extra: str) -> subprocess.CompletedProcess:
    """The part of scripts/run.sh that writes the settings (lib.sh's prepare_settings)."""
    return subprocess.run(["bash", "-c", 'source scripts/lib.sh && prepare_settings && echo "VAR=$RCB_VAR_DIR"'],
                          cwd=tree, env=clean_env(tree, **extra), capture_output=True, text=True, timeout=60)


def manage(tree: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(tree / ".venv/bin/python"), "manage.py", *args], cwd=tree, env=clean_env(tree),
                          capture_output=True, text=True, timeout=300)


def env_entries(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))


def test_without_run_sh_manage_py_says_where_the_secret_goes(tree):
    done = manage(tree, "check")
    assert done.returncode != 0
    assert "DJANGO_SECRET_KEY must be set" in done.stderr and ".env" in done.stderr


def test_after_run_sh_settings_step_readme_commands_need_nothing_exported(tree):
    done = prepare(tree)
    assert done.returncode == 0, done.stderr
    assert "wrote a generated secret key" in done.stderr
    env_file = tree / ".env"
    key = env_entries(env_file)["DJANGO_SECRET_KEY"]
    assert len(key) >= 50
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600

    check = manage(tree, "check", "--deploy")
    assert check.returncode == 0, check.stderr
    assert "System check identified" in check.stdout + check.stderr
    assert "ImproperlyConfigured" not in check.stderr

    # the README's data and account commands, as shown
    assert manage(tree, "migrate", "--noinput", "-v0").returncode == 0
    made = manage(tree, "createsuperuser", "--noinput", "--username", "admin", "--email", "admin@example.org")
    assert made.returncode == 0, made.stderr
    token = manage(tree, "create_token", "admin")
    assert token.returncode == 0, token.stderr
    assert (tree / "var" / "db.sqlite3").is_file()

    # a second start keeps the key (sessions and tokens survive restarts)
    again = prepare(tree)
    assert again.returncode == 0 and "wrote" not in again.stderr
    assert env_entries(env_file)["DJANGO_SECRET_KEY"] == key


def test_settings_step_keeps_the_users_env_file_and_an_earlier_key(tree):
    (tree / "var").mkdir()
    (tree / "var" / "secret_key").write_text("kept-from-an-earlier-run-" + "x" * 30 + "\n")
    (tree / ".env").write_text("# mine\nWEB_WORKERS=3\nDATABASE_URL=\nPORT=9123 # a comment\n")
    done = prepare(tree)
    assert done.returncode == 0, done.stderr
    entries = env_entries(tree / ".env")
    assert entries["WEB_WORKERS"] == "3" and entries["DJANGO_SECRET_KEY"].startswith("kept-from-an-earlier-run-")
    assert (tree / ".env").read_text().startswith("# mine\n")
    # the script sees .env's entries too
    shown = subprocess.run(["bash", "-c", 'source scripts/lib.sh && prepare_settings && echo "$PORT|${DATABASE_URL-unset}"'],
                           cwd=tree, env=clean_env(tree), capture_output=True, text=True, timeout=60)
    assert shown.stdout.strip().splitlines()[-1] == "9123|unset", shown.stdout + shown.stderr


def test_an_exported_key_wins_and_is_not_written(tree):
    done = prepare(tree, DJANGO_SECRET_KEY="exported-" + "y" * 50)
    assert done.returncode == 0, done.stderr
    assert not (tree / ".env").exists()
