"""The built-in catalog: real configs of widely served models, each with its source."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache

from kvbudget.frozen import FrozenRecord

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from typing import Any


@dataclass(frozen=True, repr=False, eq=False)
class CatalogEntry(FrozenRecord):
    """One built-in model: its config, where it came from, and its names."""

    name: str
    aliases: tuple[str, ...]
    source: str
    status: str
    notes: str
    params_total: int | None
    config: dict[str, Any]
    derived_kv: dict[str, Any]
    geometry_of: str | None = None  # set for a model that is not an entry of its own: the entry whose config it uses
    geometry_note: str = ""  # why that config holds for it

    @property
    def display_name(self) -> str:
        """The name every output prints: a model served with another entry's config says so in its name, so no
        output can show the other model's name for it or hide the substitution."""
        return f"{self.name} (same geometry as {self.geometry_of})" if self.geometry_of else self.name


_SEPARATORS = re.compile(r"[\s_\-]+")  # compiled once: the index keys every name and alias of the catalog


def _key(text: str) -> str:
    """Case- and punctuation-insensitive lookup key: 'Meta-Llama-3.1-70B' ~ 'meta_llama_3.1_70b'."""
    return _SEPARATORS.sub("-", text.strip().lower())


# os.path, not pathlib: pathlib (with urllib.parse) is 5 ms of a one-answer start (bench/startup.py)
_MODELS = os.path.join(os.path.dirname(__file__), "models.json")  # noqa: PTH118, PTH120


@lru_cache(maxsize=1)
def entries() -> tuple[CatalogEntry, ...]:
    with open(_MODELS, encoding="utf-8") as f:  # noqa: PTH123
        raw = json.loads(f.read())
    out = []
    for item in raw["models"]:
        params = item.get("params_total")
        out.append(
            CatalogEntry(
                name=item["name"],
                aliases=tuple(item.get("aliases", ())),
                source=item["source"],
                status=item["status"],
                notes=item["notes"],
                params_total=int(params["value"]) if isinstance(params, dict) and params.get("value") else None,
                config=item["config"],
                derived_kv=item.get("derived_kv") or {},
            )
        )
    return tuple(out)


@lru_cache(maxsize=1)
def same_geometry() -> tuple[CatalogEntry, ...]:
    """Models that are not entries of their own but share an entry's geometry (``same_geometry`` in models.json:
    Llama-3.3-70B-Instruct is Llama-3.1-70B's config): each as an entry with its own name and ids, that entry's
    config, and ``geometry_of`` naming it."""
    with open(_MODELS, encoding="utf-8") as f:  # noqa: PTH123
        raw = json.loads(f.read())
    out = []
    for item in raw["models"]:
        for other in item.get("same_geometry", ()):
            base = next(e for e in entries() if e.name == item["name"])
            out.append(
                CatalogEntry(
                    name=other["name"],
                    aliases=tuple(other["names"]),
                    source=base.source,
                    status=base.status,
                    notes=other["note"],
                    params_total=base.params_total,
                    config=base.config,
                    derived_kv=base.derived_kv,
                    geometry_of=base.name,
                    geometry_note=other["note"],
                )
            )
    return tuple(out)


@lru_cache(maxsize=1)
def _index() -> dict[str, CatalogEntry]:
    index: dict[str, CatalogEntry] = {}
    for entry in (*entries(), *same_geometry()):
        for name in (entry.name, *entry.aliases):
            index.setdefault(_key(name), entry)
            # "org/name" ids also match by their last part ("Llama-3.1-70B").
            index.setdefault(_key(name.split("/")[-1]), entry)
    return index


def lookup(name: str) -> CatalogEntry | None:
    """The catalog entry for a name or alias, case-insensitively; None when unknown."""
    return _index().get(_key(name))


def suggestions(name: str, limit: int = 3) -> list[str]:
    """Catalog names that share a word with ``name``, for 'did you mean' hints."""
    words = {w for w in re.split(r"[^a-z0-9.]+", name.lower()) if len(w) > 1}
    scored = []
    for entry in entries():
        entry_words = set(re.split(r"[^a-z0-9.]+", entry.name.lower()))
        score = len(words & entry_words)
        if score:
            scored.append((-score, entry.name))
    return [n for _, n in sorted(scored)[:limit]]
