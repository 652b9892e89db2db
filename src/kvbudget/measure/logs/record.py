"""What an engine's start-up log says: figures with the line they came from, settings, refusals.

Every figure keeps the text as printed and its resolution: a log prints "11.12 GiB", which is any
byte count within ±0.005 GiB of 11.12 x 2^30, so a reconciliation compares intervals, not points.
Bytes and tokens are integers; only a ratio (vLLM's "Maximum concurrency ... 11.12x") is a float.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Unit = Literal["bytes", "tokens", "blocks", "ratio", "requests"]
CacheKind = Literal["kv", "swa", "recurrent"]
SettingValue = str | int | float | bool


@dataclass(frozen=True)
class Figure:
    """A number the log printed: ``value`` in ``unit``, true value within ``value ± resolution``."""

    value: int | float
    unit: Unit
    line: int
    text: str
    resolution: int | float = 0
    rank: str | None = None
    derived: bool = False  # computed by the reader from other printed figures, not printed itself

    @property
    def low(self) -> int | float:
        return self.value - self.resolution

    @property
    def high(self) -> int | float:
        return self.value + self.resolution

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "value": self.value,
            "unit": self.unit,
            "line": self.line,
            "text": self.text,
            "provenance": "derived" if self.derived else "measured",
        }
        if self.resolution:
            out["resolution"] = self.resolution
        if self.rank is not None:
            out["rank"] = self.rank
        return out


@dataclass(frozen=True)
class Setting:
    value: SettingValue
    line: int

    def to_json(self) -> dict[str, object]:
        return {"value": self.value, "line": self.line}


@dataclass(frozen=True)
class CacheSize:
    """One llama.cpp cache allocation line (``llama_kv_cache: size = ...``, ``llama_memory_recurrent``)."""

    kind: CacheKind
    size: Figure
    cells: int | None
    layers: int | None
    seqs: int | None
    streams: int | None
    parts: tuple[tuple[str, Figure], ...]  # ("K (f16)", figure), ("V (f16)", figure) or R/S

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "bytes": self.size.value,
            "text": self.size.text,
            "resolution": self.size.resolution,
            "cells": self.cells,
            "layers": self.layers,
            "seqs": self.seqs,
            "streams": self.streams,
            "parts": {name: fig.to_json() for name, fig in self.parts},
            "line": self.size.line,
        }


RefusalKind = Literal["kv_cache_too_small", "max_seq_len_too_long", "no_memory_for_cache", "allocation_failed"]


@dataclass(frozen=True)
class Refusal:
    """The engine refused to start: what it needed, what it had, the longest context it could take."""

    kind: RefusalKind
    line: int
    text: str
    needed_bytes: int | None = None
    available_bytes: int | None = None
    max_context: int | None = None

    @property
    def reason(self) -> str:
        """One line: what the engine printed when it refused, and where."""
        return f"{self.text.strip()} (line {self.line})"

    def to_json(self) -> dict[str, object]:
        return {
            "reason": self.reason,
            "kind": self.kind,
            "needed_bytes": self.needed_bytes,
            "available_bytes": self.available_bytes,
            "max_context": self.max_context,
            "line": self.line,
            "text": self.text,
        }


@dataclass
class EngineLog:
    """Everything read from one log. ``engine`` is vllm, sglang, llamacpp or ollama."""

    path: str
    engine: str
    lines_read: int = 0
    version: str | None = None
    version_line: int | None = None
    generation: str | None = None  # vLLM "V0"/"V1"; llama.cpp log generation
    model: Setting | None = None
    settings: dict[str, Setting] = field(default_factory=dict)
    measured: dict[str, Figure] = field(default_factory=dict)
    caches: list[CacheSize] = field(default_factory=list)
    refusal: Refusal | None = None
    ranks: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)
    # (phrase, rank) of a line each start-up prints once -> [first line, second line, ..., times seen]
    once: dict[tuple[str, str | None], list[int]] = field(default_factory=dict)
    once_kept: int = 0  # line numbers kept in ``once`` over every phrase (bounded by rules.MAX_KEPT)
    window: tuple[int, int] = (1, 2**63)  # the lines [first, past last) of the start-up read (``--startup``)

    def setting(self, name: str) -> SettingValue | None:
        s = self.settings.get(name)
        return None if s is None else s.value

    def figure(self, name: str) -> Figure | None:
        return self.measured.get(name)
