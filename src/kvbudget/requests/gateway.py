"""The gateway question: ``kvbudget gateway``, a session gateway in front of serving engines that admits the
planned sessions and holds the planned cap (docs/gateway.md). Its defaults live here, as every command's do."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import Request, option, required

ON_CAP = ("refuse", "truncate", "compact")
# how the gateway counts a request's tokens: through the engine's own endpoints (llama-server: /apply-template
# then /tokenize; vLLM: /tokenize with the messages), or, for an engine without one, from the text's bytes
# (a heuristic, reconciled with the usage the engine returns)
ENGINES = ("auto", "llamacpp", "vllm", "sglang", "ollama", "trtllm", "other")
DEFAULT_PORT = 8740


@dataclass(frozen=True, kw_only=True)
class GatewayRequest(Request):
    """Proxy ``upstream`` (an OpenAI-compatible server), admitting at most ``sessions`` resident sessions and
    holding each request to ``cap`` tokens (prompt + max_tokens), ``on_cap`` deciding what happens past it. With
    ``from_plan`` (a ``kvbudget plan --json`` document), cap, sessions and engine default to the plan's."""

    command = "gateway"
    upstream: tuple[str, ...] = required("text", many=True)  # each engine's base URL; a session sticks to one
    from_plan: str | None = option(None, "text")
    cap: int | None = option(None, "tokens")
    sessions: int | None = option(None, "count")
    engine: str | None = option(None, "text", choices=ENGINES)
    on_cap: str = option("refuse", "text", choices=ON_CAP)
    host: str = option("127.0.0.1", "text")
    port: int = option(DEFAULT_PORT, "port")
    idle_timeout: float = option(600.0, "seconds")
    queue_timeout: float = option(30.0, "seconds")
    max_queue: int = option(1024, "count")  # new sessions waiting at once; past it a 429 at once (floods)
    max_body: int = option(8 * 2**20, "memory")  # bytes of one request body; past it a 413
    upstream_timeout: float = option(600.0, "seconds")  # one upstream response, first byte to last
    record: str | None = option(None, "text")
    health_interval: float = option(5.0, "seconds")  # each upstream's /health this often; 2 failures take it out
    state: str | None = option(None, "text")  # memory (default), or redis://HOST:PORT/DB shared by replicas
    upstream_key_env: str | None = option(None, "text")  # the variable holding the engines' own API key
    keys: str | None = option(None, "text")  # a JSON file: team -> {"key" or "sha256", "sessions": quota}
