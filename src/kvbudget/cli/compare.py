"""The `kvbudget compare` command (parse, call, render): deployments side by side, with costs and rates."""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvbudget.errors import InputError

if TYPE_CHECKING:
    from kvbudget.plan.compare import Choice, Row
    from kvbudget.plan.plan import Plan

SCHEMA_VERSION = 1
MAX_ROWS = 500  # every row is a full plan; more is a sweep for a script
MAX_SIMULATED_ROWS = 24  # each simulated row is a search of several simulator runs (about a second each)


def _list(text: str, what: str) -> list[str]:
    items = [item.strip() for item in text.split(",") if item.strip()]
    if not items:
        raise InputError(f"{what}: give at least one value (comma-separated)")
    return items


def _prices(args: argparse.Namespace) -> dict[str, float]:
    """GPU id -> price per GPU-hour, from --price GPU=PRICE (repeated) and --prices FILE (TOML or JSON)."""
    from kvbudget import hardware
    from kvbudget.units import parse_per_second

    pairs: list[tuple[str, str, str]] = []
    if args.prices:
        from kvbudget.safeio import read_text

        path = Path(args.prices)
        text = read_text(path, "prices file")
        if path.suffix.lower() == ".json":
            from kvbudget.safeio import loads_json

            data = loads_json(text, str(path), "prices file")
        else:
            import tomllib

            try:
                data = tomllib.loads(text)
            except tomllib.TOMLDecodeError as exc:
                raise InputError(f"{path}: not valid TOML ({exc})") from None
        if not isinstance(data, dict):
            raise InputError(f'{path}: a prices file maps GPU names to prices, e.g. h100-sxm = "2.49/h"')
        pairs += [(str(k), str(v), f"{path}: {k}") for k, v in data.items()]
    for item in args.price or []:
        gpu, sep, price = item.partition("=")
        if not sep or not gpu.strip() or not price.strip():
            raise InputError(f"--price {item!r}: write GPU=PRICE, e.g. --price h100-sxm=2.49/h")
        pairs.append((gpu.strip(), price.strip(), f"--price {item}"))
    out: dict[str, float] = {}
    for gpu, price, where in pairs:
        per_s = parse_per_second(price, what=where, default_unit="h")
        out[hardware.gpu(gpu).id] = per_s * 3600
    return out


def _rate(text: str | None, what: str) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{what}: cannot read {text!r} as tokens per second") from None
    if not value > 0 or value == float("inf"):
        raise InputError(f"{what}: {text!r} must be a positive number of tokens per second")
    return value


def _planner(args: argparse.Namespace) -> Callable[[Choice], Plan]:
    from kvbudget.cli.plan import plan_inputs
    from kvbudget.plan.plan import make_plan

    def plan(choice: Choice) -> Plan:
        ns = argparse.Namespace(**vars(args))
        ns.model, ns.gpu, ns.engine, ns.context, ns.kv_dtype = (
            choice.model,
            choice.gpu,
            choice.engine,
            choice.context,
            choice.kv_dtype,
        )
        ns.gpu_memory, ns.sessions, ns.from_log = None, None, None
        return make_plan(plan_inputs(ns)[0])

    return plan


def cmd_compare(args: argparse.Namespace) -> str:
    rows = rows_for(args)
    rate = rows[0].rate_per_s if rows else None
    session = next((row.session for row in rows if row.session is not None), None)
    if args.json:
        doc: dict[str, object] = {
            "schema_version": SCHEMA_VERSION,
            "sort": args.sort,
            "rate_per_s": rate,
            "mean_session_s": session.mean_s if session else None,
            "rows": [row.to_json() for row in rows],
        }
        return json.dumps(doc, indent=2)
    return _render(rows, rate is not None, bool(args.workload), bool(args.simulate))


