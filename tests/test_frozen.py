"""Every FrozenRecord class behaves exactly as the same class under a plain ``@dataclass(frozen=True)``:
for real instances (every catalog model's spec, layer and primitives; cost reports of each engine
with their layouts, groups, slots, options and dtypes; every architecture; every catalog entry) the
repr, equality and hash equal those of a twin class that ``dataclass`` itself generates."""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Iterator

import pytest

import kvbudget
from kvbudget.cost import compute_cost
from kvbudget.engines import engine_names
from kvbudget.engines.base import EngineOptions
from kvbudget.frozen import FrozenRecord
from kvbudget.model.architectures import by_model_type
from kvbudget.model.catalog import entries
from kvbudget.model.families.fields import Fields
from kvbudget.model.sources import resolve
from kvbudget.model.spec import MeasuredState, SharedKV

_TWINS: dict[type, type] = {}


def _twin(cls: type) -> type:
    """``cls``'s fields (with their repr, compare and hash options) under ``dataclass(frozen=True)``."""
    if cls not in _TWINS:
        spec = [
            (f.name, object, dataclasses.field(repr=f.repr, compare=f.compare, hash=f.hash))
            for f in dataclasses.fields(cls)
        ]
        twin = dataclasses.make_dataclass(cls.__name__, spec, frozen=True)
        twin.__qualname__ = cls.__qualname__
        _TWINS[cls] = twin
    return _TWINS[cls]


def _as_twin(record: object) -> object:
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}  # type: ignore[arg-type]
    return _twin(type(record))(**values)


def _records(value: object, seen: set[int]) -> Iterator[FrozenRecord]:
    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, FrozenRecord):
        yield value
        for f in dataclasses.fields(value):  # type: ignore[arg-type]
            yield from _records(getattr(value, f.name), seen)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _records(item, seen)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _records(item, seen)


def _hash(value: object) -> int | str:
    try:
        return hash(value)
    except TypeError as exc:
        return f"TypeError: {exc}"


def _all_records() -> list[FrozenRecord]:
    seen: set[int] = set()
    found: list[FrozenRecord] = []
    roots: list[object] = [*entries(), *by_model_type().values()]
    # classes no catalog answer builds: a derived layout's state, a GGUF's shared-KV layers, options
    roots += [
        MeasuredState((("conv", (1, 2, 3), "bf16"), ("ssm", (4,), "f32"))),
        MeasuredState(()),
        SharedKV(3),
        SharedKV(0),
        EngineOptions(),
        EngineOptions(block_size=32, swa_full=True, flash_attn=False),
        Fields({"a": 1}, "config.json"),
        Fields({}, "x"),
    ]
    for entry in entries():
        spec = resolve(entry.name)
        roots.append(spec)
        for engine in engine_names():
            try:
                report = compute_cost(spec, engine=engine, tokens=8192, sequences=2)
            except kvbudget.errors.KvBudgetError:
                continue  # an engine that refuses this model
            roots += [report, report.groups()]
    for root in roots:
        found.extend(_records(root, seen))
    return found


RECORDS = _all_records()


def test_every_frozen_record_class_is_exercised() -> None:
    for info in pkgutil.walk_packages(kvbudget.__path__, "kvbudget."):
        if not info.name.endswith("__main__") and not info.name.startswith(("kvbudget.web", "kvbudget.measure")):
            importlib.import_module(info.name)
    classes = set(_subclasses(FrozenRecord))
    seen = {type(r) for r in RECORDS}
    assert classes and classes <= seen, f"no real instance checked for {sorted(c.__name__ for c in classes - seen)}"
    assert len(RECORDS) > 1000


def _subclasses(cls: type) -> Iterator[type]:
    subs: list[type] = cls.__subclasses__()
    for sub in subs:
        yield sub
        yield from _subclasses(sub)


CLASSES: list[type] = sorted({type(r) for r in RECORDS}, key=lambda c: c.__qualname__)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_repr_eq_and_hash_are_dataclass_s_own(cls: type) -> None:
    mine = [r for r in RECORDS if type(r) is cls]
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
    twins = [_as_twin(r) for r in mine]
    for record, twin in zip(mine, twins, strict=True):
        assert repr(record) == repr(twin)
        assert _hash(record) == _hash(twin)
        assert record == dataclasses.replace(record)  # type: ignore[type-var]
        assert record != twin and (record == object()) is False  # another class is never equal
        with pytest.raises(dataclasses.FrozenInstanceError):
            object.__getattribute__(record, "__setattr__")(dataclasses.fields(record)[0].name, None)  # type: ignore[arg-type]
    # equality between different instances of the class matches the twins' equality
    for i in range(min(len(mine), 40)):
        for j in range(min(len(mine), 40)):
            assert (mine[i] == mine[j]) == (twins[i] == twins[j])
