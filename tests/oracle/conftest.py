"""Fixtures of the oracle tests: nothing may reach the network; tests that build a transformers skeleton skip
when torch or transformers is not installed; the probe runs of every selected oracle module start together."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.oracle.oracle_env import oracle_python, submit_probes


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def torch_installed() -> Iterator[None]:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    yield


@pytest.fixture(scope="session", autouse=True)
def _start_probes(request: pytest.FixtureRequest) -> None:
    """Start every probe run the selected oracle modules need (``oracle_runs``) at once, in parallel
    processes (oracle_env.submit_probes), largest first; each module's tests then wait on their own runs.
    Without the oracle environment nothing starts: the modules skip (or fail) on their own."""
    if oracle_python() is None:
        return
    modules = {item.module for item in request.session.items if isinstance(item, pytest.Function)}
    runs = [
        (module.__name__, probe, gpu, run)
        for module in modules
        if hasattr(module, "oracle_runs")
        for probe, by_gpu in [module.oracle_runs()]
        for gpu, run in by_gpu.items()
    ]
    # the longest runs (most cases) first, so the last to finish is a short one; ties in a fixed order
    for tag, probe, gpu, run in sorted(runs, key=lambda r: (-len(r[3][0]), r[0], r[2])):
        submit_probes(probe, {gpu: run}, tag=tag)
