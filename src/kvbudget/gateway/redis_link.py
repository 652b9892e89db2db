"""The Redis of ``--state redis://HOST:PORT/DB`` (gateway/shared.py): its URL with the password hidden for
messages, the start-up check that names the fix, and the one error a failing Redis raises to the gateway."""

from __future__ import annotations

from urllib.parse import urlsplit


def redacted(url: str) -> str:
    """The URL without its password (for messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username or ''}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return parts._replace(netloc=netloc).geturl()


def check(url: str) -> None:
    """At start-up: one line naming the fix when the redis package is missing or Redis cannot be reached."""
    import importlib.util

    from kvbudget.errors import InputError, MissingExtraError

    if importlib.util.find_spec("redis") is None:
        raise MissingExtraError("kvbudget gateway --state redis://... needs redis: pip install 'kvbudget[gateway]'")
    import redis

    client = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
    try:
        client.ping()
    except (redis.exceptions.RedisError, OSError) as exc:
        raise InputError(f"--state {redacted(url)}: cannot reach Redis ({type(exc).__name__}: {exc})") from None
    finally:
        client.close()


class StateUnavailable(Exception):
    """Redis could not be reached or answered with an error (the message names which)."""
