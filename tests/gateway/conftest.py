"""Fixtures of the gateway tests: one real redis-server per test module that asks for ``redis`` (emptied before
each test), for the shared-state tests (tests/gateway/redis_server.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.gateway.redis_server import Redis, redis_server


@pytest.fixture(scope="module")
def redis_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Redis]:
    pytest.importorskip("redis")
    with redis_server(tmp_path_factory.mktemp("redis")) as running:
        yield running


@pytest.fixture
def redis(redis_process: Redis) -> Redis:
    redis_process.flush()
    return redis_process
