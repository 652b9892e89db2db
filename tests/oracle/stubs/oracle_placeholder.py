"""Placeholder packages for the oracle environment only (never kvbudget's own): every submodule and
name of the package exists and fails if it is ever called. The stubs beside this file use it for
binary packages whose wheels only load over one CUDA torch build (torchvision, sgl_kernel)."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence


class _Placeholder:
    """Any torchvision name: attributes chain, calls fail (the oracles never touch images)."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, name: str) -> _Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self._name}.{name}")

    def __call__(self, *args: object, **kwargs: object) -> object:
        raise RuntimeError(f"oracle stand-in: {self._name} is not available in the oracle environment")


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> _Placeholder:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Placeholder(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Every ``<package>.<sub>`` module exists and is a placeholder module."""

    def __init__(self, package: str) -> None:
        self.package = package

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.startswith(self.package + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        """Nothing to run: names resolve lazily to placeholders."""


def install(package: str) -> None:
    """Make ``package`` (already being imported) and all its submodules placeholders."""
    sys.meta_path.insert(0, _Finder(package))
    sys.modules[package].__class__ = _Module
