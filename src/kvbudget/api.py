"""The Python API: what the commands compute, as typed results with ``.to_dict()`` (the commands' JSON documents).

    import kvbudget
    report = kvbudget.cost("llama-3.1-70b", tokens="32k")       # CostReport
    plan = kvbudget.plan("qwen3-32b", gpu="h100-sxm", engine="vllm", context="32k")   # Plan
    rows = kvbudget.compare(["llama-3.1-8b"], gpus=["h100-sxm", "h200"], contexts=["32k"])   # [Row]
    study = kvbudget.simulate("llama-3.1-8b", workload="examples/coding-agent.toml", gpu="h100-sxm")   # Study

Options are named as the command-line options (``kv_dtype`` is ``--kv-dtype``) and take the same values (sizes
as ``"32k"`` or ints, memory as ``"80GB"``); each call goes through the command's own parser, so a value the
CLI refuses is refused here with the same one-line InputError. Nothing heavy is imported until a call needs it.
Documented with examples in docs/api.md (run as tests).
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvbudget.cost import CostReport
    from kvbudget.plan.compare import Row
    from kvbudget.plan.plan import Plan
    from kvbudget.simulate.study import Study

Option = str | int | float | bool | None

__all__ = ["compare", "cost", "plan", "simulate"]


def _argv(command: str, positional: Sequence[str], options: dict[str, Option]) -> list[str]:
    argv = [command, *positional]
    for name, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return argv


def _parse(command: str, positional: Sequence[str], options: dict[str, Option]) -> argparse.Namespace:
    from kvbudget.cli.main import RaisingParser, build_parser

    return build_parser(RaisingParser, command=command).parse_args(_argv(command, positional, options))


def _joined(values: str | Iterable[str]) -> str:
    return values if isinstance(values, str) else ",".join(str(v) for v in values)


def cost(
    model: str,
    *,
    engine: str = "ideal",
    tokens: str | int = "32k",
    sequences: int = 1,
    kv_dtype: str = "auto",
    tp: int = 1,
    **options: Option,
) -> CostReport:
    """Bytes of the KV cache per token, per sequence and for ``sequences`` sequences (``kvbudget cost``)."""
    from kvbudget.cli.main import cost_report

    chosen = {"engine": engine, "tokens": tokens, "sequences": sequences, "kv_dtype": kv_dtype, "tp": tp}
    return cost_report(_parse("cost", [model], {**chosen, **options}))


def plan(model: str, *, context: str | int, engine: str = "ideal", **options: Option) -> Plan:
    """The capacity plan of one deployment (``kvbudget plan``): give ``gpu=`` or ``gpu_memory=``."""
    from kvbudget.cli.plan import plan_inputs
    from kvbudget.plan.plan import make_plan

    args = _parse("plan", [model], {"context": context, "engine": engine, **options})
    return make_plan(plan_inputs(args)[0])


def compare(
    models: str | Iterable[str],
    *,
    gpus: str | Iterable[str],
    contexts: str | Iterable[str | int],
    engines: str | Iterable[str] = "vllm",
    kv_dtypes: str | Iterable[str] = "auto",
    prices: dict[str, str | float] | None = None,
    **options: Option,
) -> list[Row]:
    """Deployments side by side (``kvbudget compare``): one Row per combination, best first."""
    from kvbudget.cli.compare import rows_for

    price = None
    if prices:
        price = [f"{gpu}={value}" for gpu, value in prices.items()]
    args = _parse(
        "compare",
        [_joined(models)],
        {
            "gpu": _joined(gpus),
            "engine": _joined(engines),
            "context": _joined(str(c) for c in ([contexts] if isinstance(contexts, str | int) else contexts)),
            "kv_dtype": _joined(kv_dtypes),
            **options,
        },
    )
    args.price = price
    return rows_for(args)


def simulate(model: str, *, context: str | int = "32k", engine: str = "vllm", **options: Option) -> Study:
    """An event-driven simulation of the deployment under a workload or a trace (``kvbudget simulate``)."""
    from kvbudget.cli.simulate import simulate_study

    trace = options.pop("trace", None)
    args = _parse("simulate", [model], {"context": context, "engine": engine, **options})
    if trace is not None:
        args.trace = [str(trace)]
    return simulate_study(args)
