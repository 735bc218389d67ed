# The site's image: web (gunicorn), RQ workers and the watchdog all run from it (docker-compose.yml).
#
#   docker build -t rcbhub .
#   docker build --build-arg BASE=rcb-sandbox-base:TAG -t rcbhub .   # offline: the Debian base that
#                                                                     # docker/build-base.sh makes
ARG BASE=python:3.11-slim-bookworm
FROM ${BASE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH

# bubblewrap: the sandbox backend for hosts without a Docker engine for the workers
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends bubblewrap ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && python3 -m venv /opt/venv

WORKDIR /app
COPY requirements.txt ./
RUN pip install -r requirements.txt

COPY . .
RUN DJANGO_DEBUG=1 python manage.py collectstatic --noinput -v0 \
    && useradd --system --uid 10001 --user-group --home-dir /app --shell /usr/sbin/nologin rcb \
    && mkdir -p /app/var \
    && chown -R rcb:rcb /app/var

USER rcb
ENV RCB_VAR_DIR=/app/var \
    DJANGO_DEBUG=0
EXPOSE 8000
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s \
    CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/api/v1/ping', timeout=4)" || exit 1
CMD ["gunicorn", "rcbsite.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", \
     "--timeout", "120", "--graceful-timeout", "30", "--access-logfile", "-"]
