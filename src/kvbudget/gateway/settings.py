"""What the gateway enforces: the request's options, with cap, sessions and engine taken from a plan when
``--from-plan`` names one (``kvbudget plan --json``: ``context`` is the cap the plan sized for, ``sessions``
the sessions per engine instance, ``engine.name`` the engine); an option given on the command line wins."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from kvbudget.errors import InputError
from kvbudget.gateway.keys import Keys
from kvbudget.gateway.keys import load as load_keys
from kvbudget.requests.gateway import GatewayRequest

# kvbudget's engine names (plan --json engine.name) -> how the gateway counts tokens
_COUNTERS = {"llamacpp": "llamacpp", "llama.cpp": "llamacpp", "vllm": "vllm"}


@dataclass(frozen=True)
class Settings:
    upstreams: tuple[str, ...]  # scheme://host:port, no trailing slash; a session sticks to one
    cap: int
    sessions: int
    engine: str  # auto, llamacpp, vllm or other
    on_cap: str
    idle_timeout_s: float
    queue_timeout_s: float
    max_queue: int
    max_body: int
    upstream_timeout_s: float
    record: Path | None
    health_interval_s: float  # how often each upstream's /health is checked
    upstream_key: str | None  # the engines' API key (from the environment variable --upstream-key-env names)
    keys: Keys | None  # --keys: API keys with session quotas; None: no keys (Authorization passed through)
    state: str | None  # None: in memory; else a redis:// or rediss:// URL shared by the replicas

    @property
    def upstream(self) -> str:
        """The first upstream (the one of a single-upstream gateway)."""
        return self.upstreams[0]


def _plan(path: str) -> tuple[int, int, str]:
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"--from-plan {path}: cannot read it ({exc.strerror or exc})") from None
    except ValueError:
        raise InputError(f"--from-plan {path}: not JSON; write it with kvbudget plan ... --json > plan.json") from None
    if not isinstance(doc, dict):
        raise InputError(f"--from-plan {path}: not a kvbudget plan --json document")
    context, sessions, engine = doc.get("context"), doc.get("sessions"), doc.get("engine")
    name = engine.get("name") if isinstance(engine, dict) else None
    ok = all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (context, sessions))
    if not ok or not isinstance(name, str):
        raise InputError(
            f"--from-plan {path}: needs a positive 'context', 'sessions' and an 'engine' name "
            "(a kvbudget plan --json document whose plan fits at least one session)"
        )
    assert isinstance(context, int) and isinstance(sessions, int)
    return context, sessions, name


def _upstream(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(f"--upstream {url}: give the engine's base URL, e.g. http://127.0.0.1:8000")
    if parts.query or parts.fragment:
        raise InputError(f"--upstream {url}: give the base URL without a query or fragment")
    path = parts.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]  # the gateway forwards /v1/... paths as the client sent them
    return f"{parts.scheme}://{parts.netloc}{path}"


def _upstreams(urls: tuple[str, ...]) -> tuple[str, ...]:
    read = tuple(_upstream(url) for url in urls)
    twice = sorted({url for url in read if read.count(url) > 1})
    if twice:
        raise InputError(f"--upstream {twice[0]}: given twice; give each engine once")
    return read


def _state(url: str | None) -> str | None:
    if url is None or url == "memory":
        return None
    parts = urlsplit(url)
    if parts.scheme not in ("redis", "rediss", "unix") or not (parts.hostname or parts.path):
        raise InputError(f"--state {url}: give memory, or Redis's URL, e.g. redis://127.0.0.1:6379/0")
    db = parts.path.strip("/")
    if parts.scheme != "unix" and db and not db.isdigit():
        raise InputError(f"--state {url}: the path is the database number, e.g. redis://127.0.0.1:6379/0")
    return url


def _secret(variable: str) -> str:
    value = os.environ.get(variable, "").strip()
    if not value:
        raise InputError(
            f"--upstream-key-env {variable}: the variable is not set; export {variable}=<the engine's key>"
        )
    if not value.isprintable() or " " in value:
        raise InputError(f"--upstream-key-env {variable}: the key must be printable characters without spaces")
    return value


def resolve(request: GatewayRequest) -> Settings:
    """The settings the gateway runs with; a missing cap or session count is one InputError naming the fix."""
    cap, sessions, engine = request.cap, request.sessions, request.engine
    if request.from_plan is not None:
        plan_cap, plan_sessions, plan_engine = _plan(request.from_plan)
        cap = cap or plan_cap
        sessions = sessions or plan_sessions
        engine = engine or _COUNTERS.get(plan_engine.lower(), "other")
    if cap is None:
        raise InputError("--cap is required (the context cap to hold, e.g. 32k), or --from-plan plan.json")
    if sessions is None:
        raise InputError("--sessions is required (resident sessions to admit), or --from-plan plan.json")
    if request.port > 65535:
        raise InputError(f"--port {request.port}: must be 0 (a free port) to 65535")
    engine = engine or "auto"
    return Settings(
        upstreams=_upstreams(request.upstream),
        cap=cap,
        sessions=sessions,
        engine=_COUNTERS.get(engine, engine),
        on_cap=request.on_cap,
        idle_timeout_s=request.idle_timeout,
        queue_timeout_s=request.queue_timeout,
        max_queue=request.max_queue,
        max_body=request.max_body,
        upstream_timeout_s=request.upstream_timeout,
        record=None if request.record is None else Path(request.record),
        health_interval_s=request.health_interval,
        state=_state(request.state),
        keys=None if request.keys is None else load_keys(Path(request.keys)),
        upstream_key=None if request.upstream_key_env is None else _secret(request.upstream_key_env),
    )
