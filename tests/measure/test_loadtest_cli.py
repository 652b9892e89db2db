"""`kvbudget loadtest` through the real entry point: the missing extra and bad options, each one line."""

from __future__ import annotations

import importlib.util
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from kvbudget.cli.main import main

EXAMPLE = str(Path(__file__).resolve().parents[2] / "examples" / "coding-agent.toml")
URL = "http://127.0.0.1:9"


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    assert main(["loadtest", *args]) == 1
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("Error: ") and captured.err.count("\n") == 1
    return captured.err.strip()


def test_without_the_extra_it_names_it(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, package: str | None = None) -> ModuleSpec | None:
        return None if name == "aiohttp" else real(name, package)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    message = _error(capsys, URL, "--workload", EXAMPLE)
    assert message == "Error: kvbudget loadtest needs aiohttp: pip install 'kvbudget[loadtest]'"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["127.0.0.1:8080", "--workload", EXAMPLE], "must start with http:// or https://"),
        ([URL], "give exactly one of --workload FILE or --trace FILE..."),
        ([URL, "--workload", EXAMPLE, "--trace", EXAMPLE], "give exactly one of --workload"),
        ([URL, "--workload", EXAMPLE, "--sessions", "4", "--start", "2"], "not both"),
        ([URL, "--workload", EXAMPLE, "--sessions", "0"], "--sessions: 0 is outside 1.."),
        ([URL, "--workload", EXAMPLE, "--start", "9", "--max-sessions", "4"], "--start 9 is above --max-sessions 4"),
        ([URL, "--workload", EXAMPLE, "--time-scale", "-1"], "--time-scale: cannot read '-1'"),
        ([URL, "--workload", EXAMPLE, "--duration", "soon"], "--duration: cannot read 'soon'"),
        ([URL, "--workload", "missing.toml"], "missing.toml"),
    ],
)
def test_bad_options_are_one_line(capsys: pytest.CaptureFixture[str], args: list[str], expected: str) -> None:
    assert expected in _error(capsys, *args)


def test_listed_in_help(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "loadtest" in capsys.readouterr().out
