"""The sustained-sessions search stops when no load can meet the target: a probe whose refusals at the cap alone
pass the target's refusal tolerance (simulate/search.py, "The stop"). A session is refused at the cap when its own
context passes the cap, which its steps decide, not the arrival rate, so every scale refuses it; the search says so
(``search.stopped``: cap_bound) after that probe instead of spending its other probes, and sustains no sessions."""

from __future__ import annotations

import json
from collections.abc import Iterator

import jsonschema
import pytest

from kvbudget.schemas import schema
from kvbudget.simulate import SimConfig, Target, find_sustained, meets, run_study, simulate, study_json
from kvbudget.simulate.search import Stop, misses, scaled
from kvbudget.simulate.targets import at_targets
from kvbudget.workload.record import SessionPlan
from tests.helpers import run_cli
from tests.simulate.builders import config, session

CAP = 4_096
SESSIONS = 200
EVERY = 20  # every 20th session passes the cap: 10 of 200, 5%


def capped_sessions() -> Iterator[SessionPlan]:
    """200 sessions, one every 2 s, two steps each; every 20th one's second step takes its context to 4,200
    tokens, past the 4,096-token cap (refused there); the others peak at 1,700 tokens."""
    for i in range(SESSIONS):
        second = 3_000 if i % EVERY == 0 else 500
        yield session(i, 2.0 * i, [(1_000, 100, 1.0), (second, 100, 0.0)])


def roomy() -> SimConfig:
    return config(64 * CAP, cap=CAP)  # room for 64 sessions at the cap: only the cap refuses


def test_the_workload_overflows_the_cap_at_its_known_rate_at_every_load() -> None:
    # 10 of 200 refused at the cap, whatever the arrival rate: the steps decide it, not the load
    for scale in (0.25, 1.0, 4.0, 64.0):
        r = simulate(scaled(capped_sessions(), scale), roomy())
        assert (r.arrived, r.refused_at_cap, r.refused_admission) == (SESSIONS, 10, 0), scale
        assert not meets(r, Target(refusal_rate=0.01))  # so no scale meets a 1% tolerance
        # and no scale misses 5% by its refusals (10 of 200 is not above it); at x64 the pool preempts
        assert [m for m in misses(r, Target(refusal_rate=0.05)) if "refused" in m] == []
        assert meets(r, Target(refusal_rate=0.05)) == (scale < 64)


def test_the_search_stops_after_one_probe_when_the_cap_alone_misses() -> None:
    found = find_sustained(capped_sessions, roomy(), Target(refusal_rate=0.01), probe_sessions=SESSIONS)
    assert len(found.trail) == 1 and found.trail[0].scale == 1.0 and not found.trail[0].holds
    assert found.stopped == Stop(scale=1.0, refused_at_cap=10, sessions=200, tolerance=0.01, cap_tokens=CAP)
    assert found.stopped.rate == 0.05
    assert found.sessions_per_replica is None and found.scale is None and not found.bounded
    assert found.stopped.text == (
        "the search stopped after the probe at arrival rate x1: 10 of 200 sessions (5%) were refused at the "
        "4,096-token cap, above the 1% the target tolerates; a session whose context passes the cap is refused at "
        "any load, so no number of sessions meets this target: raise the cap (--context, or the workload's [cap] "
        "tokens when lower) or the refusal tolerance (--target-refusal-rate)"
    )


def test_a_workload_just_within_the_tolerance_is_searched_in_full() -> None:
    # 10 of 200 at the cap is 5%, not above a 5% tolerance: the search runs its probes and finds a load
    found = find_sustained(capped_sessions, roomy(), Target(refusal_rate=0.05), probe_sessions=SESSIONS, probes=4)
    assert found.stopped is None and len(found.trail) == 4
    assert all(p.refused == 10 and p.holds for p in found.trail)
    assert [p.scale for p in found.trail] == [1.0, 2.0, 4.0, 8.0]
    assert found.sessions_per_replica is not None and found.sessions_per_replica > 0


def test_serial_and_parallel_searches_stop_alike() -> None:
    target = Target(refusal_rate=0.01)
    serial = find_sustained(capped_sessions, roomy(), target, probe_sessions=SESSIONS, jobs=1)
    parallel = find_sustained(capped_sessions, roomy(), target, probe_sessions=SESSIONS, jobs=2)
    assert serial == parallel and serial.stopped is not None


