"""From parsed options to a request: the one step every command takes before it calls the library.

Options default to ``None`` ("not given"), so each request's own defaults apply (kvbudget.requests): a default
lives in one place for the command line, the Python API and the web API alike.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from typing import TypeVar

    from kvbudget.requests.base import Request

    R = TypeVar("R", bound=Request)


def request_from(cls: type[R], args: argparse.Namespace, **changes: object) -> R:
    """The ``cls`` request from the options of ``args`` it has (the rest are the command's own: --json, --units)."""
    given = vars(args)
    options = {f.name: given[f.name] for f in fields(cls) if f.name in given}
    return cls.from_options({**options, **changes})
