"""``kvbudget calibrate``: read engines' start-up logs and reconcile them with kvbudget (parse, call, render)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from kvbudget.cli.options import request_from, spelled

if TYPE_CHECKING:
    from kvbudget.units import UnitSystem


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    p = sub.add_parser(
        "calibrate",
        help="read a vLLM, SGLang, TensorRT-LLM, llama.cpp or Ollama start-up log: what it measured, and kvbudget "
        "beside it",
    )
    p.add_argument("logs", nargs="+", metavar="LOG", help="start-up log file(s); llama-server needs -lv 4")
    p.add_argument("--model", help="model to predict for when the log's own name cannot be resolved")
    p.add_argument(
        "--engine",
        choices=["vllm", "sglang", "trtllm", "llamacpp", "ollama"],
        help="force the reader (default: detected)",
    )
    g = p.add_argument_group("settings the log does not state (the log wins where it does)")
    g.add_argument(*spelled("--tp"), help="tensor-parallel size")
    g.add_argument(*spelled("--context"), help="max_model_len / context length")
    g.add_argument(*spelled("--kv-dtype"), help="cache dtype (auto, fp8, q8_0, ...)")
    g.add_argument("--block-size", help="vLLM/SGLang block (page) size")
    g.add_argument("--startup", help="which start-up of a log holding several: 1, 2, ... or last")
    p.add_argument("--units", choices=["si", "iec"], default="iec", help="GB (10^9) or GiB (2^30); default iec")
    p.add_argument("--json", action="store_true", help="print the versioned JSON contract")
    return {"calibrate": _cmd_calibrate}


def _cmd_calibrate(args: argparse.Namespace) -> str:
    from kvbudget.measure.calibrations import calibrate_logs
    from kvbudget.render.calibrate import render_calibration
    from kvbudget.requests.calibrate import CalibrateRequest

    answer = calibrate_logs(request_from(CalibrateRequest, args))
    if args.json:
        return json.dumps(answer.to_dict(), indent=2)
    return "\n\n".join(render_calibration(c, cast("UnitSystem", args.units)) for c in answer.calibrations)
