"""``calibrate`` of a log that also holds serving lines: its speeds, in text and ``--json``, and ``--speed-from`` that
document (measure/calibrate_speeds.py, simulate/measured_calibration.py), on the real excerpts of
tests/data/logs (SOURCES.md): what calibrate carries must be what ``--speed-from LOG`` derives from the same lines."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.errors import InputError
from kvbudget.simulate.measured import MeasuredSpeeds, measured_speeds
from kvbudget.simulate.measured_calibration import speeds_of_calibration
from tests.helpers import run_cli

DATA = Path(__file__).resolve().parents[1] / "data" / "logs"
SERVING = DATA / "serving"
STARTUP_THEN_SERVING = SERVING / "vllm-v1-startup-then-running18.log"  # v1-fp8-kv-100k + vllm-v1-mtp-running18-h
PLAN = ["--engine", "vllm", "--gpu", "h100-sxm", "--context", "32k"]


@dataclass
class Logs:
    """A test's folder and captured output: real excerpts joined into one log, calibrated, documents saved."""

    folder: Path
    capsys: pytest.CaptureFixture[str]

    def join(self, name: str, *parts: Path) -> Path:
        out = self.folder / name
        out.write_text("".join(p.read_text(encoding="utf-8") for p in parts), encoding="utf-8")
        return out

    def calibrate(self, log: Path, *extra: str) -> dict[str, object]:
        """``calibrate LOG --json``'s document."""
        code, out, err = run_cli(self.capsys, "calibrate", str(log), *extra, "--json")
        assert code == 0, err
        doc: dict[str, object] = json.loads(out)
        return doc

    def save(self, doc: object, name: str = "calibrate.json") -> Path:
        path = self.folder / name
        path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
        return path

    def plan(self, *argv: str) -> tuple[int, str, str]:
        """``kvbudget plan ARGV``: (exit code, stdout, stderr)."""
        return run_cli(self.capsys, "plan", *argv)


@pytest.fixture
def logs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Logs:
    return Logs(tmp_path, capsys)


def test_calibrate_carries_the_speeds_speed_from_the_log_derives(logs: Logs) -> None:
    """Lines 4-8 are the vLLM stats lines: line 5 (18 running before and after, no prompt) decodes at 1226.3 / 18
    tokens/s a session; lines 6 and 7 prefilled with requests running (test_log_speeds.py: 30,957 tokens/s)."""
    doc = logs.calibrate(STARTUP_THEN_SERVING)
    speeds = doc["speeds"]
    assert isinstance(speeds, dict)
    log = measured_speeds(str(STARTUP_THEN_SERVING))
    assert speeds["decode"] == [{"sessions": 18, "tokens_per_s_per_session": 1226.3 / 18}]
    assert speeds["prefill_tokens_per_s"] == log.prefill_tokens_per_s and round(log.prefill_tokens_per_s) == 30957
    assert [(d["sessions"], d["tokens_per_s_per_session"]) for d in speeds["decode"]] == list(log.points)
    assert (speeds["prefill_basis"], speeds["decode_basis"]) == (log.prefill_basis, log.decode_basis)
    assert speeds["lines"] == {"stats": 5, "first": 4, "last": 8, "samples": 3, "dropped": 0}
    assert (speeds["engine"], speeds["served"], speeds["provenance"]) == ("vllm", None, "measured")
    code, out, _ = run_cli(logs.capsys, "calibrate", str(STARTUP_THEN_SERVING))
    assert code == 0
    assert "Speeds (measured, from 5 serving lines, lines 4-8;" in out
    assert "decode tokens/s per session, by sessions running: 68.1 at 18" in out
    assert "prefill: 30,957 tokens/s" in out and "(lines 6, 7)" in out


def test_llama_server_timings_after_its_start_up_give_the_same_speeds(logs: Logs) -> None:
    startup = DATA / "llamacpp" / "current-2026-dsv4-iswa-colour.log"
    log = logs.join("llama.log", startup, SERVING / "llama-server-np2-tiny-llama31.log")
    speeds = logs.calibrate(log)["speeds"]
    assert isinstance(speeds, dict)
    m = measured_speeds(str(log))
    assert speeds["prefill_tokens_per_s"] == pytest.approx((97 + 129) / (1.38605 + 2.92635))
    assert speeds["prefill_tokens_per_s"] == m.prefill_tokens_per_s and speeds["engine"] == "llamacpp"
    assert [(d["sessions"], d["tokens_per_s_per_session"]) for d in speeds["decode"]] == list(m.points)


