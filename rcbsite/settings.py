"""Settings: every difference between environments is an environment variable (see .env.example)."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from benchmark_core.sandbox.base import threads_per_run
from rcbsite.envfile import env_file_read

BASE_DIR = Path(__file__).resolve().parent.parent
# .env (written by scripts/run.sh, or copied from .env.example) fills what is not exported
env_file_read()
VAR_DIR = Path(os.environ.get("RCB_VAR_DIR", BASE_DIR / "var"))


def env_bool(name: str, default: bool = False) -> bool:
    return os.environ.get(name, str(default)).strip().lower() in ("1", "true", "yes", "on")


DEBUG = env_bool("DJANGO_DEBUG")
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY must be set unless DJANGO_DEBUG is on: put it in .env (scripts/run.sh writes "
            "one there on its first start) or export it"
        )
    SECRET_KEY = "insecure-development-key-only-for-DJANGO_DEBUG"

ALLOWED_HOSTS = [h.strip() for h in os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [o.strip() for o in os.environ.get("DJANGO_CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_rq",
    "axes",
    "catalog",
    "leaderboard",
    "submissions",
    "contributions",
    "accounts",
    "scoring",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "leaderboard.middleware.SecurityHeadersMiddleware",
    "leaderboard.middleware.PrivateAnswersMiddleware",
    "leaderboard.middleware.NulRefusingMiddleware",
    # last, as axes asks: turns a refused sign-in into accounts.throttle.lockout_response
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "rcbsite.urls"
WSGI_APPLICATION = "rcbsite.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                # after Django's csrf processor: CSRF tokens of a page rendered for the page cache are a placeholder
                "leaderboard.page_cache.page_render_context",
            ],
        },
    },
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}",
        conn_max_age=int(os.environ.get("DATABASE_CONN_MAX_AGE", "60")),
    )
}
if DATABASES["default"]["ENGINE"].endswith("sqlite3"):
    # several processes (web, RQ workers) write at once: wait for the lock, take it up front;
    # the test database is a file (not :memory:) so worker subprocesses of the tests can share it
    # WAL: readers do not wait for a writer, and a commit (a worker stores each verdict as it comes) is
    # one append, not a journal's several syncs; synchronous=NORMAL in WAL mode loses no data on a
    # process crash, only the last commits on a power loss
    DATABASES["default"].setdefault("OPTIONS", {}).update({
        "timeout": 30, "transaction_mode": "IMMEDIATE",
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    })
    DATABASES["default"]["TEST"] = {"NAME": str(Path(os.environ.get("TMPDIR", "/tmp")) / f"rcb-test-{os.getpid()}.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

# Sign-in throttling (django-axes, accounts/throttle.py): failures per account and per client address,
# counted over the cool-off period; a lock ends RCB_LOGIN_COOLOFF_MINUTES after the last failure.
# Staff unlock in the admin (Axes: access attempts) or with manage.py axes_reset_username / axes_reset_ip.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
RCB_LOGIN_FAILURE_LIMIT = int(os.environ.get("RCB_LOGIN_FAILURE_LIMIT") or "5")
RCB_LOGIN_ADDRESS_FAILURE_LIMIT = int(os.environ.get("RCB_LOGIN_ADDRESS_FAILURE_LIMIT") or "50")
RCB_LOGIN_COOLOFF_MINUTES = float(os.environ.get("RCB_LOGIN_COOLOFF_MINUTES") or "15")
# reverse proxies in front of the site that append the client's address to X-Forwarded-For (0: none;
# then REMOTE_ADDR is the client). Used for the address limits of sign-ins and sign-ups.
RCB_TRUSTED_PROXIES = int(os.environ.get("RCB_TRUSTED_PROXIES") or "0")
AXES_HANDLER = "accounts.throttle.LoginThrottleHandler"
AXES_FAILURE_LIMIT = RCB_LOGIN_FAILURE_LIMIT
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_COOLOFF_TIME = dt.timedelta(minutes=RCB_LOGIN_COOLOFF_MINUTES)
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False  # refused attempts neither count nor extend a lock
AXES_CLIENT_IP_CALLABLE = "accounts.throttle.client_address"
AXES_LOCKOUT_CALLABLE = "accounts.throttle.lockout_response"
# sign-ups (POSTs of the form) per client address and window
RCB_SIGNUP_LIMIT = int(os.environ.get("RCB_SIGNUP_LIMIT") or "5")
RCB_SIGNUP_WINDOW_MINUTES = float(os.environ.get("RCB_SIGNUP_WINDOW_MINUTES") or "60")

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    # names with a content hash (css/site.3f2a1c.css), served compressed and cached for a year
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    # paper versions by content hash (scoring.paper_store): the one place a worker gets paper files from
    "papers": {"BACKEND": "django.core.files.storage.FileSystemStorage",
               "OPTIONS": {"location": os.environ.get("RCB_PAPER_STORAGE_ROOT") or str(VAR_DIR / "paper-store")}},
}
if os.environ.get("RCB_PAPER_STORAGE", "file").strip().lower() == "s3":
    # an S3-compatible bucket (django-storages); credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
    STORAGES["papers"] = {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": {
        "bucket_name": os.environ.get("RCB_PAPER_S3_BUCKET", ""),
        "endpoint_url": os.environ.get("RCB_PAPER_S3_ENDPOINT_URL") or None,
        "region_name": os.environ.get("RCB_PAPER_S3_REGION") or None,
        "location": os.environ.get("RCB_PAPER_S3_PREFIX", "papers"),
        "file_overwrite": False, "default_acl": None, "querystring_auth": False,
    }}
# production serves the collected, compressed copies (collectstatic); finders are for development
WHITENOISE_USE_FINDERS = DEBUG
MEDIA_ROOT = Path(os.environ.get("RCB_MEDIA_ROOT", VAR_DIR / "media"))

# Security headers (CSP is set by leaderboard.middleware: no inline scripts anywhere)
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CONTENT_TYPE_NOSNIFF = True
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
# HTTPS (docs/deploy.md "HTTPS"): off by default, so scripts/run.sh serves plain HTTP on localhost.
# HSTS is only sent on requests Django sees as secure: behind a TLS proxy, name the header it sets
# (DJANGO_SECURE_PROXY_SSL_HEADER=X-Forwarded-Proto, or NAME,VALUE; the proxy must overwrite the
# client's own). The health ping stays reachable over plain HTTP for the proxy's checks.
SECURE_HSTS_SECONDS = int(os.environ.get("DJANGO_SECURE_HSTS_SECONDS") or "0")
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("DJANGO_SECURE_HSTS_INCLUDE_SUBDOMAINS")
SECURE_HSTS_PRELOAD = env_bool("DJANGO_SECURE_HSTS_PRELOAD")
SECURE_SSL_REDIRECT = env_bool("DJANGO_SECURE_SSL_REDIRECT")
SECURE_REDIRECT_EXEMPT = [r"^api/v1/ping$"]


def proxy_ssl_header(raw: str) -> tuple[str, str] | None:
    """``X-Forwarded-Proto`` or ``X-Forwarded-Proto,https`` -> ("HTTP_X_FORWARDED_PROTO", "https")."""
    name, _, value = raw.strip().partition(",")
    if not name.strip():
        return None
    meta = name.strip().upper().replace("-", "_")
    return (meta if meta.startswith("HTTP_") else f"HTTP_{meta}"), (value.strip() or "https")


SECURE_PROXY_SSL_HEADER = proxy_ssl_header(os.environ.get("DJANGO_SECURE_PROXY_SSL_HEADER", ""))

EMAIL_BACKEND = os.environ.get("DJANGO_EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = os.environ.get("DJANGO_DEFAULT_FROM_EMAIL", "ResearchCodeBench Hub <noreply@localhost>")

# scripts/run.sh's own Redis listens on a socket in var/: commands typed in a shell find it there
RUN_REDIS_SOCKET = VAR_DIR / "redis" / "redis.sock"
REDIS_URL = os.environ.get("REDIS_URL") or (
    f"unix://{RUN_REDIS_SOCKET}?db=0" if RUN_REDIS_SOCKET.is_socket() else "redis://127.0.0.1:6379/0"
)
RQ_QUEUES = {
    name: {"URL": REDIS_URL, "DEFAULT_TIMEOUT": int(os.environ.get("RCB_JOB_TIMEOUT", "3600"))}
    for name in ("default", "scoring", "contributions", "generation")
}
# `manage.py rqworker` makes this worker: scoring jobs run in the worker process itself, which keeps
# warm sandboxes between them (scoring.sandbox.job_sandbox); other queues' jobs get a forked work horse
RQ = {"WORKER_CLASS": "scoring.queue.ScoringWorker"}

# Django's cache: the page cache (leaderboard.page_cache), the API's responses and selector figures.
# redis (shared by every process; production), locmem (per process) or file (shared, no Redis).
# Empty: redis when a Redis is configured (REDIS_URL, or scripts/run.sh's own) and DJANGO_DEBUG is off,
# else locmem.
RCB_CACHE = (os.environ.get("RCB_CACHE") or (
    "redis" if not DEBUG and (os.environ.get("REDIS_URL") or REDIS_URL.startswith("unix://")) else "locmem"
)).lower()
if RCB_CACHE == "redis":
    # a Redis that does not answer within a second counts as an empty cache: the site renders afresh
    CACHES = {"default": {"BACKEND": "leaderboard.cache_backend.TolerantRedisCache", "LOCATION": REDIS_URL,
                          "KEY_PREFIX": "rcb-cache", "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1}}}
elif RCB_CACHE == "file":
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.filebased.FileBasedCache",
                          "LOCATION": str(VAR_DIR / "cache"), "OPTIONS": {"MAX_ENTRIES": 5000}}}
elif RCB_CACHE == "locmem":
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "OPTIONS": {"MAX_ENTRIES": 1000}}}
else:
    raise ImproperlyConfigured(f"RCB_CACHE={RCB_CACHE!r}: use redis, locmem or file")
# Page cache: seconds an entry is kept (keys change with every write anyway), and the Cache-Control
# ages of public pages, CSV and the API's tables: browsers (max-age; 0 = revalidate each time with
# the ETag) and shared proxies/CDNs (s-maxage). RCB_PAGE_CACHE=0 renders every page afresh.
RCB_PAGE_CACHE = env_bool("RCB_PAGE_CACHE", True)
RCB_PAGE_CACHE_SECONDS = int(os.environ.get("RCB_PAGE_CACHE_SECONDS", "3600"))
RCB_PAGE_CACHE_MAX_AGE = int(os.environ.get("RCB_PAGE_CACHE_MAX_AGE", "0"))
RCB_PAGE_CACHE_SHARED_MAX_AGE = int(os.environ.get("RCB_PAGE_CACHE_SHARED_MAX_AGE", "10"))
# MB of the entries each process keeps in memory beside the shared cache (never stale: keys move on writes)
RCB_PAGE_CACHE_LOCAL_MB = int(os.environ.get("RCB_PAGE_CACHE_LOCAL_MB", "32"))

# Scoring engine
RCB_SANDBOX_BACKEND = os.environ.get("RCB_SANDBOX_BACKEND", "auto")
RCB_PYTHON = os.environ.get("RCB_PYTHON", "")
# Named environments (benchmark_core/environments.py) for bwrap/local: the venvs built by
# `python -m benchmark_core env build PSET --dir DIR`, and/or explicit NAME=PYTHON pairs (comma-separated).
# A paper whose environment is neither runs in RCB_PYTHON; if its reference code fails there, its jobs wait
# as environment errors (/staff/environments/).
RCB_ENVS_DIR = os.environ.get("RCB_ENVS_DIR", str(VAR_DIR / "envs"))
RCB_ENV_PYTHONS = os.environ.get("RCB_ENV_PYTHONS", "")
RCB_PSET_ROOT = Path(os.environ.get("RCB_PSET_ROOT", VAR_DIR / "psets"))
RCB_RUN_TIMEOUT = float(os.environ.get("RCB_RUN_TIMEOUT", "60"))
# where a worker unpacks the paper versions its jobs name (by content hash; see scoring/paper_store.py)
RCB_PAPER_CACHE = Path(os.environ.get("RCB_PAPER_CACHE") or VAR_DIR / "paper-cache")
RCB_PAPER_ARCHIVE_MAX_BYTES = int(float(os.environ.get("RCB_PAPER_ARCHIVE_MAX_MB") or "500") * 1024 * 1024)
RCB_PAPER_ARCHIVE_MAX_FILES = int(os.environ.get("RCB_PAPER_ARCHIVE_MAX_FILES") or "20000")

# Paper contributions (see contributions/services.py): untrusted zips and code
RCB_CONTRIB_MAX_UPLOAD_MB = int(os.environ.get("RCB_CONTRIB_MAX_UPLOAD_MB", "20"))
RCB_CONTRIB_MAX_UNPACKED_MB = int(os.environ.get("RCB_CONTRIB_MAX_UNPACKED_MB", "100"))
RCB_CONTRIB_MAX_FILES = int(os.environ.get("RCB_CONTRIB_MAX_FILES", "500"))
RCB_CONTRIB_MAX_RATIO = float(os.environ.get("RCB_CONTRIB_MAX_RATIO", "100"))
RCB_CONTRIB_RUNTIME_BUDGET = float(os.environ.get("RCB_CONTRIB_RUNTIME_BUDGET", "30"))
RCB_CONTRIB_JOB_TIMEOUT = int(os.environ.get("RCB_CONTRIB_JOB_TIMEOUT", "3600"))

# Submissions (see submissions/upload.py and submissions/lifecycle.py)
RCB_ALLOW_LOCAL_SANDBOX = env_bool("RCB_ALLOW_LOCAL_SANDBOX")  # the local backend isolates nothing: trusted data only
RCB_SUBMISSION_MAX_MB = float(os.environ.get("RCB_SUBMISSION_MAX_MB", "20"))
RCB_SUBMISSIONS_PER_DAY = int(os.environ.get("RCB_SUBMISSIONS_PER_DAY", "5"))
RCB_HEARTBEAT_SECONDS = float(os.environ.get("RCB_HEARTBEAT_SECONDS", "5"))
RCB_HEARTBEAT_STALE_SECONDS = float(os.environ.get("RCB_HEARTBEAT_STALE_SECONDS", "60"))
RCB_JOB_MAX_ATTEMPTS = int(os.environ.get("RCB_JOB_MAX_ATTEMPTS", "3"))
# Scoring workers (scoring.queue.ScoringWorker): parallel runs of one (submission, paper) job; the warm
# sandboxes a worker keeps between jobs (benchmark_core.sandbox.pool): at most RCB_SANDBOX_POOL_SESSIONS,
# closed after RCB_SANDBOX_POOL_IDLE_SECONDS idle, least recently used first while they hold more than
# RCB_SANDBOX_POOL_MEMORY_MB together (0: no memory cap); RCB_SANDBOX_POOL=0 opens a sandbox per job.
# Default: the host's cores shared by the RQ workers it runs (RCB_WORKERS, which `manage.py workers`
# exports to them; blank: 1), so that the runs in flight on a host never outnumber its cores
# (two workers on two cores: one run at a time each; benchmark_core.sandbox.base.threads_per_run).
RCB_WORKERS = max(1, int(os.environ.get("RCB_WORKERS") or 1))
RCB_SCORING_THREADS = int(os.environ.get("RCB_SCORING_THREADS") or threads_per_run(RCB_WORKERS))
RCB_SANDBOX_POOL = env_bool("RCB_SANDBOX_POOL", True)
RCB_SANDBOX_POOL_SESSIONS = int(os.environ.get("RCB_SANDBOX_POOL_SESSIONS", "16"))
RCB_SANDBOX_POOL_IDLE_SECONDS = float(os.environ.get("RCB_SANDBOX_POOL_IDLE_SECONDS", "900"))
RCB_SANDBOX_POOL_MEMORY_MB = int(os.environ.get("RCB_SANDBOX_POOL_MEMORY_MB", "4096"))
# papers' reference outcomes by (paper content, environment, harness version), shared by this host's
# workers and kept over restarts (a passing outcome only: a failing one is run again by every job)
RCB_REFERENCE_CACHE = Path(os.environ.get("RCB_REFERENCE_CACHE") or VAR_DIR / "cache" / "references.sqlite3")
RCB_SITE_URL = os.environ.get("RCB_SITE_URL", "http://localhost:8000")  # for links in e-mails
# Evaluations run here (submissions/runs.py): the `generation` queue asks a model's endpoint for the answers.
# RCB_GENERATION_SECRET: the Fernet key (32 url-safe base64 bytes; `python -c "from cryptography.fernet import
# Fernet; print(Fernet.generate_key().decode())"`) that encrypts the API keys users give for a run; without it
# runs with an API key are refused (runs against keyless endpoints still work).
RCB_GENERATION_SECRET = os.environ.get("RCB_GENERATION_SECRET", "")
# endpoints whose host resolves to a loopback, private, link-local or metadata address are refused unless
# named here (host names or addresses, comma-separated; CIDR networks too), e.g. a local vLLM
RCB_GENERATION_ALLOWED_HOSTS = [h.strip().lower() for h in os.environ.get("RCB_GENERATION_ALLOWED_HOSTS", "").split(",")
                                if h.strip()]
RCB_GENERATION_DIR = Path(os.environ.get("RCB_GENERATION_DIR") or VAR_DIR / "generation")
RCB_GENERATION_CONCURRENCY = int(os.environ.get("RCB_GENERATION_CONCURRENCY", "4"))
RCB_GENERATION_REQUEST_TIMEOUT = float(os.environ.get("RCB_GENERATION_REQUEST_TIMEOUT", "600"))
RCB_GENERATION_MAX_RETRIES = int(os.environ.get("RCB_GENERATION_MAX_RETRIES", "8"))
RCB_GENERATION_JOB_TIMEOUT = int(os.environ.get("RCB_GENERATION_JOB_TIMEOUT", str(6 * 3600)))
# per evaluation run: caps on requests (snippets x samples), tokens (requests x max_tokens, plus the prompts)
# and cost; a run that could exceed one is refused up front
RCB_RUN_MAX_REQUESTS = int(os.environ.get("RCB_RUN_MAX_REQUESTS", "5000"))
RCB_RUN_MAX_TOKENS = int(os.environ.get("RCB_RUN_MAX_TOKENS", "50000000"))
RCB_RUN_MAX_COST_USD = float(os.environ.get("RCB_RUN_MAX_COST_USD", "50"))
RCB_RUN_DEFAULT_MAX_TOKENS = int(os.environ.get("RCB_RUN_DEFAULT_MAX_TOKENS", "4096"))
RCB_RUNS_ACTIVE_PER_USER = int(os.environ.get("RCB_RUNS_ACTIVE_PER_USER", "2"))
LOGIN_REDIRECT_URL = "/accounts/profile/"
LOGOUT_REDIRECT_URL = "/"
# uploads above this go to a temporary file instead of memory; the submission limit is checked on its own
FILE_UPLOAD_MAX_MEMORY_SIZE = 5 * 1024 * 1024

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("DJANGO_LOG_LEVEL", "INFO")},
}