def rows_for(args: argparse.Namespace) -> list[Row]:
    """Every combination planned, sorted (the Python API's kvbudget.compare returns these)."""
    from kvbudget import hardware
    from kvbudget.plan.compare import SORTS, Choice, compare, sort_rows
    from kvbudget.units import parse_per_second

    if args.sort not in SORTS:
        raise InputError(f"--sort {args.sort}: choose one of {', '.join(SORTS)}")
    models, gpus = _list(args.model, "model"), _list(args.gpu, "--gpu")
    gpu_ids = [hardware.gpu(g).id for g in gpus]
    engines, contexts = _list(args.engine, "--engine"), _list(args.context, "--context")
    dtypes = _list(args.kv_dtype, "--kv-dtype")
    count = len(models) * len(gpus) * len(engines) * len(contexts) * len(dtypes)
    if count > MAX_ROWS:
        raise InputError(f"{count:,} combinations to plan; compare takes at most {MAX_ROWS}: narrow the lists")
    session = None
    if args.workload:
        from kvbudget.workload.little import ServiceRates, session_time
        from kvbudget.workload.loader import load_workload

        default = ServiceRates()
        rates = ServiceRates(
            prefill_tokens_per_s=_rate(args.prefill_rate, "--prefill-rate") or default.prefill_tokens_per_s,
            decode_tokens_per_s=_rate(args.decode_rate, "--decode-rate") or default.decode_tokens_per_s,
        )
        session = session_time(load_workload(args.workload), rates)
    rate = parse_per_second(args.rate, what="--rate", default_unit="s") if args.rate else None
    if rate is not None and session is None:
        raise InputError("--rate needs --workload FILE: Little's law needs the mean session time the workload gives")
    choices = [Choice(*c) for c in itertools.product(models, gpu_ids, engines, contexts, dtypes)]
    planned = compare(choices, _planner(args), prices=_prices(args), session=session, rate_per_s=rate)
    if args.simulate:
        planned = _simulated(args, planned)
    return sort_rows(planned, args.sort)


def _simulated(args: argparse.Namespace, rows: list[Row]) -> list[Row]:
    """Each served row with the simulator's sustained sessions, run as `kvbudget simulate` runs it (the same plan
    options, the engine's own memory policy, the workload), with a shorter search."""
    from dataclasses import replace

    from kvbudget.cli.main import RaisingParser, build_parser
    from kvbudget.cli.simulate import simulate_study
    from kvbudget.plan.compare import Simulated
    from kvbudget.simulate.study import sustained_basis
    from kvbudget.units import parse_count

    if not args.workload:
        raise InputError("--simulate needs --workload FILE: the simulator runs the workload's sessions")
    served = sum(row.plan is not None and row.plan.sessions >= 1 for row in rows)
    if served > MAX_SIMULATED_ROWS:
        raise InputError(
            f"--simulate: {served} served deployments to simulate; it takes at most {MAX_SIMULATED_ROWS} "
            "(each is a search of several simulator runs): narrow the lists"
        )
    search = parse_count(args.search_sessions, what="--search-sessions")
    probes = parse_count(args.search_probes, what="--search-probes")
    parser = build_parser(RaisingParser)
    plan_options = _plan_dests()
    out = []
    for row in rows:
        if row.plan is None or row.plan.sessions < 1:  # nothing served: nothing to simulate
            out.append(row)
            continue
        c = row.choice
        ns = parser.parse_args(["simulate", "--model", c.model, "--workload", args.workload, "--context", c.context])
        for name in plan_options:
            setattr(ns, name, getattr(args, name))
        ns.model_option, ns.model = c.model, None
        ns.gpu, ns.engine, ns.context, ns.kv_dtype = c.gpu, c.engine, c.context, c.kv_dtype
        ns.decode_rate, ns.prefill_rate = args.decode_rate, args.prefill_rate
        ns.sessions, ns.search_sessions, ns.search_probes = str(search), str(search), str(probes)
        study = simulate_study(ns)
        sim = Simulated(study.sustained_sessions, sustained_basis(study), study.target.describe())
        out.append(replace(row, simulated=sim))
    return out


def _money(x: float | None) -> str:
    return "-" if x is None else f"{x:,.4f}" if x < 1 else f"{x:,.2f}"


