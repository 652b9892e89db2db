"""The `kvbudget workload` commands (parse, call, render). Filled in by the workload work (issue 4)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    return {}