def test_the_study_says_why_in_json_and_both_searches_stop_with_latency_targets() -> None:
    target = Target(refusal_rate=0.01, ttft_p99_s=2.0)
    study = run_study(capped_sessions, roomy(), target, static_plan_sessions=64, search_sessions=SESSIONS)
    doc = json.loads(json.dumps(study_json(study)))
    assert doc["sustained_sessions"] is None and doc["sustained_sessions_total"] is None
    for key in ("search", "search_memory"):  # the latency search reuses the memory search's probe
        assert len(doc[key]["probes"]) == 1 and doc[key]["arrival_scale"] is None
        assert {k: doc[key]["stopped"][k] for k in ("reason", "refused_at_cap", "sessions", "cap_tokens")} == {
            "reason": "cap_bound",
            "refused_at_cap": 10,
            "sessions": 200,
            "cap_tokens": 4_096,
        }
        assert (doc[key]["stopped"]["refused_at_cap_rate"], doc[key]["stopped"]["refusal_rate_tolerance"]) == (
            0.05,
            0.01,
        )
    stop = study.stopped
    assert stop is not None and stop == study.sustained_memory.stopped  # type: ignore[union-attr]
    assert doc["sustained_basis"].endswith(stop.text)
    at = at_targets(target, study.result, 1, study.sustained_memory, study.sustained)
    assert at.memory.sessions is None and at.latency.sessions is None and not at.memory.capacity
    assert at.text.startswith("memory allows none (at any load, more sessions pass the cap than the target tolerates)")
    assert doc["at_targets"]["text"] == at.text and doc["at_targets"]["memory"]["basis"] == stop.text


# the chat workload on one H100 at an 8K cap: its longest conversations pass the cap, 6 of the first 200
CHAT_8K = ["llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "8k"]
CHAT_8K += ["--workload", "examples/chat.toml"]


def test_every_face_says_the_search_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    quick = ["--sessions", "200", "--search-sessions", "200"]
    code, out, err = run_cli(capsys, "simulate", *CHAT_8K, *quick, "--json", "--jobs", "1")
    assert code == 0, err
    doc = json.loads(out)
    jsonschema.validate(doc, schema("simulate"))
    stopped = doc["search"]["stopped"]
    assert stopped["reason"] == "cap_bound" and (stopped["refused_at_cap"], stopped["sessions"]) == (6, 200)
    assert stopped["cap_tokens"] == 8_192
    assert (stopped["refused_at_cap_rate"], stopped["refusal_rate_tolerance"]) == (0.03, 0.001)
    assert len(doc["search"]["probes"]) == 1 and doc["sustained_sessions"] is None
    code, out_2, err = run_cli(capsys, "simulate", *CHAT_8K, *quick, "--json", "--jobs", "2")
    assert code == 0 and json.loads(out_2)["search"] == doc["search"], err
    code, text, err = run_cli(capsys, "simulate", *CHAT_8K, *quick, "--jobs", "1")
    assert code == 0, err
    flat = " ".join(text.split())
    assert "Sessions sustained per replica: none (no load probed met the target)" in flat
    assert (
        "The search stopped after the probe at arrival rate x1: 6 of 200 sessions (3%) were refused at the "
        "8,192-token cap" in flat
    )
    assert "or the refusal tolerance (--target-refusal-rate)." in flat
    assert "at least 0.0" not in flat
    compare = ["compare", *CHAT_8K, "--simulate", "--search-sessions", "200", "--search-probes", "4", "--jobs", "1"]
    code, out, err = run_cli(capsys, *compare, "--json")
    assert code == 0, err
    row = json.loads(out)["rows"][0]["simulated"]
    assert row["search_stopped"] == stopped and row["sustained_sessions_per_replica"] is None
    assert row["replicas_needed"] is None
    code, out, err = run_cli(capsys, "report", *CHAT_8K, "--simulate-sessions", "200", "--search-sessions", "200")
    assert code == 0 and stopped["text"] in " ".join(out.split()), err
    code, out, err = run_cli(
        capsys, "report", *CHAT_8K, "--simulate-sessions", "200", "--search-sessions", "200", "--json"
    )
    assert code == 0, err
    simulated = json.loads(out)["sessions"]["simulated"]
    assert simulated["search_stopped"] == stopped and simulated["sustained_sessions"] is None
    assert simulated["sustained_basis"] == doc["sustained_basis"]