def _render(rows: list[Row], with_rate: bool, with_workload: bool, with_sim: bool = False) -> str:
    from kvbudget.render.text import table
    from kvbudget.units import format_bytes, format_tokens

    head = ["model", "gpu x n", "engine", "cap", "kv", "sessions", "per session", "$/h", "$/session-h"]
    if with_workload:
        head.append("$/M out tok")
    if with_rate:
        head += ["need", "GPUs"]
    if with_sim:
        head.append("sim sessions")
        if with_rate:
            head.append("GPUs (sim)")
    body = []
    refused = []
    for i, row in enumerate(rows, 1):
        c = row.choice
        if row.plan is None:
            refused.append(f"  [{i}] {c.model} on {c.gpu} ({c.engine}, {c.context}, {c.kv_dtype}): {row.refused}")
            blank = [""] * (len(head) - 6)
            body.append([c.model, c.gpu, c.engine, c.context, c.kv_dtype, f"refused [{i}]", *blank])
            continue
        p = row.plan
        line = [
            p.inputs.spec.name,
            f"{c.gpu} x {p.inputs.gpus}",
            p.inputs.engine.label,
            format_tokens(p.inputs.context),
            p.inputs.kv_dtype_label,
            f"{row.sessions:,}",
            format_bytes(p.per_session_bytes),
            _money(row.cost_per_hour),
            _money(row.cost_per_session_hour),
        ]
        if with_workload:
            line.append(_money(row.cost_per_million_output_tokens))
        if with_rate:
            needed = row.concurrent_needed
            line += [
                "-" if needed is None else f"{needed:,.1f}",
                "-" if row.gpus_needed is None else f"{row.gpus_needed:,}",
            ]
        if with_sim:
            sim = row.simulated.sessions_per_replica if row.simulated else None
            line.append("-" if sim is None else f"{sim * p.replicas:,.1f}")
            if with_rate:
                gpus = row.gpus_needed_simulated
                line.append("-" if gpus is None else f"{gpus:,}")
        body.append(line)
    text = table(head, body, [False, False, False, True, False, *[True] * (len(head) - 5)])
    notes = [
        "",
        "sessions: at the cap, worst case reserved (plan); $/session-h: the deployment's price / those sessions",
    ]
    if with_workload:
        notes.append("$/M out tok: every session slot busy, sessions / E[T] x the workload's output tokens per session")
    if with_rate:
        notes.append("need: concurrent sessions at the rate (Little's law, rate x E[T]); GPUs: replicas x tp x pp")
    if with_sim:
        target = next((r.simulated.target for r in rows if r.simulated), "")
        notes.append(
            "sim sessions: what the simulator sustains on the deployment under the workload (mean live sessions at the "
            f"highest arrival rate meeting the target: {target}; each engine's own memory policy)"
        )
        if with_rate:
            notes.append("GPUs (sim): replicas that each hold the simulated sessions, for the need, x tp x pp")
    if refused:
        notes += ["", "refused:", *refused]
    return text + "\n" + "\n".join(notes)


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    from kvbudget.cli.plan import add_plan_options

    p = sub.add_parser(
        "compare", help="models x GPUs x engines x caps x cache dtypes side by side, with cost and GPUs for a rate"
    )
    add_plan_options(p)
    for action in p._actions:
        if action.dest == "model" and not action.option_strings:
            action.help = "model(s), comma-separated: catalog names, config.json, dirs, .gguf"
        if action.dest in ("gpu", "engine", "context", "kv_dtype"):
            action.help = f"{action.help or ''} (comma-separated list)".strip()
    g = p.add_argument_group("cost and rate")
    g.add_argument("--price", action="append", default=None, help="GPU=PRICE per GPU-hour, e.g. h100-sxm=2.49/h")
    g.add_argument("--prices", default=None, help='a TOML or JSON file: GPU name = price ("2.49/h", "59.76/day")')
    g.add_argument("--rate", default=None, help="new sessions per unit time: 50/h, 0.2/s, 1200/day (needs --workload)")
    g.add_argument(
        "--workload", default=None, help="workload file: the mean session time and tokens (docs/workload.md)"
    )
    g.add_argument("--decode-rate", default=None, help="decode tokens/s per session for the session time")
    g.add_argument("--prefill-rate", default=None, help="prefill tokens/s per session for the session time")
    g.add_argument("--sort", default="sessions", help="sessions (most first), cost ($/session-h) or gpus (for --rate)")
    g = p.add_argument_group("simulation")
    g.add_argument(
        "--simulate",
        action="store_true",
        help="also simulate each served deployment under --workload (its sustained sessions; with --rate, the GPUs "
        f"from them); at most {MAX_SIMULATED_ROWS} deployments",
    )
    g.add_argument("--search-sessions", default="1000", help="--simulate: sessions per search probe (default 1000)")
    g.add_argument("--search-probes", default="6", help="--simulate: runs in each search (default 6)")
    return {"compare": cmd_compare}


def _plan_dests() -> set[str]:
    """The plan options' names, which a simulation of a row takes from compare's."""
    from kvbudget.cli.main import RaisingParser
    from kvbudget.cli.plan import add_plan_options

    p = RaisingParser()
    add_plan_options(p)
    return {a.dest for a in p._actions if a.option_strings and a.dest != "help"} - {
        "gpu",
        "engine",
        "context",
        "kv_dtype",
        "sessions",
        "json",
        "from_log",
        "gpu_memory",
    }