def test_speed_from_the_calibrate_document_plans_as_the_log_does(logs: Logs) -> None:
    doc = logs.save(logs.calibrate(STARTUP_THEN_SERVING))
    plans = []
    for source in (STARTUP_THEN_SERVING, doc):
        code, out, err = logs.plan("llama-3.2-1b", *PLAN, "--speed-from", str(source), "--json")
        assert code == 0, err
        plans.append(json.loads(out)["speeds"])
    by_log, by_doc = plans
    assert by_doc.pop("source") == "calibrate.json" and by_log.pop("source") == STARTUP_THEN_SERVING.name
    assert by_doc == by_log and by_doc["provenance"] == "measured"
    code, out, _ = logs.plan("llama-3.2-1b", *PLAN, "--speed-from", str(doc))
    assert code == 0 and "Speeds (measured, calibration calibrate.json)" in out


def test_the_document_belongs_to_the_engine_and_model_its_log_named(logs: Logs) -> None:
    """A start-up naming meta-llama/Llama-3.2-1B-Instruct, KV lines, then serving lines: three real excerpts."""
    named = DATA / "vllm" / "v1-2026-nondefault-args-apiserver.log"
    log = logs.join("named.log", named, DATA / "vllm" / "v1-fp8-kv-100k.log", SERVING / "vllm-v1-mtp-running18-h.log")
    calibrated = logs.calibrate(log)
    speeds = calibrated["speeds"]
    assert isinstance(speeds, dict) and speeds["served"] == "meta-llama/Llama-3.2-1B-Instruct"
    doc = str(logs.save(calibrated))
    code, _, err = logs.plan("llama-3.1-8b", *PLAN, "--speed-from", doc)
    assert code == 1 and "served meta-llama/Llama-3.2-1B-Instruct" in err and err.count("\n") == 1
    code, _, err = logs.plan("llama-3.2-1b", *PLAN[2:], "--engine", "sglang", "--speed-from", doc)
    assert code == 1 and "measured on vllm, but the plan is for sglang" in err and err.count("\n") == 1


def test_a_log_without_serving_lines_says_nothing_of_speeds(logs: Logs) -> None:
    log = DATA / "vllm" / "v1-fp8-kv-100k.log"
    doc = logs.calibrate(log)
    assert "speeds" not in doc and not any("speed" in str(n) for n in doc["notes"])  # type: ignore[attr-defined]
    _, out, _ = run_cli(logs.capsys, "calibrate", str(log))
    assert "Speeds (" not in out and "no speeds" not in out


def test_serving_lines_that_give_no_speed_are_a_note_not_an_error(logs: Logs) -> None:
    """SGLang decode lines at a steady 8 running, and no prefill batch: no prefill speed, so no speeds."""
    startup = DATA / "sglang" / "max-total-num-tokens-256k.log"
    doc = logs.calibrate(logs.join("sglang.log", startup, SERVING / "sglang-0.4-decode-running8.log"))
    assert "speeds" not in doc
    assert any(str(n).startswith("no speeds: no interval of the log both prefilled") for n in doc["notes"])  # type: ignore[attr-defined]
    doc_path = str(logs.save(doc))
    code, _, err = logs.plan("llama-3.1-8b", *PLAN, "--speed-from", doc_path)
    assert code == 1 and "a calibrate document with no speeds" in err and err.count("\n") == 1


