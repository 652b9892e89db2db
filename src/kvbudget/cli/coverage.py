"""``kvbudget coverage``: the matrix of architecture x reader x engine (exact, or refused with the reason), printed,
written (``--out docs/coverage.md``) or checked against a file (``--check``; exit 1 when it is out of date)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kvbudget.errors import InputError


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    p = sub.add_parser("coverage", help="the architecture x reader x engine matrix (docs/coverage.md)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--out", help="write the matrix to this file")
    group.add_argument("--check", help="exit 1 if this file is not the generated matrix")
    return {"coverage": _cmd_coverage}


def _cmd_coverage(args: argparse.Namespace) -> str:
    from kvbudget.coverage import matrix, render

    text = render(matrix())
    if args.out is not None:
        from kvbudget.safeio import AtomicWriter

        AtomicWriter(args.out or ".", "--out").write(text)  # a folder, a device or a full disk: one error line
        return f"wrote {args.out}"
    if args.check is not None:
        from kvbudget.safeio import read_text

        path = Path(args.check)
        current = read_text(path, "coverage matrix") if path.is_file() else ""
        if current != text:
            raise InputError(f"{args.check} is out of date: run kvbudget coverage --out {args.check}")
        return f"{args.check} is the generated matrix"
    return text.rstrip("\n")
