"""JSON Schemas (draft 2020-12) of the documents the commands print with ``--json``: cost, plan, compare,
simulate, calibrate, report, and the error document every command prints under --json when it fails. Each document
carries ``schema_version``; tests/test_schemas.py validates real outputs against these files."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

NAMES = ("cost", "plan", "compare", "simulate", "calibrate", "report", "error")


def schema(name: str) -> dict[str, Any]:
    """The schema of ``kvbudget <name> --json`` (or ``error``)."""
    if name not in NAMES:
        raise KeyError(f"no schema {name!r}; there are: {', '.join(NAMES)}")
    data: dict[str, Any] = json.loads(resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8"))
    return data
