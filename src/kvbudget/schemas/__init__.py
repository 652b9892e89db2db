"""JSON Schemas (draft 2020-12) of the documents the commands print with ``--json``, one file per command
(``trace stats`` is ``trace-stats.json``), and the error document every command prints under --json when it fails.
Each document carries ``schema_version``; tests/test_schemas.py (and the live load-test tests, for ``loadtest``)
validate real outputs against these files. scripts/schema-infer drafts one from sample outputs."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

NAMES = (
    "cost",
    "table",
    "models",
    "gpus",
    "weights",
    "infer",
    "plan",
    "levers",
    "compare",
    "trace-stats",
    "workload-check",
    "simulate",
    "calibrate",
    "loadtest",
    "report",
    "speed",
    "size",
    "error",
)


def schema(name: str) -> dict[str, Any]:
    """The schema of ``kvbudget <name> --json`` (``trace stats`` or ``trace-stats``; or ``error``)."""
    name = name.replace(" ", "-")
    if name not in NAMES:
        raise KeyError(f"no schema {name!r}; there are: {', '.join(NAMES)}")
    data: dict[str, Any] = json.loads(resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8"))
    return data
