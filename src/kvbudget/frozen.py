"""``FrozenRecord``: one ``__repr__``, ``__eq__`` and ``__hash__`` for the frozen dataclasses every
start creates (the model spec's primitives, the engine layout, the cost report, the catalog entry).

On Python 3.11 ``dataclass`` compiles each generated method of each class from source at import;
for the 22 classes a one-answer ``kvbudget cost`` defines, the three methods here were about 5 ms of
a 55 ms start (docs/architecture.md, start-up). A class declared
``@dataclass(frozen=True, repr=False, eq=False)`` over ``FrozenRecord`` behaves as the plain
``@dataclass(frozen=True)`` would: the same repr (``Name(field=value, ...)`` over the fields with
``repr=True``, ``...`` on recursion), equality only between instances of the same class over the
fields with ``compare=True`` (``NotImplemented`` otherwise), and the hash of those fields as a tuple
(or of the fields with ``hash=True``). tests/test_frozen.py checks each such class against a twin
made by ``dataclass`` itself.
"""

from __future__ import annotations

import reprlib
from dataclasses import Field, fields

_REPR: dict[type, tuple[str, ...]] = {}
_COMPARE: dict[type, tuple[str, ...]] = {}
_HASH: dict[type, tuple[str, ...]] = {}


def _hashed(f: Field[object]) -> bool:
    return f.compare if f.hash is None else f.hash


def _names(cls: type) -> tuple[str, ...]:
    """The class's repr fields, storing its compare and hash fields beside them (one pass, first use)."""
    every = fields(cls)
    _COMPARE[cls] = tuple(f.name for f in every if f.compare)
    _HASH[cls] = tuple(f.name for f in every if _hashed(f))
    names = _REPR[cls] = tuple(f.name for f in every if f.repr)
    return names


class FrozenRecord:
    __slots__ = ()

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        cls = type(self)
        names = _REPR.get(cls)
        if names is None:
            names = _names(cls)
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in names)
        return f"{cls.__qualname__}({inner})"

    def __eq__(self, other: object) -> bool:
        cls = self.__class__
        if other.__class__ is not cls:
            return NotImplemented
        names = _COMPARE.get(cls)
        if names is None:
            _names(cls)
            names = _COMPARE[cls]
        return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)

    def __hash__(self) -> int:
        cls = self.__class__
        names = _HASH.get(cls)
        if names is None:
            _names(cls)
            names = _HASH[cls]
        return hash(tuple(getattr(self, n) for n in names))
