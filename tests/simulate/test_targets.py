"""Sessions sustained at the memory limit and at latency targets (``simulate --ttft --itl``): which binds, held to
the simulator itself run at the load the search found and at the next load it probed; capacity worded only when a
higher load missed."""

from __future__ import annotations

import json

import pytest

from kvbudget.api import SimulateRequest, simulate_deployment
from kvbudget.simulate.policies import Target
from kvbudget.simulate.search import Probe, Sustained, meets
from kvbudget.simulate.study import Study
from kvbudget.simulate.targets import figure
from tests.helpers import run_cli

# Llama-3.1-8B with vLLM on one L40S at a 16K cap under the chat workload (0.5 sessions/s): memory (the pool, the
# queue for room) holds about 85 live sessions, but the decode roofline's inter-token latency passes 45 ms far
# earlier (L40S: 864 GB/s for 16 GB of weights per iteration, plus every running session's KV).
DEPLOYMENT = {
    "model": "llama-3.1-8b",
    "gpu": "l40s",
    "engine": "vllm",
    "context": "16k",
    "workload": "examples/chat.toml",
    "replicas": "1",
    "sessions": "400",
    "jobs": "1",
}
RATE = 0.5  # the chat workload's own arrival rate, sessions/s


def _study(**options: str) -> Study:
    return simulate_deployment(SimulateRequest.from_options({**DEPLOYMENT, **options}))


def test_latency_binds_and_the_simulator_agrees_at_that_load_and_the_next() -> None:
    study = _study(search_sessions="400", search_probes="6", ttft="2s", itl="45ms")
    at = study.at_targets
    assert at is not None and at.binds == "itl"
    assert at.memory.capacity and at.latency.capacity  # each bounded by a probe above it that missed
    assert at.memory.sessions is not None and at.latency.sessions is not None
    assert at.latency.sessions < at.memory.sessions
    assert "the simulation holds" in at.text and at.text.endswith("latency (ITL) binds")
    held = study.sustained
    assert held is not None and held.scale is not None and held.failed_above is not None
    above = held.failed_above
    # the simulator at the load found: the latency targets hold, at the mean concurrency the search reported
    at_load = _study(rate=str(RATE * held.scale), search_sessions="0", ttft="2s", itl="45ms")
    assert at_load.target_met and at_load.result.itl_s["p99"] <= 0.045
    assert at_load.result.mean_concurrency == pytest.approx(at.latency.sessions, rel=1e-3)
    # at the next load the search probed: the inter-token latency misses, while memory alone still holds there
    past = _study(rate=str(RATE * above.scale), search_sessions="0", ttft="2s", itl="45ms")
    assert past.result.itl_s["p99"] > 0.045 and past.result.mean_concurrency > at_load.result.mean_concurrency
    assert any(m.startswith("p99 ITL") for m in past.misses)
    assert meets(past.result, past.target.memory_only())


def test_a_loose_latency_target_leaves_memory_binding(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [f"--{k.replace('_', '-')}={v}" for k, v in DEPLOYMENT.items() if k != "model"]
    code, out, err = run_cli(
        capsys, "simulate", "llama-3.1-8b", *argv, "--search-sessions=400", "--search-probes=6", "--itl=1s", "--json"
    )
    assert code == 0, err
    doc = json.loads(out)
    at = doc["at_targets"]
    assert at["binds"] == "memory" and at["itl_p99_s"] == 1.0 and at["ttft_p99_s"] is None
    assert at["memory"]["sessions_per_replica"] == at["latency"]["sessions_per_replica"] > 0
    assert doc["target"]["itl_p99_s"] == 1.0 and doc["search_memory"]["bounded"]
    # the two searches shared their runs: every scale of the latency search was probed by the memory one too
    memory_scales = {p["arrival_scale"] for p in doc["search_memory"]["probes"]}
    assert {p["arrival_scale"] for p in doc["search"]["probes"]} <= memory_scales


def _probe(scale: float, concurrency: float, holds: bool) -> Probe:
    return Probe(scale, concurrency, 0.0, 0, 0, holds)


def test_a_figure_is_a_capacity_only_when_a_higher_load_missed() -> None:
    result = _study(sessions="50", search_sessions="0").result
    every = Sustained(8.0, 2.0, 100, (_probe(1.0, 4.0, True), _probe(2.0, 8.0, True)))
    bounded = Sustained(8.0, 2.0, 100, (_probe(1.0, 4.0, True), _probe(4.0, 16.0, False), _probe(2.0, 8.0, True)))
    none = Sustained(0.0, None, 100, (_probe(1.0, 4.0, False), _probe(0.5, 2.0, False)))
    assert figure(every, result, Target(), 1).words() == "at least 8.0"
    assert figure(bounded, result, Target(), 1).words() == "8.0"
    assert bounded.failed_above is not None and bounded.failed_above.scale == 4.0
    assert figure(none, result, Target(), 1).words() == "none"
    # no search: the run's own load, which held, is never worded as a capacity
    run = figure(None, result, Target(refusal_rate=0.5), 1)
    assert run.sessions == pytest.approx(result.mean_concurrency) and not run.capacity


def test_compare_simulate_holds_each_row_to_the_latency_targets(capsys: pytest.CaptureFixture[str]) -> None:
    """compare --simulate --itl runs each row as simulate runs it with the same targets: the same two figures."""
    import jsonschema

    from kvbudget.schemas import schema

    search = {"search_sessions": "300", "search_probes": "4", "itl": "45ms"}
    code, out, err = run_cli(
        capsys, "compare", "llama-3.1-8b", "--gpu", "l40s", "--engine", "vllm", "--context", "16k", "--workload",
        "examples/chat.toml", "--simulate", "--search-sessions=300", "--search-probes=4", "--itl=45ms", "--jobs=1",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, schema("compare"))
    (row,) = doc["rows"]
    sim = row["simulated"]
    assert sim["binds"] == "itl" and sim["sustained_sessions_per_replica"] < sim["memory_sessions_per_replica"]
    study = _study(sessions="300", **search)
    at = study.at_targets
    assert at is not None and at.binds == "itl"
    assert sim["sustained_sessions_per_replica"] == pytest.approx(at.latency.sessions, abs=1e-3)
    assert sim["memory_sessions_per_replica"] == pytest.approx(at.memory.sessions, abs=1e-3)
    assert sim["at_targets"] == at.text
