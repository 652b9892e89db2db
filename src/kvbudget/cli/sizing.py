"""The sizing commands: ``kvbudget gpus``, ``kvbudget weights`` and ``kvbudget infer`` (parse, call, render)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from kvbudget.errors import InputError
from kvbudget.units import parse_count, parse_tokens

if TYPE_CHECKING:
    from kvbudget.units import UnitSystem


def register(sub: argparse._SubParsersAction[Any]) -> dict[str, Callable[[argparse.Namespace], str]]:
    p = sub.add_parser("gpus", help="the GPU catalog: memory as the driver reports it, bandwidth, links")
    p.add_argument("--json", action="store_true", help="print the versioned JSON contract")

    p = sub.add_parser("weights", help="weight bytes at serving precisions; exact from checkpoint headers when given")
    p.add_argument("model", help="catalog name, config.json, model directory (safetensors), .gguf file, or Hub id")
    p.add_argument(
        "--precision",
        default=None,
        help="comma-separated: bf16, fp8, int8, int4, gptq, awq, nvfp4, mxfp4, "
        "q8_0, q6_k, q5_k, q4_k, q3_k, q2_k, iq2_xxs, q4_0, q5_0, 2bit, or a bit count (default: a table)",
    )
    p.add_argument("--group-size", default="128", help="weights per scale group for int4/gptq/awq (default 128)")
    p.add_argument("--quantize-embeddings", action="store_true", help="quantize embeddings and lm_head too")
    p.add_argument("--keep", default="", help="comma-separated components kept at bf16 (e.g. attention)")
    p.add_argument("--weights-size", default=None, help="measured footprint, e.g. 42GB; overrides every other figure")
    p.add_argument("--revision", default=None, help="Hub revision for a Hub id's safetensors metadata")
    p.add_argument("--units", choices=["si", "iec"], default="iec", help="GB (10^9) or GiB (2^30); default iec")
    p.add_argument("--json", action="store_true", help="print the versioned JSON contract")

    p = sub.add_parser("infer", help="reverse-read a memory budget and a context into implied per-token cost")
    p.add_argument("--context", required=True, help="advertised context in tokens (256k = 262,144)")
    p.add_argument("--memory", default=None, help="device memory, e.g. 24GB (10^9) or 24GiB (2^30)")
    p.add_argument("--gpu", default=None, help="a catalog GPU instead of --memory (see kvbudget gpus)")
    p.add_argument("--params", default=None, help="parameter count: 74B, 74e9, 8.03B")
    p.add_argument("--weight-bits", default=None, help="bits per weight (2, 4.5) or a precision name (q4_k, nvfp4)")
    p.add_argument("--weights-size", default=None, help="weight bytes instead of params x bits, e.g. 18.5GB")
    p.add_argument("--overhead", default=None, help="runtime overhead to subtract, e.g. 1.5GB (default none)")
    p.add_argument("--kv-budget", default=None, help="the KV budget itself, e.g. 4GiB, instead of memory - weights")
    p.add_argument("--kv-heads", default=None, help="KV heads per attention layer (default: the dense reference's)")
    p.add_argument("--head-dim", default=None, help="head dimension (default: the dense reference's)")
    p.add_argument("--cache-dtypes", default="bf16,fp8,int8,int4", help="cache precisions to count layers for")
    p.add_argument("--json", action="store_true", help="print the versioned JSON contract")
    return {"gpus": _cmd_gpus, "weights": _cmd_weights, "infer": _cmd_infer}


def _cmd_gpus(args: argparse.Namespace) -> str:
    from kvbudget.hardware import gpu_catalog

    catalog = gpu_catalog()
    if args.json:
        return json.dumps(catalog.to_dict(), indent=2)
    from kvbudget.render.planning import render_gpus

    return render_gpus(catalog.gpus, catalog.links)


def _split(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _cmd_weights(args: argparse.Namespace) -> str:
    from kvbudget.weights.report import DEFAULT_PRECISIONS, weights_report

    report = weights_report(
        args.model,
        precisions=_split(args.precision) if args.precision else DEFAULT_PRECISIONS,
        group_size=parse_count(args.group_size, what="--group-size"),
        quantize_embeddings=args.quantize_embeddings,
        keep=_split(args.keep),
        weights_size=args.weights_size,
        revision=args.revision,
    )
    if args.json:
        return json.dumps(report.to_json(), indent=2)
    from kvbudget.render.planning import render_weights

    return render_weights(report, cast("UnitSystem", args.units))


def _cmd_infer(args: argparse.Namespace) -> str:
    from kvbudget.hardware import gpu
    from kvbudget.infer import infer, parse_params, parse_size
    from kvbudget.weights.precision import weight_precision

    if args.gpu and args.memory:
        raise InputError("--gpu: give --memory or --gpu, not both")
    memory, memory_basis = None, ""
    if args.gpu:
        device = gpu(args.gpu)
        memory, memory_basis = device.memory_bytes, f"{device.id}: {device.memory_basis}"
    elif args.memory:
        memory, memory_basis = parse_size(args.memory, what="--memory"), f"--memory {args.memory}"
    result = infer(
        context=parse_tokens(args.context, what="--context"),
        memory=memory,
        memory_basis=memory_basis,
        params=parse_params(args.params) if args.params else None,
        weight_bits=weight_precision(args.weight_bits, what="--weight-bits").bits if args.weight_bits else None,
        weights_bytes=parse_size(args.weights_size, what="--weights-size") if args.weights_size else None,
        weights_basis=f"--weights-size {args.weights_size}" if args.weights_size else "",
        overhead=parse_size(args.overhead, what="--overhead", allow_zero=True) if args.overhead else 0,
        kv_budget=parse_size(args.kv_budget, what="--kv-budget") if args.kv_budget else None,
        kv_heads=parse_count(args.kv_heads, what="--kv-heads") if args.kv_heads else None,
        head_dim=parse_count(args.head_dim, what="--head-dim") if args.head_dim else None,
        cache_dtypes=tuple(_split(args.cache_dtypes)),
    )
    if args.json:
        return json.dumps(result.to_json(), indent=2)
    from kvbudget.render.planning import render_inference

    return render_inference(result)
