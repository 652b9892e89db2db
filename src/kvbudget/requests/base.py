"""``Request``: a frozen question whose fields are read and checked once, when it is made.

Every face builds the same request: the command line from its options, the web API from its query, a script
with keywords. A field made with ``option(default, kind)`` is read by that kind (requests/values.py) whatever
was given (``context=32768`` or ``context="32k"``), so after construction every field holds its typed value
and every answer function can trust it. Defaults live here and only here: the command line's options default
to "not given" and the request supplies the value.
"""

from __future__ import annotations

from dataclasses import MISSING, Field, dataclass, field, fields

from kvbudget.errors import InputError
from kvbudget.requests.values import READERS, flag, read_list
from kvbudget.units import shown

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any, Self, TypeVar

    R = TypeVar("R", bound="Request")


def option(default: Any, kind: str, *, choices: tuple[str, ...] = (), many: bool = False, name: str = "") -> Any:
    """A request field of ``kind`` (a reader of requests/values.py); ``many``: a tuple of such values, given as a
    list or a comma-separated text; ``choices``: the texts allowed; ``name``: how errors name it (default
    ``--field-name``)."""
    metadata = {"kind": kind, "choices": choices, "many": many, "name": name}
    if default is MISSING:
        return field(metadata=metadata)
    return field(default=default, metadata=metadata)


def required(kind: str, *, many: bool = False, name: str = "") -> Any:
    """A field without a default: a request cannot be made without it."""
    return option(MISSING, kind, many=many, name=name)


def _label(f: Field[Any]) -> str:
    return str(f.metadata.get("name") or flag(f.name))


def _read(f: Field[Any], value: object) -> object:
    kind = f.metadata.get("kind")
    if kind is None or (value is None and f.default is None):
        return value
    what = _label(f)
    reader = READERS[kind]
    choices: tuple[str, ...] = f.metadata["choices"]

    def one(item: object, where: str) -> object:
        read = reader(item, where)
        if choices and read not in choices:
            raise InputError(f"{where}: {shown(str(read))} is not a choice; choose one of {', '.join(choices)}")
        return read

    if f.metadata["many"]:
        return read_list(value, what, one)
    return one(value, what)


@dataclass(frozen=True, kw_only=True)
class Request:
    """Base of every request: reads each field by its kind once, at construction."""

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, _read(f, getattr(self, f.name)))

    @classmethod
    def from_options(cls, options: Mapping[str, object]) -> Self:
        """The request from named options as a face collects them: ``None`` is "not given" (the default applies),
        a name the request does not have is an error naming it."""
        known = {f.name: f for f in fields(cls)}
        for name in options:
            if name not in known:
                command = f"kvbudget {cls.command}"
                raise InputError(f"{flag(name)}: not an option of {command}; see {command} --help")
        given = {name: value for name, value in options.items() if value is not None}
        for name, f in known.items():
            if name not in given and f.default is MISSING and f.default_factory is MISSING:
                raise InputError(f"{_label(f)} is required")
        return cls(**given)

    # the command this request answers (the CLI's word; the web API's /api/<command>)
    command = ""

    def options(self) -> dict[str, object]:
        """The fields as named options (what ``from_options`` takes back)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


NAMED_KINDS = ("text", "model")  # the kinds of a file or a model option, whose reading can fail after the request


def named_options(cls: type[Request], values: Mapping[str, object]) -> dict[str, object]:
    """The option flag -> value of ``cls``'s file and model options (``--workload``, ``--trace``, ``--model``) in
    ``values`` (field name -> value): what ``errors.name_option`` names an error after. A positional (``model``
    of plan) is not an option: an error starting with its value already starts with what was typed there."""
    out: dict[str, object] = {}
    for f in fields(cls):
        label = _label(f)
        named = f.metadata.get("kind") in NAMED_KINDS and not f.metadata["choices"] and label.startswith("--")
        if named and values.get(f.name) is not None:
            out[label] = values[f.name]
    return out


def narrowed(cls: type[R], source: Request, **changes: object) -> R:
    """A ``cls`` request from the fields of ``source`` that ``cls`` has, with ``changes`` (a compare row's plan,
    a simulation's deployment)."""
    names = {f.name for f in fields(cls)}
    given = {name: value for name, value in source.options().items() if name in names}
    return cls.from_options({**given, **changes})
