"""Engines: each module owns one engine's whole rule set behind the contract of ``engines/contract.py``.

An engine module ``engines/<name>.py`` defines ``class Rules(EngineRules)`` (name, version, layout,
memory share, batch and overhead, prefix sharing, sessions, start-up lines, serve command). This
registry finds engines by module name, so adding an engine is adding its module; nothing else names it.

An engine is named ``vllm``, ``vllm@0.25``, ``vllm==0.25`` or, for a version range that changed a
rule, ``transformers<5`` (the newest release before 5).
"""

from __future__ import annotations

import importlib
import os
import re
from dataclasses import dataclass, replace
from functools import cache, cached_property

from kvbudget.engines.base import EngineOptions, Layout, version_tuple
from kvbudget.errors import InputError
from kvbudget.frozen import FrozenRecord
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import CacheDType

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.engines.contract import EngineRules

__all__ = [
    "EngineRef",
    "build_layout",
    "engine_names",
    "parse_engine",
    "rules_class",
    "served_spec",
    "version_tuple",
]

_SPEC = re.compile(r"^\s*([A-Za-z_.\-]+)\s*(?:(@|==|<)\s*([\w.+\-]+))?\s*$")
# Compiled on first use, by re's own cache: an answer that reads no such value does not pay for the pattern.
_NUMERIC_PATTERN = r"^b?\d+(?:\.\d+)*$"
# A release as pip, a log or a tag prints it: "v0.11.0", "0.6.3.post1", "0.11.0rc1", "1.1.0rc3", "0.10.2+cu128",
# "0.9.2.dev12+g1a2b3c": the release number, then PEP 440 pre/post/dev segments and a local label
_RELEASE_PATTERN = (
    r"^v?(b?\d+(?:\.\d+)*)(?:[.\-_]?(?:a|alpha|b|beta|rc|c|pre|preview|post|dev)[.\-_]?\d*)*(?:\+[\w.]+)?$"
)


def release_number(version: str) -> str | None:
    """The release number of a version as printed ('v0.11.0' -> '0.11.0', '0.6.3.post1' -> '0.6.3', '1.1.0rc3' ->
    '1.1.0', '0.10.2+cu128' -> '0.10.2'; a llama.cpp build 'b7900' stays itself), or None for a word ('latest').
    A pre-release or dev build takes the rules of the release it leads to, a post release those of its release:
    engines change memory rules at releases, and each rule here is keyed by one."""
    match = re.match(_RELEASE_PATTERN, version.strip(), re.IGNORECASE)
    return match.group(1) if match else None


def _key(text: str) -> str:
    """Engine names compare without case and punctuation: llama.cpp, llama-cpp and llamacpp are one."""
    return re.sub(r"[^a-z0-9]", "", text.lower())


def rules_class(name: str) -> type[EngineRules] | None:
    """The Rules class of the engine module ``name``, or None when no such engine module exists."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name) or not _module_exists(name):
        return None
    cls = getattr(importlib.import_module(f"kvbudget.engines.{name}"), "Rules", None)
    return cls if isinstance(cls, type) else None


def _module_exists(name: str) -> bool:
    return name in _module_names()


@cache
def _module_names() -> frozenset[str]:
    """The modules and subpackages of this package (a directory listing, read once; what
    ``pkgutil.iter_modules`` lists, without importing pkgutil at every start)."""
    names: set[str] = set()
    for folder in __path__:
        for entry in os.scandir(folder):
            stem, dot, suffix = entry.name.partition(".")
            if entry.is_dir() and os.path.isfile(os.path.join(entry.path, "__init__.py")):  # noqa: PTH118, PTH113
                names.add(entry.name)
            elif dot and suffix == "py" and stem.isidentifier() and stem != "__init__":
                names.add(stem)
    return frozenset(names)


def _all_rules() -> list[type[EngineRules]]:
    found = [cls for name in _module_names() if (cls := rules_class(name)) is not None]
    return sorted(found, key=lambda cls: (cls.order, cls.name))


def engine_names(*, servers_only: bool = False) -> tuple[str, ...]:
    """Every engine kvbudget implements, in table order (servers only: those with a serve command)."""
    return tuple(cls.name for cls in _all_rules() if cls.server or not servers_only)


def _lookup(raw: str) -> type[EngineRules]:
    key = _key(raw)
    cls = rules_class(key)
    if cls is not None:
        return cls
    for candidate in _all_rules():
        if key in {_key(candidate.name), *(_key(a) for a in candidate.aliases)}:
            return candidate
    raise InputError(f"--engine: unknown engine {raw!r}; choose one of: {', '.join(engine_names())}")


@dataclass(frozen=True, repr=False, eq=False)
class EngineRef(FrozenRecord):
    """An engine at a concrete version (``version`` is empty for the ideal engine)."""

    name: str
    version: str

    @property
    def label(self) -> str:
        return f"{self.name} {self.version}".strip()

    def to_json(self) -> dict[str, str]:
        """The engine in every JSON document: {name, version} (version "" for the ideal engine)."""
        return {"name": self.name, "version": self.version}

    @cached_property
    def rules(self) -> EngineRules:
        """This engine's rules at this version."""
        cls = rules_class(self.name)
        if cls is None:
            raise InputError(f"--engine: unknown engine {self.name!r}; choose one of: {', '.join(engine_names())}")
        return cls(self.version)


def parse_engine(text: str) -> EngineRef:
    """Parse ``name[@version | ==version | <major]`` into an EngineRef with a concrete version."""
    match = _SPEC.match(text)
    if match is None:
        raise InputError(f"--engine: cannot read {text!r}; write e.g. vllm, vllm@0.25 or transformers<5")
    raw, op, version = match.groups()
    cls = _lookup(raw)
    if op is None:
        return EngineRef(cls.name, cls.default_version)
    if op == "<":
        below = cls.below.get(version)
        if below is None:
            known = ", ".join(f"{cls.name}<{v}" for v in cls.below) or "none"
            raise InputError(f"--engine: no rule change is known at {cls.name}<{version}; known: {known}")
        return EngineRef(cls.name, below)
    release = release_number(version)
    if release is None or not re.match(_NUMERIC_PATTERN, release):
        # Versions are read strictly: a word such as 'latest' must not fall back to the oldest rules.
        raise InputError(
            f"--engine {cls.name}@{version}: a version is a release number such as "
            f"{cls.default_version} (v0.11.0, 0.6.3.post1 and 0.11.0rc1 read too); omit it for the newest rules "
            "kvbudget implements"
        )
    return EngineRef(cls.name, release)


def served_spec(spec: ModelSpec, engine: EngineRef, capability: int | None = None) -> ModelSpec:
    """``spec`` in the dtype the engine runs it in (a float32 checkpoint runs in bf16 on vLLM, fp16 on SGLang), with
    a note saying so; the same spec when the engine keeps the checkpoint's dtype."""
    dtype, why = engine.rules.served_dtype(spec, capability)
    if not why or dtype == spec.dtype:
        return spec
    return replace(spec, dtype=dtype, notes=(*spec.notes, why))


def build_layout(
    spec: ModelSpec, engine: EngineRef, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions
) -> Layout:
    rules = engine.rules
    rules.check_tp(spec, tp)
    return rules.layout(spec, k, v, tp, options)
