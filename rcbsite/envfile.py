"""The site's `.env` file: read by the settings (exported variables win) and prepared by scripts/run.sh.

Every process of the site (manage.py, gunicorn, RQ workers) reads the same file, so a command
typed in a shell finds the secret key and settings that scripts/run.sh wrote, with nothing
exported. Parsing is django-environ's; this module only decides which file and what to add.

    python -m rcbsite.envfile shell     # `export K=V` lines for run.sh (entries not already set)
    python -m rcbsite.envfile prepare   # add a generated DJANGO_SECRET_KEY unless one is set
"""
from __future__ import annotations

import os
import secrets
import shlex
import sys
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
ENV_FILE = BASE_DIR / ".env"


def env_file_read(*, path: Path = ENV_FILE) -> dict[str, str]:
    """Put the file's entries into os.environ where not already set; return the entries it added.

    A blank entry (``DATABASE_URL=`` as in .env.example) means "the default", so it sets nothing.
    """
    if not path.is_file():
        return {}
    before = set(os.environ)
    environ.Env.read_env(path, parse_comments=True)
    added: dict[str, str] = {}
    for key in set(os.environ) - before:
        # 'PORT=8000 # comment' leaves the blank before the comment in the value
        value = os.environ[key].strip()
        if value:
            os.environ[key] = added[key] = value
        else:
            del os.environ[key]
    return added


def env_file_prepare(*, path: Path = ENV_FILE, var_dir: Path) -> str:
    """Make sure the site has a secret key: add a generated one to the file unless one is set.

    A key an earlier scripts/run.sh kept in ``var_dir/secret_key`` is reused (sessions survive).
    Returns what was done, for the script's log ('' when nothing was needed).
    """
    env_file_read(path=path)
    if os.environ.get("DJANGO_SECRET_KEY", "").strip():
        return ""
    legacy = var_dir / "secret_key"
    key = legacy.read_text(encoding="utf-8").strip() if legacy.is_file() else ""
    origin = f"the key from {legacy}" if key else "a generated secret key"
    key = key or secrets.token_urlsafe(50)
    created = not path.exists()
    # the key gives power over sessions and password resets: the file is the owner's only
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as f:
        if created:
            f.write("# Settings of this checkout (see .env.example); read by manage.py, gunicorn and the workers.\n")
        elif path.stat().st_size and not path.read_text(encoding="utf-8").endswith("\n"):
            f.write("\n")
        f.write(f"# written by scripts/run.sh\nDJANGO_SECRET_KEY={key}\n")
    os.environ["DJANGO_SECRET_KEY"] = key
    return f"wrote {origin} to {path}"


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "shell":
        for key, value in sorted(env_file_read().items()):
            print(f"export {key}={shlex.quote(value)}")
        return 0
    if command == "prepare":
        env_file_read()  # the file may name the var folder
        var_dir = Path(os.environ.get("RCB_VAR_DIR") or BASE_DIR / "var")
        done = env_file_prepare(var_dir=var_dir)
        if done:
            print(done, file=sys.stderr)
        return 0
    print("usage: python -m rcbsite.envfile shell|prepare", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
