"""``kvbudget calibrate``: read engines' start-up logs and reconcile them with kvbudget (parse, call, render)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from kvbudget.units import parse_count, parse_tokens

if TYPE_CHECKING:
    from kvbudget.measure.logs.record import SettingValue
    from kvbudget.units import UnitSystem


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    p = sub.add_parser(
        "calibrate",
        help="read a vLLM, SGLang, TensorRT-LLM, llama.cpp or Ollama start-up log: what it measured, and kvbudget "
        "beside it",
    )
    p.add_argument("logs", nargs="+", metavar="LOG", help="start-up log file(s); llama-server needs -lv 4")
    p.add_argument("--model", default=None, help="model to predict for when the log's own name cannot be resolved")
    p.add_argument(
        "--engine",
        default=None,
        choices=["vllm", "sglang", "trtllm", "llamacpp", "ollama"],
        help="force the reader (default: detected)",
    )
    g = p.add_argument_group("settings the log does not state (the log wins where it does)")
    g.add_argument("--tp", default=None, help="tensor-parallel size")
    g.add_argument("--context", default=None, help="max_model_len / context length")
    g.add_argument("--kv-dtype", default=None, help="cache dtype (auto, fp8, q8_0, ...)")
    g.add_argument("--block-size", default=None, help="vLLM/SGLang block (page) size")
    p.add_argument("--units", choices=["si", "iec"], default="iec", help="GB (10^9) or GiB (2^30); default iec")
    p.add_argument("--json", action="store_true", help="print the versioned JSON contract")
    return {"calibrate": _cmd_calibrate}


def given_settings(args: argparse.Namespace) -> dict[str, SettingValue]:
    given: dict[str, SettingValue] = {}
    if args.tp:
        given["tp"] = parse_count(args.tp, what="--tp")
    if args.context:
        given["context"] = parse_tokens(args.context, what="--context")
    if args.kv_dtype:
        given["cache_dtype"] = args.kv_dtype
    if args.block_size:
        given["block_size"] = parse_count(args.block_size, what="--block-size")
    return given


def _cmd_calibrate(args: argparse.Namespace) -> str:
    from kvbudget.measure.calibrate import calibrate
    from kvbudget.measure.logs import read_log
    from kvbudget.render.calibrate import calibration_json, render_calibration

    cals = [calibrate(read_log(path, args.engine), args.model, given_settings(args)) for path in args.logs]
    if args.json:
        docs = [calibration_json(c) for c in cals]
        return json.dumps(docs[0] if len(docs) == 1 else {"schema_version": 1, "logs": docs}, indent=2)
    return "\n\n".join(render_calibration(c, cast("UnitSystem", args.units)) for c in cals)
