"""Engines: each module turns a ModelSpec into a Layout following that engine's own rules.

Engine module contract (``ideal``, ``vllm``, ``sglang``, ``llamacpp``, ``transformers``):

* ``NAME``: the engine's name; ``DEFAULT_VERSION``: the newest version whose rules it follows;
* ``layout(spec, k_dtype, v_dtype, tp, options, version) -> Layout``, raising EngineRefusalError for
  combinations the engine itself refuses.

An engine is named ``vllm``, ``vllm@0.25``, ``vllm==0.25`` or, for a version range that changed a
rule, ``transformers<5`` (the newest release before 5).
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from types import ModuleType

from kvbudget.engines.base import EngineOptions, Layout
from kvbudget.errors import InputError
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import CacheDType

ENGINES = ("ideal", "vllm", "sglang", "llamacpp", "transformers")
_ALIASES = {"llama.cpp": "llamacpp", "llama-cpp": "llamacpp", "llama_cpp": "llamacpp", "hf": "transformers"}
# "name<major" means the newest release below that major version, as far as rules are concerned.
_BELOW = {("transformers", "5"): "4.57.6", ("vllm", "0.26"): "0.25.0", ("vllm", "0.21"): "0.20.0"}
_SPEC = re.compile(r"^\s*([A-Za-z_.\-]+)\s*(?:(@|==|<)\s*([\w.]+))?\s*$")


@dataclass(frozen=True)
class EngineRef:
    name: str
    version: str

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}".strip()


def module(name: str) -> ModuleType:
    return importlib.import_module(f"kvbudget.engines.{name}")


def parse_engine(text: str) -> EngineRef:
    """Parse ``name[@version | ==version | <major]`` into an EngineRef with a concrete version."""
    match = _SPEC.match(text)
    if match is None:
        raise InputError(f"--engine: cannot read {text!r}; write e.g. vllm, vllm@0.25 or transformers<5")
    raw, op, version = match.groups()
    name = _ALIASES.get(raw.lower(), raw.lower())
    if name not in ENGINES:
        raise InputError(f"--engine: unknown engine {raw!r}; choose one of: {', '.join(ENGINES)}")
    mod = module(name)
    if op is None:
        return EngineRef(name, str(mod.DEFAULT_VERSION))
    if op == "<":
        below = _BELOW.get((name, version))
        if below is None:
            known = ", ".join(f"{n}<{v}" for n, v in _BELOW if n == name) or "none"
            raise InputError(f"--engine: no rule change is known at {name}<{version}; known: {known}")
        return EngineRef(name, below)
    _check_version(name, version)
    return EngineRef(name, version)


_NUMERIC = re.compile(r"^b?\d+(?:\.\d+)*$")


def _check_version(name: str, version: str) -> None:
    """Versions are read strictly: a word such as 'latest' must not fall back to the oldest rules."""
    if not _NUMERIC.match(version):
        raise InputError(
            f"--engine {name}@{version}: a version is a release number such as "
            f"{module(name).DEFAULT_VERSION}; omit it for the newest rules kvbudget implements"
        )


def build_layout(
    spec: ModelSpec, engine: EngineRef, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions
) -> Layout:
    _check_tp(spec, engine, tp)
    layout: Layout = module(engine.name).layout(spec, k, v, tp, options, engine.version)
    return layout


def _check_tp(spec: ModelSpec, engine: EngineRef, tp: int) -> None:
    """vLLM and SGLang refuse a tensor-parallel size that does not divide the query heads
    (vLLM ModelConfig.verify_with_parallel_config; SGLang ModelConfig: num_attention_heads % tp_size)."""
    if tp <= 1 or engine.name not in ("vllm", "sglang"):
        return
    heads = spec.config.get("num_attention_heads")
    if isinstance(heads, int) and not isinstance(heads, bool) and heads > 0 and heads % tp:
        raise InputError(
            f"--tp {tp}: {engine.name} needs the tensor-parallel size to divide the {heads} attention heads of "
            f"{spec.name}; use a divisor of {heads}"
        )


def version_tuple(version: str) -> tuple[int, ...]:
    """'0.25.1' -> (0, 25, 1); non-numeric parts are dropped ('b7800' -> (7800,))."""
    return tuple(int(p) for p in re.findall(r"\d+", version))
