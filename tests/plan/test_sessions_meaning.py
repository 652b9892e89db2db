""" "Sessions" means the whole deployment on every face: ``plan --gpus 3 --sessions 60`` sizes the cap for 60 over
3 replicas (20 each), ``compare --sessions`` gives the same cap for the same deployment, and ``size --sessions 60``
at that cap needs no more than those 3 replicas."""

from __future__ import annotations

import json
from typing import TypeVar

import pytest

from kvbudget.api import (
    CompareRequest,
    PlanRequest,
    SizeRequest,
    compare_deployments,
    plan_deployment,
    size_deployments,
)
from kvbudget.requests.base import Request
from tests.helpers import run_cli

BASE = {"model": "qwen3-32b", "gpu": "h200", "engine": "vllm"}


R = TypeVar("R", bound=Request)


def ask(cls: type[R], **options: object) -> R:
    """The request as a face hands it over: named options, text read by each field's kind."""
    return cls.from_options(options)


def test_plan_sessions_span_the_replicas() -> None:
    whole = plan_deployment(ask(PlanRequest, **BASE, context="32k", gpus=3, sessions=60))
    one = plan_deployment(ask(PlanRequest, **BASE, context="32k", gpus=1, sessions=20))
    assert whole.replicas == 3
    assert whole.max_context_for_sessions == one.max_context_for_sessions
    cap = whole.max_context_for_sessions
    assert cap is not None
    # at that cap the 3 replicas hold the 60 asked, and one token more they would not
    assert plan_deployment(ask(PlanRequest, **BASE, context=cap, gpus=3)).total_sessions >= 60
    assert plan_deployment(ask(PlanRequest, **BASE, context=cap + 1, gpus=3)).total_sessions < 60
    doc = whole.to_dict()
    assert (doc["sessions_requested"], doc["sessions_requested_per_replica"]) == (60, 20)


def test_an_uneven_share_rounds_up() -> None:
    plan = plan_deployment(ask(PlanRequest, **BASE, context="32k", gpus=3, sessions=61))
    assert plan.to_dict()["sessions_requested_per_replica"] == 21
    assert (
        plan.max_context_for_sessions
        == plan_deployment(ask(PlanRequest, **BASE, context="32k", sessions=21)).max_context_for_sessions
    )


def test_compare_and_size_agree_with_plan(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_deployment(ask(PlanRequest, **BASE, context="32k", gpus=3, sessions=60))
    (row,) = compare_deployments(
        ask(CompareRequest, model="qwen3-32b", gpu="h200", engine="vllm", context="32k", gpus=3, sessions=60)
    ).rows
    assert row.to_json()["max_context_for_sessions"] == plan.max_context_for_sessions
    assert row.to_json()["sessions_requested_per_replica"] == 20
    cap = plan.max_context_for_sessions
    assert cap is not None
    (pick,) = size_deployments(
        ask(SizeRequest, model="qwen3-32b", gpu="h200", engine="vllm", context=cap, sessions=60)
    ).met
    assert pick.replicas == 3 and pick.capacity >= 60
    # the text of each says it is the whole deployment
    code, out, _ = run_cli(capsys, "plan", "qwen3-32b", "--gpu", "h200", "--engine", "vllm", "--context", "32k",
                           "--gpus", "3", "--sessions", "60")  # fmt: skip
    assert code == 0 and f"Largest cap for 60 sessions over 3 replicas (20 per replica): {cap:,} tokens" in out
    code, out, _ = run_cli(capsys, "compare", "qwen3-32b", "--gpu", "h200", "--engine", "vllm", "--context", "32k",
                           "--gpus", "3", "--sessions", "60", "--json")  # fmt: skip
    assert json.loads(out)["rows"][0]["max_context_for_sessions"] == cap


def test_simulate_and_size_take_a_rate_over_the_whole_deployment() -> None:
    """``simulate --rate 0.5/s --replicas 3``: 0.5 new sessions a second arrive at the deployment, not at each
    replica; the concurrency it runs is the whole deployment's, and ``size --rate 0.5/s`` (Little's law at the
    slowest speed a replica may run: an upper bound) answers for the same whole-deployment load."""
    from kvbudget.api import SimulateRequest, simulate_deployment

    options = {"model": "llama-3.1-8b", "gpu": "l40s", "engine": "vllm", "context": "16k", "rate": "0.5/s"}
    study = simulate_deployment(
        ask(SimulateRequest, **options, workload="examples/chat.toml", sessions=200, replicas=3, search_sessions=0)
    )
    run = study.result
    assert run.replicas == 3 and run.arrived == 200
    doc = study.to_dict()
    # the concurrency of the whole deployment, three replicas' worth of the per-replica figure
    assert doc["sustained_sessions_total"] == pytest.approx(run.mean_concurrency, abs=0.01)
    assert doc["sustained_sessions"] == pytest.approx(run.mean_concurrency / 3, abs=0.01)
    (pick,) = size_deployments(ask(SizeRequest, **options, workload="examples/chat.toml")).met
    assert pick.load is not None
    # size's load is the same deployment's: above the simulated concurrency (slowest speeds), not a third of it
    assert run.mean_concurrency <= pick.load.sessions <= 1.5 * run.mean_concurrency