def test_a_restart_keeps_each_start_up_to_its_own_serving_lines(logs: Logs) -> None:
    """Start-up 1 (lines 1-3), its serving lines (4-8), start-up 2 (9-11): the stats lines are start-up 1's."""
    startup = DATA / "vllm" / "v1-fp8-kv-100k.log"
    log = logs.join("restart.log", startup, SERVING / "vllm-v1-mtp-running18-h.log", startup)
    first = logs.calibrate(log, "--startup", "1")["speeds"]
    assert isinstance(first, dict) and first["lines"]["first"] == 4 and first["lines"]["last"] == 8
    assert "speeds" not in logs.calibrate(log, "--startup", "2")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("prefill_tokens_per_s", -1, r"speeds.prefill_tokens_per_s of -1 is not a measured speed"),
        ("prefill_tokens_per_s", "fast", r"speeds.prefill_tokens_per_s of 'fast' is not a measured speed"),
        ("decode", [], r"speeds.decode of \[\] is not a list of 1-1,000 levels"),
        ("decode", [{"sessions": 0, "tokens_per_s_per_session": 5}], r"speeds.decode\[0\].sessions of 0"),
        (
            "decode",
            [{"sessions": 4, "tokens_per_s_per_session": 5}, {"sessions": 2, "tokens_per_s_per_session": 5}],
            r"speeds.decode\[1\].sessions of 2 is not above the level before it",
        ),
        ("decode", [{"sessions": 4, "tokens_per_s_per_session": 1e12}], r"decode\[0\].tokens_per_s_per_session"),
        ("engine", "tgi", r"speeds.engine of 'tgi' is not an engine kvbudget plans for"),
        ("served", 7, r"speeds.served of 7 is not null or the model name"),
        ("decode_basis", "x" * 3000, r"speeds.decode_basis of 'xxx.* is not a basis"),
        ("provenance", "computed", r"speeds.provenance of 'computed' is not 'measured'"),
    ],
)
def test_a_bad_document_is_one_line_naming_the_field(logs: Logs, field: str, value: object, message: str) -> None:
    doc = logs.calibrate(STARTUP_THEN_SERVING)
    speeds = doc["speeds"]
    assert isinstance(speeds, dict)
    speeds[field] = value
    path = str(logs.save(doc))
    with pytest.raises(InputError, match=message):
        measured_speeds(path)
    code, _, err = logs.plan("llama-3.2-1b", *PLAN, "--speed-from", path)
    assert code == 1 and err.count("\n") == 1 and "give the kvbudget calibrate --json document as written" in err


def test_a_document_is_not_pooled_and_several_logs_take_the_one_with_speeds(logs: Logs) -> None:
    doc = logs.save(logs.calibrate(STARTUP_THEN_SERVING))
    with pytest.raises(
        InputError, match=r"calibrate.json is a calibrate document, and its log's speeds are not pooled"
    ):
        measured_speeds(f"{doc},{doc}")
    both = logs.calibrate(DATA / "vllm" / "v1-fp8-kv-100k.log", str(STARTUP_THEN_SERVING))
    assert measured_speeds(str(logs.save(both, "both.json"))).points == ((18, 1226.3 / 18),)
    # two logs with speeds (the same log under a second name: calibrate refuses one path given twice)
    again = logs.join("again.log", STARTUP_THEN_SERVING)
    twice = logs.calibrate(STARTUP_THEN_SERVING, str(again))
    with pytest.raises(InputError, match=r"a calibrate document of 2 logs, 2 with speeds"):
        measured_speeds(str(logs.save(twice, "twice.json")))


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 10**6), min_size=1, max_size=20, unique=True),
    st.floats(1e-3, 1e9),
    st.floats(1e-3, 1e9),
)
def test_a_document_reads_back_exactly_what_it_carries(levels: list[int], rate: float, prefill: float) -> None:
    """Whatever speeds a document carries (in range), reading it back gives them unrounded (JSON floats round-trip)."""
    points = tuple((k, rate * (i + 1) / len(levels)) for i, k in enumerate(sorted(levels)))
    points = tuple((k, max(r, 1e-3)) for k, r in points)
    speeds = {
        "provenance": "measured",
        "engine": "sglang",
        "served": None,
        "prefill_tokens_per_s": prefill,
        "decode": [{"sessions": k, "tokens_per_s_per_session": r} for k, r in points],
        "prefill_basis": "log x: prefill",
        "decode_basis": "log x: decode",
        "lines": {"stats": 1, "first": 1, "last": 1, "samples": 1, "dropped": 0},
    }
    doc = json.loads(json.dumps({"log": "x", "lines_read": 1, "reconciliation": [], "speeds": speeds}))
    read: MeasuredSpeeds = speeds_of_calibration(doc, "c.json")
    assert read.points == points and read.prefill_tokens_per_s == prefill and read.engine == "sglang"


def test_size_uses_the_document_for_its_engine_alone(logs: Logs) -> None:
    doc = str(logs.save(logs.calibrate(STARTUP_THEN_SERVING)))
    sweep = ["size", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm,sglang", "--sessions", "60"]
    code, out, err = run_cli(logs.capsys, *sweep, "--context", "32k", "--itl", "25ms", "--speed-from", doc, "--json")
    assert code == 0, err
    answer = json.loads(out)
    speeds = {row["engine"].split()[0]: row["speeds"]["provenance"] for row in answer["deployments"] + answer["unmet"]}
    assert speeds == {"vllm": "measured", "sglang": "computed"} and answer["speed_from"] == "calibrate.json"
    code, out, _ = run_cli(logs.capsys, *sweep, "--context", "32k", "--itl", "25ms", "--speed-from", doc)
    assert code == 0 and "speeds: measured by calibration calibrate.json for Llama-3.1-8B vllm" in out
