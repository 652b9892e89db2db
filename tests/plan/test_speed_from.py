"""``--speed-from RESULT.json`` on plan, size, compare --simulate and report: a load test's measured speeds flow
into each answer, labelled measured and naming the file, and only into the deployment the load test measured.

The result (tests/data/loadtest/speeds-llama31-8b-vllm.json) measured Llama-3.1-8B on vLLM: decode 100, 50 and
20 tokens/s per session at 1, 8 and 32 sessions (iterations of 10, 20 and 50 ms) and prefill 8,000, 6,000 and
4,000 tokens/s (median 6,000). Between 8 and 32 sessions an iteration is 20 ms + 30 ms x (n - 8) / 24, so every
figure below is computed by hand from those points (simulate/measured.py, plan/sizing_load.py, plan/speeds.py).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.api import PlanRequest, SizeRequest, plan_deployment, size_deployments
from kvbudget.errors import InputError
from kvbudget.plan.sizing import Candidate
from kvbudget.simulate.measured import measured_speeds
from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
RESULT = str(ROOT / "tests" / "data" / "loadtest" / "speeds-llama31-8b-vllm.json")
MODEL = "llama-3.1-8b"
PLAN = ["--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k"]


def iteration(n: int) -> float:
    """The result's decode iteration at ``n`` sessions, 8 <= n (past 32: the last segment's slope)."""
    return 0.02 + 0.03 * (n - 8) / 24


def test_the_result_reads_as_its_levels() -> None:
    m = measured_speeds(RESULT)
    assert m.points == ((1, 100.0), (8, 50.0), (32, 20.0)) and m.prefill_tokens_per_s == 6000.0
    assert (m.engine, m.served) == ("vllm", "meta-llama/Llama-3.1-8B-Instruct")
    assert m.iteration_s(13) == pytest.approx(iteration(13)) and m.iteration_s(100) == pytest.approx(iteration(100))


def _vllm_row(candidates: tuple[Candidate, ...]) -> Candidate:
    (row,) = [c for c in candidates if c.choice.engine == "vllm"]
    return row


def test_size_holds_each_replica_to_the_measured_itl_curve() -> None:
    """--itl 25 ms: a replica of B sessions cycles B prefills of 1,000 tokens at 6,000 tokens/s and 1,000
    iterations; ITL(B) = iteration(B) + B / 6,000 s. ITL(10) = 22.5 + 1.67 = 24.2 ms meets it, ITL(11) = 23.75 +
    1.83 = 25.6 ms does not: 10 sessions per replica (memory holds 13), so 60 sessions take 6 replicas, where the
    roofline (10.6 ms at 12 sessions: memory binds) takes 5."""
    options: dict[str, object] = {"model": MODEL, "gpu": "h100-sxm", "engine": "vllm", "context": "32k"}
    options.update(sessions=60, itl="25ms")
    measured = _vllm_row(size_deployments(SizeRequest.from_options({**options, "speed_from": RESULT})).candidates)
    roofline = _vllm_row(size_deployments(SizeRequest.from_options(options)).candidates)
    assert (roofline.replicas, roofline.binding, roofline.memory_sessions) == (5, "memory", 13)
    assert (measured.memory_sessions, measured.latency_sessions) == (13, 10)
    assert (measured.replicas, measured.binding) == (6, "decode")
    assert measured.latency is not None and measured.latency.sessions == 10
    assert measured.latency.itl_s == pytest.approx(iteration(10) + 10 / 6000)
    assert measured.latency.ttft_s == pytest.approx(1000 / 6000 + iteration(10))
    doc = measured.to_dict()
    assert doc["speeds"] == {"provenance": "measured", "basis": measured.speeds[1] if measured.speeds else ""}
    latency = doc["latency"]
    assert isinstance(latency, dict) and latency["provenance"] == "measured"
    assert roofline.speeds is not None and roofline.speeds[0] == "computed"


def test_size_uses_the_measurement_only_for_its_engine(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "size", MODEL, "--gpu", "h100-sxm", "--engine", "vllm,sglang", "--sessions", "60", "--context", "32k",
        "--itl", "25ms", "--speed-from", RESULT, "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    speeds = {row["engine"].split()[0]: row["speeds"]["provenance"] for row in doc["deployments"] + doc["unmet"]}
    assert speeds == {"vllm": "measured", "sglang": "computed"}
    assert doc["speed_from"] == "speeds-llama31-8b-vllm.json"
    code, out, _ = run_cli(
        capsys, "size", MODEL, "--gpu", "h100-sxm", "--engine", "vllm,sglang", "--sessions", "60", "--context", "32k",
        "--itl", "25ms", "--speed-from", RESULT,
    )  # fmt: skip
    vllm = next(row["engine"] for row in doc["deployments"] + doc["unmet"] if row["engine"].startswith("vllm "))
    # the rows are named as the JSON names them: the engine with the version whose rules sized them
    assert f"speeds: measured by load test speeds-llama31-8b-vllm.json for Llama-3.1-8B {vllm}" in out
    # the pick is SGLang on 5 GPUs (the roofline's 12 per replica) over vLLM's measured 6: said as computed
    assert "run Llama-3.1-8B with SGLang on 5 H100-SXMs" in out and "computed from the speed model" in out
    code, out, _ = run_cli(
        capsys, "size", MODEL, "--gpu", "h100-sxm", "--sessions", "60", "--context", "32k", "--itl", "25ms",
        "--speed-from", RESULT,
    )  # fmt: skip
    assert "run Llama-3.1-8B with vLLM on 6 H100-SXMs" in out
    assert "from the speeds load test speeds-llama31-8b-vllm.json measured on this model and engine" in out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["size", MODEL, "--gpu", "h100-sxm,h200", "--sessions", "60", "--context", "32k"], "the GPU;"),
        (["size", MODEL, "--gpu", "h100-sxm", "--tp", "1,2", "--sessions", "60", "--context", "32k"], "the tp;"),
        (["size", "qwen3-32b", "--gpu", "h100-sxm", "--sessions", "60", "--context", "32k"], "none of the listed"),
        (["plan", MODEL, "--gpu", "h100-sxm", "--engine", "sglang", "--context", "32k"], "measured on vllm"),
        (["plan", "qwen3-32b", *PLAN], "not qwen3-32b (64 layers)"),
        (["compare", MODEL, *PLAN], "add --simulate"),
    ],
)
def test_a_result_of_another_deployment_is_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    code, _, err = run_cli(capsys, *argv, "--speed-from", RESULT)
    assert code == 1 and err.count("\n") == 1 and said in err and "Traceback" not in err, err


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        ({"schema_version": 1, "sessions_sustained": 4}, "not a kvbudget loadtest --json result (no levels)"),
        ({"levels": [{"sessions": 4, "ttft_s": {"p50": 0.2}}]}, "measured no decode or prefill speed"),
        (
            {"levels": [{"sessions": 1, "decode_tokens_per_s": {"p50": 1e-9}, "prefill_tokens_per_s": {"p50": 1}}]},
            "is not a measured speed",
        ),
    ],
)
def test_a_result_without_speeds_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, doc: dict[str, Any], said: str
) -> None:
    path = tmp_path / "lt.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    for argv in (["plan", MODEL, *PLAN], ["size", MODEL, "--gpu", "h100-sxm", "--sessions", "9", "--context", "8k"]):
        code, _, err = run_cli(capsys, *argv, "--speed-from", str(path))
        assert code == 1 and err.count("\n") == 1 and said in err and "Traceback" not in err, err


def test_plan_shows_the_latency_at_the_planned_sessions(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_deployment(PlanRequest.from_options({"model": MODEL, "speed_from": RESULT, **_plan_options()}))
    assert plan.sessions == 13 and plan.speeds is not None
    speeds = plan.to_dict()["speeds"]
    assert isinstance(speeds, dict)
    assert speeds["sessions_per_replica"] == 13 and speeds["extrapolated"] is False
    assert speeds["itl_s"] == pytest.approx(iteration(13), abs=1e-6)  # 26.25 ms
    assert speeds["output_tokens_per_s_per_replica"] == pytest.approx(13 / iteration(13), abs=1e-3)
    assert speeds["ttft_s"] == pytest.approx(32768 / 6000 + iteration(13), abs=1e-6)
    assert speeds["provenance"] == "measured" and speeds["source"] == "speeds-llama31-8b-vllm.json"
    # --sessions 40 over 2 replicas: 20 each; 100 on one replica: past the largest level, extrapolated
    code, out, _ = run_cli(capsys, "plan", MODEL, *PLAN, "--gpus", "2", "--sessions", "40", "--speed-from", RESULT)
    assert code == 0
    assert "Speeds (measured, load test speeds-llama31-8b-vllm.json) at 20 sessions per replica" in out
    assert f"inter-token latency {iteration(20) * 1000:.1f} ms" in out
    code, out, _ = run_cli(capsys, "plan", MODEL, *PLAN, "--sessions", "100", "--speed-from", RESULT, "--json")
    far = json.loads(out)["speeds"]
    assert far["extrapolated"] is True and far["itl_s"] == pytest.approx(iteration(100), abs=1e-6)


def _plan_options() -> dict[str, object]:
    return {"gpu": "h100-sxm", "engine": "vllm", "context": "32k"}


def test_levers_refuse_a_result() -> None:
    """levers rank memory capacity: the command line has no --speed-from, the API refuses it in one line."""
    from kvbudget.api import LeversRequest, rank_levers

    with pytest.raises(InputError, match="levers rank capacity, not speed"):
        rank_levers(LeversRequest.from_options({"model": MODEL, "speed_from": RESULT, **_plan_options()}))


def test_plan_without_speed_from_has_no_speeds() -> None:
    plan = plan_deployment(PlanRequest.from_options({"model": MODEL, **_plan_options()}))
    assert plan.speeds is None and "speeds" not in plan.to_dict()


def test_the_web_api_reads_no_result_of_its_machine() -> None:
    from kvbudget.web.api import request_of
    from kvbudget.web.uploads import Uploads

    for command in ("plan", "levers", "size", "compare"):  # the commands the web API serves that take it
        with pytest.raises(InputError, match="--speed-from: names a file on the server's machine"):
            request_of(command, [("model", MODEL), ("speed_from", RESULT)], Uploads())


def test_compare_simulates_its_rows_on_the_measured_speeds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "compare", MODEL, "--gpu", "h100-sxm", "--engine", "vllm,sglang", "--context", "8k", "--workload",
        "examples/chat.toml", "--simulate", "--search-sessions", "60", "--search-probes", "1", "--jobs", "1",
        "--speed-from", RESULT, "--json",
    )  # fmt: skip
    assert code == 0, err
    rows = {row["engine"]["name"]: row["simulated"] for row in json.loads(out)["rows"]}
    assert "measured" in rows["vllm"]["speeds"] and "(load test speeds-llama31-8b-vllm.json)" in rows["vllm"]["speeds"]
    assert "computed" in rows["sglang"]["speeds"] and "load test" not in rows["sglang"]["speeds"]


def test_report_simulates_on_the_measured_speeds(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "report", MODEL, *PLAN, "--workload", "examples/chat.toml", "--simulate-sessions", "60",
        "--search-sessions", "0", "--speed-from", RESULT, "--format", "md",
    )  # fmt: skip
    assert code == 0, err
    assert "Speeds: prefill measured, decode measured (load test speeds-llama31-8b-vllm.json)." in out
    code, out, err = run_cli(capsys, "report", MODEL, *PLAN, "--speed-from", RESULT, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["plan"]["speeds"]["itl_s"] == pytest.approx(iteration(13), abs=1e-6)
