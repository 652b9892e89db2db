"""``--keys FILE``: gateway API keys, each with a quota of resident sessions.

The file is a JSON object, one entry per team (the name is what metrics and the namespace of its sessions
show; the key itself is never shown):

    {"team-a": {"key": "sk-...", "sessions": 4},
     "team-b": {"sha256": "<hex digest of the key>", "sessions": 6}}

``sha256`` lets the file hold no secret. A request carries its key as OpenAI's clients send one,
``Authorization: Bearer KEY``, or as ``x-api-key``; a missing or unknown key is a 401 in OpenAI's shape. A key's
sessions live in its own namespace (``team-a/<session id>``), so one key cannot reach, end or ride another's
session, and it holds at most its quota of sessions (resident or waiting; past it a 429 at once).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kvbudget.errors import InputError

NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
HEX = re.compile(r"[0-9a-f]{64}")


class Unauthorized(Exception):
    """No key, or a key the file does not hold (the message says which, never the key)."""


@dataclass(frozen=True)
class Keys:
    by_digest: dict[str, str]  # sha256 hex of a key -> its name
    quota: dict[str, int]  # name -> resident sessions at most

    def identify(self, headers: Mapping[str, str]) -> str:
        """The name of the key a request carries; Unauthorized when none or unknown."""
        given = headers.get("x-api-key", "").strip()
        if not given:
            scheme, _, token = headers.get("authorization", "").strip().partition(" ")
            given = token.strip() if scheme.lower() == "bearer" else ""
        if not given:
            raise Unauthorized("no API key: send Authorization: Bearer KEY (the gateway's key, from --keys)")
        name = self.by_digest.get(hashlib.sha256(given.encode()).hexdigest())
        if name is None:
            raise Unauthorized("incorrect API key provided: this gateway does not know it")
        return name


def load(path: Path) -> Keys:
    """Read a keys file; one InputError naming the entry and the fix for anything else."""
    where = f"--keys {path}"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except ValueError:
        raise InputError(f'{where}: not JSON; write {{"team-a": {{"key": "sk-...", "sessions": 4}}}}') from None
    if not isinstance(doc, dict) or not doc:
        raise InputError(f'{where}: give a JSON object of teams, e.g. {{"team-a": {{"key": "sk-...", "sessions": 4}}}}')
    by_digest: dict[str, str] = {}
    quota: dict[str, int] = {}
    for name, entry in doc.items():
        if not NAME.fullmatch(name):
            raise InputError(f"{where}: team {name!r}: name it with 1-64 letters, digits, '_', '.' or '-'")
        if not isinstance(entry, dict) or set(entry) - {"key", "sha256", "sessions"}:
            raise InputError(f'{where}: team {name}: give {{"key": "...", "sessions": N}} (or "sha256" for "key")')
        sessions = entry.get("sessions")
        if not isinstance(sessions, int) or isinstance(sessions, bool) or sessions < 1:
            raise InputError(f"{where}: team {name}: 'sessions' must be a whole number >= 1 (its session quota)")
        key, digest = entry.get("key"), entry.get("sha256")
        if isinstance(key, str) and digest is None and len(key) >= 8 and key.isprintable() and " " not in key:
            digest = hashlib.sha256(key.encode()).hexdigest()
        elif not (key is None and isinstance(digest, str) and HEX.fullmatch(digest)):
            raise InputError(
                f"{where}: team {name}: give 'key' (8 or more printable characters, no spaces) or 'sha256' "
                "(its 64 lower-case hex digits), not both"
            )
        if digest in by_digest:
            raise InputError(f"{where}: team {name}: the same key as team {by_digest[digest]}; give each its own")
        by_digest[digest] = name
        quota[name] = sessions
    return Keys(by_digest, quota)


def owner(session_id: str) -> str:
    """The key name of a namespaced session id (``team-a/abc`` -> ``team-a``)."""
    return session_id.split("/", 1)[0]
