"""The `kvbudget workload` commands: ``check`` a workload file, ``fit`` one from traces (parse, call, render)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from kvbudget.errors import InputError


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    p = sub.add_parser("workload", help="agent workload files: check one (Little's law), fit one from traces")
    wsub = p.add_subparsers(dest="workload_command", required=True)

    c = wsub.add_parser("check", help="validate a workload file; means, Little's-law concurrency, retry inflation")
    c.add_argument("file", help="workload file (.toml, or .yaml with the yaml extra); see docs/workload.md")
    c.add_argument("--prefill-rate", default=None, help="prefill tokens/s per sequence (default 10000, a placeholder)")
    c.add_argument("--decode-rate", default=None, help="decode tokens/s per sequence (default 50, a placeholder)")
    c.add_argument("--prefix-uncached", action="store_true", help="prefill the shared prefix for every session")
    c.add_argument(
        "--timeout-share", default=None, help="share of attempts assumed to time out, for [retries] (default 0.05)"
    )
    c.add_argument("--json", action="store_true", help="print the versioned JSON contract")

    f = wsub.add_parser("fit", help="estimate a workload file from traces")
    f.add_argument("traces", nargs="+", help="trace files (see kvbudget trace --help for the formats)")
    f.add_argument("--format", default=None, help="trace format (default: detected)")
    f.add_argument("--out", default=None, help="write the workload here (.toml); default: print it")
    f.add_argument(
        "--rate", default=None, help="top-level sessions/s, when the trace cannot give one (WEKA files start at 0)"
    )
    f.add_argument(
        "--prefix",
        default=None,
        help="tokens of the shared prefix, taken off every first prompt (default: what the trace declares, else 0)",
    )
    f.add_argument("--method", choices=["empirical", "lognormal"], default="empirical", help="token/pause fit")
    f.add_argument("--name", default="", help="name written into the workload file")
    f.add_argument("--strict", action="store_true", help="fail on the first bad row instead of skipping it")
    f.add_argument(
        "--sessions-span-files",
        action="store_true",
        help="the files are parts of one trace: a session id continues across them (default: per file)",
    )
    f.add_argument("--json", action="store_true", help="print the versioned JSON contract")
    return {"workload": _cmd_workload}


def _positive(text: str | None, what: str, *, below_one: bool = False) -> float | None:
    from kvbudget.units import parse_real

    if text is None:
        return None
    if below_one:
        value = parse_real(text, what=what, low=0, high=1, noun="(a share of attempts)", example="0.05")
        if value >= 1:
            raise InputError(f"{what}: {text} must be at least 0 and below 1 (a share of attempts)")
        return value
    value = parse_real(text, what=what, low=0, high=1e12, noun="(a positive number)")
    if value <= 0:
        raise InputError(f"{what}: {text} must be a positive number")
    return value


def _cmd_workload(args: argparse.Namespace) -> str:
    if args.workload_command == "check":
        return _check(args)
    return _fit(args)


def _check(args: argparse.Namespace) -> str:
    from kvbudget.workload.check import DEFAULT_TIMEOUT_SHARE, check_workload
    from kvbudget.workload.little import DEFAULT_DECODE_TOKENS_PER_S, DEFAULT_PREFILL_TOKENS_PER_S, ServiceRates
    from kvbudget.workload.loader import load_workload

    workload = load_workload(args.file)
    rates = ServiceRates(
        prefill_tokens_per_s=_positive(args.prefill_rate, "--prefill-rate") or DEFAULT_PREFILL_TOKENS_PER_S,
        decode_tokens_per_s=_positive(args.decode_rate, "--decode-rate") or DEFAULT_DECODE_TOKENS_PER_S,
        prefix_cached=not args.prefix_uncached,
    )
    share = _positive(args.timeout_share, "--timeout-share", below_one=True)
    check = check_workload(workload, rates, DEFAULT_TIMEOUT_SHARE if share is None else share)
    if args.json:
        return json.dumps(check.to_json(), indent=2)
    from kvbudget.render.workload import render_check

    return render_check(check)


def _fit(args: argparse.Namespace) -> str:
    from kvbudget.render.workload import render_fit
    from kvbudget.units import parse_tokens
    from kvbudget.workload.fit import dump_toml, fit_workload
    from kvbudget.workload.record import BadRow, StepRecord
    from kvbudget.workload.traces import read_records

    prefix = (
        None if args.prefix is None else 0 if args.prefix.strip() == "0" else parse_tokens(args.prefix, what="--prefix")
    )
    rate = _positive(args.rate, "--rate")
    if args.out is not None and Path(args.out).suffix.lower() != ".toml":
        raise InputError(f"--out: {args.out} must end in .toml (fit writes TOML)")
    from kvbudget.safeio import AtomicWriter

    writer = AtomicWriter(args.out, "--out", args.traces) if args.out is not None else None
    bad_rows: list[BadRow] = []
    count = 0

    def counted(records: Iterable[StepRecord]) -> Iterator[StepRecord]:
        nonlocal count
        for rec in records:
            count += 1
            yield rec

    stream = read_records(
        args.traces, fmt=args.format, strict=args.strict, bad_rows=bad_rows, span_files=args.sessions_span_files
    )
    workload = fit_workload(counted(stream), rate_per_s=rate, prefix_tokens=prefix, method=args.method, name=args.name)
    text = dump_toml(workload)
    if writer is not None:
        writer.write(text)
    bad = [str(row) for row in bad_rows]
    if args.json:
        data = {
            "schema_version": 1,
            "traces": list(args.traces),
            "records": count,
            "bad_rows": len(bad),
            "bad_row_details": bad,
            "method": args.method,
            "notes": workload.description.split("; ") if workload.description else [],
            "out": args.out,
            "workload": workload.to_dict(),
        }
        return json.dumps(data, indent=2)
    return render_fit(workload, records=count, bad_rows=bad, out=args.out, toml_text=text)
