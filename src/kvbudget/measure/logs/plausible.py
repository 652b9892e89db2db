"""Figures no engine can print are refused, not measured.

* Bytes: never negative, except vLLM's ``Available KV cache memory`` (V1 gpu_worker.py prints what
  is left, below zero when nothing is); at most MAX_DEVICE_BYTES for one device (the largest GPU
  kvbudget knows holds 288 GB; a llama.cpp cache in host memory stays within a few TiB).
* Tokens and blocks: whole, not negative, at most 2^40 (the token range of every request field).
* Within one log: the KV memory and the weights fit the device total the engine printed, and a KV pool
  of N bytes holds at most N tokens (no attention layer stores a token in less than a byte).
"""

from __future__ import annotations

from kvbudget.errors import InputError
from kvbudget.measure.logs.record import EngineLog, Figure

MAX_DEVICE_BYTES = 4 * 2**40  # 4 TiB: past any GPU (288 GB) and any host memory a llama.cpp cache lives in
MAX_COUNT = 2**40  # tokens, blocks, sessions: the tokens range of requests/values.py
MAY_BE_NEGATIVE = frozenset({"available_kv_bytes"})  # vLLM V1 gpu_worker.py logs a negative KV budget


def _refuse(path: str, fig: Figure, what: str) -> InputError:
    return InputError(f"{path}: line {fig.line:,} prints {fig.text!r}: {what}; this is no start-up log to measure from")


def check(log: EngineLog, path: str) -> None:
    """InputError naming the first figure no engine prints (module docstring)."""
    for name, fig in log.measured.items():
        if fig.derived:
            continue
        if fig.unit == "bytes":
            if fig.value < 0 and name not in MAY_BE_NEGATIVE:
                raise _refuse(path, fig, f"a negative {name.replace('_bytes', '').replace('_', ' ')}")
            if abs(fig.value) > MAX_DEVICE_BYTES:
                raise _refuse(path, fig, "more memory than any device holds (4 TiB)")
        elif fig.unit in ("tokens", "blocks", "requests"):
            if fig.value < 0 or fig.value > MAX_COUNT:
                raise _refuse(path, fig, f"{fig.unit} outside 0..2^40")
        elif fig.unit == "ratio" and not 0 <= fig.value <= MAX_COUNT:
            raise _refuse(path, fig, "a concurrency outside 0..2^40")
    for cache in log.caches:
        if cache.size.value > MAX_DEVICE_BYTES:
            raise _refuse(path, cache.size, "a cache larger than any device holds (4 TiB)")
    refusal = log.refusal
    if refusal is not None:
        for value in (refusal.needed_bytes, refusal.available_bytes):
            if value is not None and abs(value) > MAX_DEVICE_BYTES:
                raise InputError(
                    f"{path}: line {refusal.line:,} states {value:,} B: more memory than any device holds (4 TiB); "
                    "this is no start-up log to measure from"
                )
    _within(log, path)


def _within(log: EngineLog, path: str) -> None:
    total = log.figure("total_gpu_memory_bytes")
    if total is not None and log.engine in ("vllm", "trtllm"):
        for name in ("available_kv_bytes", "weights_bytes"):
            part = log.figure(name)
            if part is not None and part.low > total.high:
                raise InputError(
                    f"{path}: line {part.line:,} prints {part.text} of {name.replace('_bytes', '').replace('_', ' ')}"
                    f", more than the device total {total.text} of line {total.line:,}: these lines are not one "
                    "start-up's; give the log of one start-up"
                )
    pool = log.figure("available_kv_bytes")
    tokens = log.figure("kv_tokens")
    if pool is not None and tokens is not None and pool.value > 0 and tokens.value > pool.high:
        raise InputError(
            f"{path}: line {tokens.line:,} prints {tokens.text} KV tokens, more than the {pool.text} of KV memory of "
            f"line {pool.line:,} could hold at one byte each: these lines are not one start-up's; give the log of one "
            "start-up"
        )
