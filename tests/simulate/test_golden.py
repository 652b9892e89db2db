"""The simulator's output for a fixed seed, pinned whole (tests/golden/simulate_coding-agent_seed1.json).

``examples/coding-agent.toml`` at 0.06 arrivals/s, 300 sessions, seed 1, Llama-3.1-8B on one H100
under vLLM with a 32K cap, under six serving policies: the ``simulate --json`` document of each run
(without the search), its sampled time series included. Any change to session generation, to the
simulator's rules or to its arithmetic changes this file; such a change must be deliberate and
documented (docs/simulate.md, "Determinism, speed and memory"). Regenerate with
``python -m tests.simulate.test_golden`` and review the diff.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kvbudget.hardware import gpu
from kvbudget.plan.plan import Plan
from kvbudget.simulate import (
    MemoryPolicy,
    SimConfig,
    Target,
    cap_from_workload,
    memory_from_plan,
    run_study,
    time_from_plan,
)
from kvbudget.workload.generate import generate_sessions
from kvbudget.workload.loader import _parse_toml, workload_from_dict
from tests.helpers import plan_from_argv

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden" / "simulate_coding-agent_seed1.json"
EXAMPLE = ROOT / "examples" / "coding-agent.toml"
RUNS = {
    "reserve": ({"policy": "reserve"}, {}),
    "paged": ({"policy": "paged"}, {}),
    "paged_evictable": ({"policy": "paged", "pause": "evictable"}, {}),
    "paged_swap": ({"policy": "paged", "preempt": "swap"}, {}),
    "watermark": ({"policy": "watermark"}, {}),
    "paged_2_replicas_round_robin": ({"policy": "paged"}, {"replicas": 2, "router": "round-robin"}),
}


def documents() -> dict[str, object]:
    plan = _plan()
    raw = _parse_toml(EXAMPLE.read_text(encoding="utf-8"), EXAMPLE.name)
    raw["arrival"] = {"rate_per_s": 0.06}
    workload = workload_from_dict(raw, where="golden")
    base = SimConfig(
        memory=memory_from_plan(plan),
        time=time_from_plan(plan, gpu("h100-80gb").bandwidth_bytes_per_s),
        max_samples=10,  # at most 20 samples a run: the dynamics pinned in a small file
        sample_interval_s=600.0,
    )
    out: dict[str, object] = {}
    for name, (policy, deploy) in RUNS.items():
        cap = cap_from_workload(workload.cap, plan.inputs.context)
        config = replace(base, policy=MemoryPolicy(cap=cap, **policy), **deploy)  # type: ignore[arg-type]
        study = run_study(
            lambda: generate_sessions(workload, seed=1, count=300),
            config,
            Target(),
            static_plan_sessions=plan.sessions,
        )
        out[name] = study.to_dict(time_series=True)
    return out


OVERHEAD = "2523765144"  # bytes per GPU


def _plan() -> Plan:
    # the runtime overhead given (the memory model's figure when the output was pinned), so the simulator's pins
    # move with the simulator only, not with the model of the memory before the pool (issue 23)
    argv = [
        "plan",
        "llama-3.1-8b",
        "--gpu",
        "h100-80gb",
        "--engine",
        "vllm",
        "--context",
        "32k",
        "--overhead",
        OVERHEAD,
    ]
    return plan_from_argv(argv)


def test_simulator_output_for_seed_1_is_pinned() -> None:
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))
    got = json.loads(json.dumps(documents()))  # through JSON, as the file was written
    assert got.keys() == expected.keys()
    for name in RUNS:
        assert got[name] == expected[name], name


if __name__ == "__main__":
    GOLDEN.write_text(json.dumps(documents(), indent=1) + "\n", encoding="utf-8")
