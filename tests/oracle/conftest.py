"""Fixtures of the transformers oracles: skeletons are built from configs only, nothing may reach the
network; tests that build one skip when torch or transformers is not installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def torch_installed() -> Iterator[None]:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    yield
