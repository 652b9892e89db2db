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


# The engines' own spellings of an option, accepted beside kvbudget's so that a serve command's flags can be pasted
# (vLLM ``--gpu-memory-utilization`` / ``--max-model-len`` / ``--tensor-parallel-size`` / ``--kv-cache-dtype``,
# SGLang ``--mem-fraction-static`` / ``--context-length`` / ``--tp-size`` / ``--chunked-prefill-size``, TensorRT-LLM
# ``--free-gpu-memory-fraction`` / ``--max-seq-len``). Each names the same setting: the first spelling is the field
# errors name. llama.cpp's ``--ctx-size`` is not one: it is the context of all ``-np`` slots together.
ENGINE_SPELLINGS: dict[str, tuple[str, ...]] = {
    "--utilization": ("--gpu-memory-utilization", "--mem-fraction-static", "--free-gpu-memory-fraction"),
    "--context": ("--max-model-len", "--context-length", "--max-seq-len"),
    "--tp": ("--tensor-parallel-size", "--tp-size"),
    "--pp": ("--pipeline-parallel-size", "--pp-size"),
    "--kv-dtype": ("--kv-cache-dtype",),
    "--max-num-batched-tokens": ("--chunked-prefill-size",),
    "--enforce-eager": ("--disable-cuda-graph",),
}


def spelled(flag: str) -> tuple[str, ...]:
    """``flag`` and the engines' spellings of it, for ``add_argument``: kvbudget's own first, so it names the field."""
    return (flag, *ENGINE_SPELLINGS.get(flag, ()))
