"""Packages that are also API functions: ``kvbudget.cost``, ``kvbudget.plan`` and ``kvbudget.simulate`` name both a
module of the package and a function of the Python API (kvbudget.api). Once the module is imported it is the
attribute of ``kvbudget``, so the module itself is made callable and calls the API function."""

from __future__ import annotations

import importlib
import sys
import types

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        api = importlib.import_module("kvbudget.api")
        return getattr(api, self.__name__.rsplit(".", 1)[1])(*args, **kwargs)


def callable_module(name: str) -> None:
    """Make the module ``name`` (kvbudget.cost, kvbudget.plan, kvbudget.simulate) call its API function."""
    sys.modules[name].__class__ = _CallableModule
