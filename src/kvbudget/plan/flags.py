"""The serving flags that implement a plan, per engine, spelled as each engine's CLI spells them."""

from __future__ import annotations

from dataclasses import replace

from kvbudget.engines import parse_engine
from kvbudget.errors import KvBudgetError
from kvbudget.plan.plan import Plan, make_plan

# Cache dtype names per engine CLI (vLLM --kv-cache-dtype, SGLang --kv-cache-dtype, llama.cpp -ctk/-ctv).
_VLLM = {
    "fp8": "fp8",
    "fp8_e4m3": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "nvfp4": "nvfp4",
    "int8_per_token_head": "int8_per_token_head",
    "fp8_per_token_head": "fp8_per_token_head",
}
_GGML = {"fp32": "f32", "fp16": "f16", "bf16": "bf16"}


def _vllm(plan: Plan) -> str:
    i = plan.inputs
    parts = ["vllm serve MODEL", f"--max-model-len {i.context}"]
    if i.overhead is not None:
        # measured overhead: hand vLLM the KV size directly instead of a fraction (skips profiling)
        parts.append(f"--kv-cache-memory-bytes {plan.kv_pool_bytes}")
    elif plan.share.fraction is not None:
        parts.append(f"--gpu-memory-utilization {plan.share.fraction}")
    parts.append(f"--kv-cache-dtype {_VLLM.get(i.k.name, 'auto')}")
    parts.append(f"--max-num-seqs {max(plan.sessions, 1)}")
    if i.options.prefix_caching is False:
        parts.append("--no-enable-prefix-caching")
    elif i.prefix:
        parts.append("--enable-prefix-caching")
    if i.tp > 1:
        parts.append(f"--tensor-parallel-size {i.tp}")
    if i.pp > 1:
        parts.append(f"--pipeline-parallel-size {i.pp}")
    return " ".join(parts)


def _sglang(plan: Plan) -> str:
    i = plan.inputs
    parts = ["python -m sglang.launch_server --model-path MODEL", f"--context-length {i.context}"]
    if plan.share.fraction is not None:
        parts.append(f"--mem-fraction-static {plan.share.fraction}")
    dtype = i.k.name if i.k.name in ("fp8_e4m3", "fp8_e5m2") else "auto"
    parts += [f"--kv-cache-dtype {dtype}", f"--max-running-requests {max(plan.sessions, 1)}"]
    if i.tp > 1:
        parts.append(f"--tp {i.tp}")
    return " ".join(parts)


def _llamacpp(plan: Plan) -> str:
    i = plan.inputs
    sessions = max(plan.sessions, 1)
    k, v = _GGML.get(i.k.name, i.k.name), _GGML.get(i.v.name, i.v.name)
    parts = [
        "llama-server -m MODEL.gguf",
        f"-c {sessions * i.context}",
        f"-np {sessions}",
        f"-ctk {k}",
        f"-ctv {v}",
        "-fa on",
    ]
    if i.options.swa_full:
        parts.append("--swa-full")
    return " ".join(parts)


_FLAGS = {"vllm": _vllm, "sglang": _sglang, "llamacpp": _llamacpp}


def engine_flags(plan: Plan) -> dict[str, str]:
    """Flags for the plan's own engine (none for ideal and transformers, which have no server flags)."""
    name = plan.inputs.engine.name
    return {name: _FLAGS[name](plan)} if name in _FLAGS else {}


def all_engine_flags(plan: Plan) -> dict[str, str]:
    """Flags for vLLM, SGLang and llama.cpp, each from its own plan of the same deployment (each
    engine sizes the cache its own way, so --max-num-seqs and -np differ); an engine that refuses the
    deployment says why instead."""
    out: dict[str, str] = {}
    for name, render in _FLAGS.items():
        if name == plan.inputs.engine.name:
            out[name] = render(plan)
            continue
        try:
            other = make_plan(replace(plan.inputs, engine=parse_engine(name)))
        except KvBudgetError as exc:
            out[name] = f"not possible: {exc}"
            continue
        out[name] = render(other)
    return out
