"""Stand-in for torchvision inside the oracle environment only (never in kvbudget's own).

transformers' image processors import torchvision at module level; vLLM and SGLang import those
processors with multimodal model classes (Gemma 3, Llama 4). The oracles never process an image,
so every ``torchvision.*`` module and name resolves to a placeholder that fails if it is ever
called. A real torchvision wheel is built against one exact torch build (its C++ operators do not
load over another), which is why a stub stands in (issue 12).
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence

__version__ = "0.0.0+kvbudget.oracle.stub"


class _Placeholder:
    """Any torchvision name: attributes chain, calls fail (the oracles never touch images)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> _Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self._name}.{name}")

    def __call__(self, *args: object, **kwargs: object) -> object:  # noqa: ARG002
        raise RuntimeError(f"torchvision stand-in: {self._name} is not available in the oracle environment")


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> _Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every ``torchvision.<sub>`` module exists and is a placeholder module."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,  # noqa: ARG002
        target: types.ModuleType | None = None,  # noqa: ARG002
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: names resolve lazily to placeholders."""


sys.meta_path.insert(0, _Finder())
sys.modules[__name__].__class__ = _Module
