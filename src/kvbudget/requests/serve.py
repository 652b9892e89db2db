"""The web calculator's settings: ``kvbudget serve``, where it listens and the budget of one request
(docs/serve.md). Its defaults live here, as every command's do."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.requests.base import Request, option

DEFAULT_PORT = 8731
# a heavy answer's process is killed past this (web/isolate.py). 120 s, not 30: the README's size question, checked
# by simulation, measured 25-50 s on a real server on a shared 2-core machine (docs/serve.md), so a budget near that
# time turned the page's headline question into a 503 on a busy machine; 2 minutes still bounds a hung answer.
REQUEST_SECONDS = 120.0
# bytes of memory one answer's process may add (Linux). Measured: a 64 x 64 table and a 200-row compare, the
# largest answers the API takes, each add under 8 MiB; an uploaded GGUF's header is at most 64 MiB.
REQUEST_MEMORY = 2**30


@dataclass(frozen=True, kw_only=True)
class ServeRequest(Request):
    """Serve the calculator and its JSON API on ``host``:``port``, each heavy answer in a process of its own that
    is stopped past ``request_seconds`` and held to ``request_memory`` more memory."""

    command = "serve"
    host: str = option("127.0.0.1", "text")
    port: int = option(DEFAULT_PORT, "port")
    request_seconds: float = option(REQUEST_SECONDS, "seconds")
    request_memory: int = option(REQUEST_MEMORY, "memory")
