"""The simulator runs at the speed model's speeds (or given / measured ones), labelled, and reports latency.

The computed hooks are the roofline's own (kvbudget.speed.roofline): one session alone in the simulator gets the
time to first token and the iteration ``kvbudget speed`` computes for the same request shape.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.api import estimate_speed, simulate_deployment
from kvbudget.errors import InputError
from kvbudget.hardware import gpu as catalog_gpu
from kvbudget.plan.build import plan_deployment
from kvbudget.requests.base import narrowed
from kvbudget.requests.plan import PlanRequest
from kvbudget.requests.simulate import SimulateRequest
from kvbudget.requests.speed import SpeedRequest
from kvbudget.simulate.measured import MeasuredSpeeds
from kvbudget.simulate.measured_loadtest import speeds_of
from kvbudget.simulate.speeds import replica_speeds
from kvbudget.speed.answer import roofline_of
from kvbudget.speed.efficiency import efficiency_for
from tests.helpers import run_cli

ONE_STEP = """
[arrival]
rate_per_s = 0.001
[steps]
dist = "constant"
value = 1
[first_prompt_tokens]
dist = "constant"
value = {isl}
[append_tokens]
dist = "constant"
value = 1
[output_tokens]
dist = "constant"
value = {osl}
[tool_latency_s]
dist = "constant"
value = 0
[cap]
at_cap = "refuse"
"""


def _request(tmp_path: Path, model: str, gpu: str | None, isl: int, osl: int, **more: object) -> SimulateRequest:
    path = tmp_path / "one.toml"
    path.write_text(ONE_STEP.format(isl=isl, osl=osl), encoding="utf-8")
    options: dict[str, object] = {
        "model": model,
        "gpu": gpu,
        "engine": "vllm",
        "context": 8192,
        "workload": str(path),
        "sessions": 1,
        "search_sessions": 0,
        **more,
    }
    return SimulateRequest.from_options(options)


@pytest.mark.parametrize(("model", "gpu"), [("llama-3.1-8b", "h100-sxm"), ("qwen3-30b-a3b", "h200")])
def test_one_session_alone_gets_the_speed_models_ttft_and_iteration(tmp_path: Path, model: str, gpu: str) -> None:
    isl, osl = 2000, 200
    study = simulate_deployment(_request(tmp_path, model, gpu, isl, osl))
    speed = estimate_speed(
        SpeedRequest.from_options(
            {"model": model, "gpu": gpu, "engine": "vllm", "isl": isl, "osl": osl, "concurrency": "1"}
        )
    )
    latency = study.to_dict()["latency"]
    assert isinstance(latency, dict)
    # The simulator's one step reads its cache at its end size, speed's at isl + osl/2: within 2% (the histogram's
    # buckets are 1% wide).
    assert latency["ttft_s"]["p50"] == pytest.approx(speed.ttft_s, rel=0.02)
    assert latency["itl_s"]["p50"] == pytest.approx(speed.step.seconds, rel=0.02)
    speeds = study.about["speeds"]
    assert isinstance(speeds, dict)
    assert speeds["prefill"]["provenance"] == "computed" and speeds["decode"]["provenance"] == "computed"
    # bf16 checkpoints: vLLM's prefill share fitted for bf16 products, and its attention share (docs/speed.md)
    assert "prefill efficiency 0.325, attention 0.368 of the bf16 peak (vLLM's fit)" in speeds["prefill"]["basis"]


def test_the_computed_iteration_is_the_rooflines(tmp_path: Path) -> None:
    """For full attention the hook's attention-by-bytes estimate is exact at half the cap: the roofline's step."""
    request = _request(tmp_path, "llama-3.1-70b", "h200", 1000, 100, gpus=2, tp=2, weights="fp8")
    plan = plan_deployment(narrowed(PlanRequest, request, sessions=None))
    speeds = replica_speeds(request, plan)
    roof, _, _ = roofline_of(request, plan, catalog_gpu("h200"), efficiency_for("vllm"))
    context = plan.inputs.context // 2
    for batch in (1, 8, 64, 512):
        assert speeds.step is not None
        got = speeds.step(batch, plan.layout.total_bytes(context, batch))
        assert got == pytest.approx(roof.decode_step(batch, context).seconds, rel=1e-9)
    assert speeds.prefill(3000, 5000) == pytest.approx(roof.prefill_seconds(3000, 5000, 1), rel=1e-12)


def test_prefill_follows_the_model_not_a_constant(capsys: pytest.CaptureFixture[str]) -> None:
    def prefill(model: str) -> float:
        code, out, err = run_cli(
            capsys,
            "simulate",
            "--model",
            model,
            "--gpu",
            "h200",
            "--engine",
            "vllm",
            "--context",
            "16k",
            "--workload",
            "examples/chat.toml",
            "--sessions",
            "5",
            "--search-sessions",
            "0",
            "--json",
        )
        assert code == 0, err
        rate: float = json.loads(out)["speeds"]["prefill"]["tokens_per_s"]
        return rate

    small, large = prefill("llama-3.1-8b"), prefill("qwen3-32b")
    assert 10_000 not in (small, large)
    assert 3.5 < small / large < 5.5  # about the ratio of the parameters multiplied (7B vs 31B)


def test_given_rates_are_labelled_given(tmp_path: Path) -> None:
    study = simulate_deployment(
        _request(tmp_path, "llama-3.1-8b", "h100-sxm", 1000, 100, prefill_rate=2000.0, decode_rate=25.0)
    )
    speeds = study.about["speeds"]
    assert isinstance(speeds, dict)
    assert speeds["prefill"]["provenance"] == "given" and speeds["decode"]["provenance"] == "given"
    latency = study.to_dict()["latency"]
    assert isinstance(latency, dict)
    assert latency["ttft_s"]["p50"] == pytest.approx(1000 / 2000 + 1 / 25, rel=0.011)
    assert latency["itl_s"]["p50"] == pytest.approx(1 / 25, rel=0.011)
    assert latency["output_tokens_per_s_per_session"]["p50"] == pytest.approx(25, rel=0.011)


def test_no_compute_figures_asks_for_a_prefill_rate(tmp_path: Path) -> None:
    request = _request(tmp_path, "llama-3.1-8b", None, 1000, 100, gpu_memory=80 * 10**9, bandwidth=2e12)
    with pytest.raises(InputError, match="--prefill-rate"):
        simulate_deployment(request)
    study = simulate_deployment(
        _request(tmp_path, "llama-3.1-8b", None, 1000, 100, gpu_memory=80 * 10**9, bandwidth=2e12, prefill_rate=5000.0)
    )
    speeds = study.about["speeds"]
    assert isinstance(speeds, dict)
    assert speeds["decode"]["provenance"] == "computed" and "memory-bound only" in speeds["decode"]["basis"]


def test_measured_iteration_interpolates_between_levels() -> None:
    m = MeasuredSpeeds("lt.json", 500.0, ((1, 50.0), (4, 25.0), (8, 10.0)))
    assert m.iteration_s(1) == pytest.approx(0.02) and m.iteration_s(0) == pytest.approx(0.02)
    assert m.iteration_s(4) == pytest.approx(0.04)
    assert m.iteration_s(2) == pytest.approx(0.02 + (0.04 - 0.02) / 3)
    assert m.iteration_s(12) == pytest.approx(0.1 + (0.1 - 0.04) / 4 * 4)  # the last segment's slope
    assert m.step(0, 123) == m.iteration_s(1)


def test_measured_speeds_from_a_load_test_document() -> None:
    level = {"sessions": 2, "decode_tokens_per_s": {"p50": 40.0}, "prefill_tokens_per_s": {"p50": 900.0}}
    other = {"sessions": 1, "decode_tokens_per_s": {"p50": 60.0}, "prefill_tokens_per_s": {"p50": 1100.0}}
    m = speeds_of({"levels": [level, other]}, "lt.json")
    assert m.points == ((1, 60.0), (2, 40.0)) and m.prefill_tokens_per_s == 1000.0
    with pytest.raises(InputError, match=r"--speed-from lt\.json"):
        speeds_of({"levels": [{"sessions": 1, "ttft_s": {"p50": 0.1}}]}, "lt.json")
    with pytest.raises(InputError, match="not a kvbudget loadtest"):
        speeds_of([], "lt.json")


def test_speed_from_a_load_test_is_labelled_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    result = tmp_path / "lt.json"
    levels = [
        {"sessions": 1, "decode_tokens_per_s": {"p50": 40.0}, "prefill_tokens_per_s": {"p50": 2000.0}},
        {"sessions": 4, "decode_tokens_per_s": {"p50": 20.0}, "prefill_tokens_per_s": {"p50": 1500.0}},
    ]
    result.write_text(json.dumps({"levels": levels}), encoding="utf-8")
    request = _request(tmp_path, "llama-3.1-8b", "h100-sxm", 1000, 101, speed_from=str(result))
    study = simulate_deployment(request)
    speeds = study.about["speeds"]
    assert isinstance(speeds, dict)
    assert speeds["prefill"]["provenance"] == "measured" and speeds["decode"]["provenance"] == "measured"
    assert speeds["prefill"]["tokens_per_s"] == 1750.0
    latency = study.to_dict()["latency"]
    assert isinstance(latency, dict)
    assert latency["itl_s"]["p50"] == pytest.approx(1 / 40, rel=0.011)  # alone: the 1-session level
    assert latency["ttft_s"]["p50"] == pytest.approx(1000 / 1750 + 1 / 40, rel=0.011)
    code, _, err = run_cli(
        capsys, "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "8k",
        "--workload", "examples/chat.toml", "--sessions", "5", "--search-sessions", "0", "--speed-from",
        str(tmp_path / "missing.json"),
    )  # fmt: skip
    assert code == 1 and "--speed-from" in err and "Traceback" not in err
