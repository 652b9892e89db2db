"""Sweeps over every core give the serial answer, byte for byte: ``compare --simulate`` (one process per row)
and the sustained-sessions search (probes run ahead in parallel; only the serial path enters the trail)."""

from __future__ import annotations

import json

import pytest

from kvbudget.simulate import Target
from kvbudget.simulate.parallel import run_all
from kvbudget.simulate.search import ahead, find_sustained, next_scale
from tests.helpers import run_cli
from tests.simulate.builders import agent_sessions, config

WORKLOAD = "examples/coding-agent.toml"

# The toy agent sessions grow past the 32K cap and end there whatever the load (refused at the cap, which the
# default target counts): these tests are about the search, so the target tolerates those refusals.
TOY_TARGET = Target(refusal_rate=0.5)


def _square(x: int) -> int:
    return x * x


def test_run_all_keeps_the_items_order_whatever_the_processes() -> None:
    items = list(range(40, 0, -1))
    assert run_all(_square, items, 1) == run_all(_square, items, 2) == run_all(_square, items, None)
    assert run_all(_square, items, 2) == [x * x for x in items]


def test_the_search_plan_is_the_serial_one() -> None:
    """``next_scale`` replays the serial search: doubling while the target holds, then bisection in log k."""
    assert next_scale([], 4) == 1.0
    assert next_scale([(1.0, True)], 4) == 2.0
    assert next_scale([(1.0, True), (2.0, False)], 4) == pytest.approx(2**0.5)
    assert next_scale([(1.0, False)], 4) == 0.5
    assert next_scale([(1.0, True), (2.0, True), (4.0, True), (8.0, True)], 4) is None
    # run ahead: the next scale, then both outcomes of it, breadth first
    assert ahead([], 4, {}, 3) == [1.0, 2.0, 0.5]
    assert ahead([], 4, {1.0: True}, 2) == [2.0, 4.0]


def test_a_parallel_search_gives_the_serial_trail() -> None:
    cfg = config(300_000)

    def source():  # type: ignore[no-untyped-def]
        return agent_sessions(60, rate=0.2)

    serial = find_sustained(source, cfg, TOY_TARGET, probe_sessions=60, probes=6, jobs=1)
    parallel = find_sustained(source, cfg, TOY_TARGET, probe_sessions=60, probes=6, jobs=2)
    assert serial == parallel
    assert len(serial.trail) == 6 and any(p.holds for p in serial.trail) and not all(p.holds for p in serial.trail)


def test_compare_simulate_is_byte_identical_serial_and_parallel(capsys: pytest.CaptureFixture[str]) -> None:
    argv = (
        "compare", "llama-3.1-8b", "--gpu", "h100-sxm,l40s", "--engine", "vllm,llamacpp", "--context", "32k",
        "--workload", WORKLOAD, "--simulate", "--search-sessions", "150", "--search-probes", "3", "--json",
    )  # fmt: skip
    code, serial, err = run_cli(capsys, *argv, "--jobs", "1")
    assert code == 0, err
    code, parallel, err = run_cli(capsys, *argv, "--jobs", "2")
    assert code == 0, err
    assert serial == parallel
    rows = json.loads(serial)["rows"]
    assert len(rows) == 4 and all(row["simulated"] is not None for row in rows)
