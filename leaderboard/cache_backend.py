"""Django's Redis cache, except that a Redis that does not answer counts as an empty cache.

The cache only holds what can be computed again (pages, API responses, figures): when Redis is
down the site renders everything afresh and stays up, instead of answering 500 on every page.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from django.core.cache.backends.base import DEFAULT_TIMEOUT
from django.core.cache.backends.redis import RedisCache
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["TolerantRedisCache"]

logger = logging.getLogger(__name__)
_OUTAGE = (RedisConnectionError, RedisTimeoutError, OSError)
_WARN_EVERY = 60.0


class TolerantRedisCache(RedisCache):
    """RedisCache whose reads miss and whose writes are skipped while Redis cannot be reached."""

    _warned_at = 0.0

    def _outage(self, exc: BaseException, default: Any) -> Any:
        now = time.monotonic()
        if now - TolerantRedisCache._warned_at > _WARN_EVERY:  # once a minute, not once a request
            TolerantRedisCache._warned_at = now
            logger.warning("Redis cache unavailable (%s): rendering without it", exc)
        return default

    def get(self, key: Any, default: Any = None, version: int | None = None) -> Any:
        try:
            return super().get(key, default, version)
        except _OUTAGE as exc:
            return self._outage(exc, default)

    def get_many(self, keys: Any, version: int | None = None) -> dict:
        try:
            return super().get_many(keys, version)
        except _OUTAGE as exc:
            return self._outage(exc, {})

    def has_key(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().has_key(key, version)
        except _OUTAGE as exc:
            return self._outage(exc, False)

    def set(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> None:
        try:
            super().set(key, value, timeout, version)
        except _OUTAGE as exc:
            self._outage(exc, None)

    def set_many(self, data: dict, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> list:
        try:
            return super().set_many(data, timeout, version)
        except _OUTAGE as exc:
            return self._outage(exc, list(data))

    def add(self, key: Any, value: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        try:
            return super().add(key, value, timeout, version)
        except _OUTAGE as exc:
            return self._outage(exc, False)

    def delete(self, key: Any, version: int | None = None) -> bool:
        try:
            return super().delete(key, version)
        except _OUTAGE as exc:
            return self._outage(exc, False)

    def touch(self, key: Any, timeout: Any = DEFAULT_TIMEOUT, version: int | None = None) -> bool:
        try:
            return super().touch(key, timeout, version)
        except _OUTAGE as exc:
            return self._outage(exc, False)
