"""Imported only by ``kvbudget serve``'s fork server (web/isolate.py): answers one small question of every command
the web API serves, so the modules and read-once data (the catalogs) each answer needs are loaded before the fork
server forks; every request's process then starts with them, at the cost of a fork. Measured on the 2-core
development machine under load (web/isolate.py's PRELOAD with this module and the command's own): a child's CPU
before its answer starts fell from 75 ms to 9 ms, a plan answer's wall time from 560 ms to 150 ms (39 ms in a
thread of the server under the same load)."""

from __future__ import annotations

from kvbudget.web import api
from kvbudget.web.uploads import UploadView

_MODEL = [("model", "llama-3.1-8b")]
QUESTIONS: dict[str, list[tuple[str, str]]] = {
    "cost": [*_MODEL, ("tokens", "1k")],
    "table": [*_MODEL, ("tokens", "1k")],
    "plan": [*_MODEL, ("gpu", "h100-sxm"), ("context", "8k")],
    "levers": [*_MODEL, ("gpu", "h100-sxm"), ("context", "8k")],
    "compare": [*_MODEL, ("gpu", "h100-sxm"), ("context", "8k")],
    "size": [*_MODEL, ("gpu", "h100-sxm"), ("context", "8k"), ("sessions", "4")],
    "models": [],
    "speed": [*_MODEL, ("gpu", "h100-sxm")],
}


def warm() -> None:
    """Answer each question once (their answers, or refusals, are dropped: only what they loaded matters)."""
    empty = UploadView(None, {})
    for command, query in QUESTIONS.items():
        api.run(command, query, empty)


warm()
