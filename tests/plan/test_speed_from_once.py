"""One answer reads and fits its ``--speed-from`` source once (simulate/measured.py ``measured_speeds``): the report
asks for it from its plan, its sizing answer and its simulation, size and compare once per row, and each part gets
the one reading. Counted at the readers (an engine log's ``read_serving``, ``read_measured`` for every source),
not timed: a count the code guarantees holds on a loaded machine."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from kvbudget.errors import InputError
from kvbudget.measure.logs import serving
from kvbudget.simulate import measured
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "tests" / "data" / "logs" / "serving" / "vllm-v1-mtp-running18-h.log"
RESULT = ROOT / "tests" / "data" / "loadtest" / "speeds-llama31-8b-vllm.json"
MODEL_GPU = ["llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k"]
DEPLOYMENT = [*MODEL_GPU, "--engine", "vllm"]
# the report's plan, sizing answer and simulation each take the speeds (short runs: 40 sessions)
REPORT = ["report", *DEPLOYMENT, "--size", "--sessions", "30", "--itl", "40ms", "--workload", "examples/chat.toml"]
REPORT += ["--simulate-sessions", "40", "--search-sessions", "40", "--format", "md"]


def _counted(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> list[str]:
    """Count the calls of ``module.name`` (each call's first argument), the function itself still answering."""
    calls: list[str] = []
    real: Callable[..., object] = getattr(module, name)

    def counting(path: object, *rest: object) -> object:
        calls.append(str(path))
        return real(path, *rest)

    monkeypatch.setattr(module, name, counting)
    return calls


@pytest.fixture
def readings(monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """(log readings, source readings), counted from a clean memo."""
    measured._read_once.cache_clear()
    monkeypatch.chdir(ROOT)
    return _counted(monkeypatch, serving, "read_serving"), _counted(monkeypatch, measured, "read_measured")


def test_the_report_reads_an_engine_log_once(
    readings: tuple[list[str], list[str]], capsys: pytest.CaptureFixture[str]
) -> None:
    logs, sources = readings
    code, out, err = run_cli(capsys, *REPORT, "--speed-from", str(LOG))
    assert code == 0, err
    assert "Speeds: prefill measured, decode measured (log vllm-v1-mtp-running18-h.log)." in out
    assert "speeds: measured by log vllm-v1-mtp-running18-h.log for Llama-3.1-8B vllm" in out  # the sizing's
    assert (logs, sources) == ([str(LOG)], [str(LOG)])


SIZE = ["size", *MODEL_GPU, "--engine", "vllm,sglang", "--sessions", "60", "--itl", "40ms"]
COMPARE = ["compare", *MODEL_GPU, "--engine", "vllm,sglang", "--workload", "examples/chat.toml", "--simulate"]
COMPARE += ["--search-sessions", "40", "--search-probes", "1", "--jobs", "1"]


@pytest.mark.parametrize("argv", [SIZE, COMPARE], ids=["size", "compare"])
def test_size_and_compare_read_a_load_test_once_for_all_their_rows(
    readings: tuple[list[str], list[str]], capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    _, sources = readings
    code, _, err = run_cli(capsys, *argv, "--speed-from", str(RESULT))
    assert code == 0, err
    assert sources == [str(RESULT)]


def test_a_changed_file_is_read_again(readings: tuple[list[str], list[str]], tmp_path: Path) -> None:
    """The memo is keyed by the file's size and modification time: a log the server went on writing is read
    again, and gives its new figures."""
    logs, _ = readings
    log = tmp_path / "server.log"
    log.write_bytes(LOG.read_bytes())
    first = measured.measured_speeds(str(log))
    assert measured.measured_speeds(str(log)) is first and len(logs) == 1
    lines = LOG.read_text(encoding="utf-8").splitlines(keepends=True)
    log.write_text("".join(lines[:2]), encoding="utf-8")  # line 2 alone: its decode level, and no prefill
    os.utime(log, ns=(0, 0))
    with pytest.raises(InputError, match="no interval of the log both prefilled and decoded"):
        measured.measured_speeds(str(log))
    assert len(logs) == 2
