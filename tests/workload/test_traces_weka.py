"""WEKA kv-cache-tester traces: records and statistics against an independent reading of the raw
files, sub-agents, and bad rows with file and line."""

from __future__ import annotations

import json
from collections import Counter
from itertools import pairwise
from pathlib import Path

import pytest

from kvbudget.errors import TraceError
from kvbudget.workload.record import BadRow
from kvbudget.workload.stats import trace_stats
from kvbudget.workload.traces import read_records
from tests.workload.raw_traces import WEKA, common_prefix, summary, weka_pauses, weka_sessions


def test_records_match_the_raw_requests() -> None:
    for path in WEKA:
        raw = weka_sessions(path)
        records = list(read_records([path]))
        by_session: dict[str, list[int]] = {}
        for r in records:
            by_session.setdefault(r.session, []).append(r.step)
            request = raw[r.session][r.step]
            assert (r.prompt_tokens, r.output_tokens) == (request["in"], request["out"])
            assert len(r.block_hashes) == len(request["hash_ids"]) and r.block_size == 64
        assert {s: len(v) for s, v in by_session.items()} == {s: len(v) for s, v in raw.items() if v}
        assert all(steps == list(range(len(steps))) for steps in by_session.values())


def test_subagent_counts() -> None:
    counts: Counter[str] = Counter()
    for path in WEKA:
        doc = json.loads(path.read_text(encoding="utf-8"))
        subagents = {r.session for r in read_records([path]) if r.parent is not None}
        assert len(subagents) == doc["totals"]["subagent_count"]
        counts[path.stem] = len(subagents)
    assert counts["trace_0277"] == 4 and counts["trace_0291"] == 2
    assert sum(counts.values()) == 6


def test_subagents_are_sessions_with_a_parent_on_the_parent_clock() -> None:
    records = [r for r in read_records([WEKA[3]]) if r.session == "trace_0277/agent_001"]
    assert WEKA[3].stem == "trace_0277"
    assert [r.parent for r in records] == ["trace_0277"] * 4
    assert [r.start_s for r in records] == pytest.approx([79.224, 85.224, 92.224, 98.224])


def test_new_tokens_and_pauses_follow_the_readme() -> None:
    for path in WEKA:
        raw = weka_sessions(path)
        for r in read_records([path]):
            requests = raw[r.session]
            if r.step:
                before = requests[r.step - 1]
                assert r.new_tokens == requests[r.step]["in"] - before["in"] - before["out"]
            else:
                assert r.new_tokens == r.prompt_tokens
            if r.step + 1 < len(requests):
                assert r.pause_s == pytest.approx(weka_pauses(requests)[r.step], abs=1e-6)
            else:
                assert r.pause_s is None


def test_statistics_match_an_independent_computation() -> None:
    sessions = {name: reqs for path in WEKA for name, reqs in weka_sessions(path).items() if reqs}
    steps = [q for reqs in sessions.values() for q in reqs]
    contexts = [q["in"] + q["out"] for q in steps]
    ends = [reqs[-1]["in"] + reqs[-1]["out"] for reqs in sessions.values()]
    pauses = [p for reqs in sessions.values() for p in weka_pauses(reqs)]
    reuse = [
        common_prefix(a["hash_ids"], b["hash_ids"]) / len(b["hash_ids"])
        for reqs in sessions.values()
        for a, b in pairwise(reqs)
        if a["hash_ids"] and b["hash_ids"]
    ]
    bad: list[BadRow] = []
    stats = trace_stats(read_records(WEKA, bad_rows=bad), len(bad)).to_json()
    assert bad == []
    assert stats["sessions"] == len(WEKA) == 13
    assert stats["subagents"] == 6
    assert stats["steps"] == len(steps) == 481
    for key, want in (("context_tokens", summary(contexts)), ("session_end_tokens", summary(ends))):
        got = stats[key]
        assert isinstance(got, dict)
        assert {k: got[k] for k in want} == want, key
    got_pause = stats["pause_seconds"]
    assert isinstance(got_pause, dict)
    for k, v in summary(pauses).items():
        assert got_pause[k] == pytest.approx(v, abs=1e-6), k
    got_steps = stats["steps_per_session"]
    assert isinstance(got_steps, dict)
    assert got_steps["max"] == max(len(r) for r in sessions.values()) == 153
    got_reuse = stats["prefix_reuse"]
    assert isinstance(got_reuse, dict)
    assert got_reuse["count"] == len(reuse)
    assert got_reuse["mean"] == pytest.approx(sum(reuse) / len(reuse), abs=1e-6)


def test_local_hash_ids_do_not_collide_across_traces() -> None:
    raw = {weka_sessions(path)[path.stem][0]["hash_ids"][0] for path in WEKA}
    assert raw == {1}  # every trace numbers its blocks from 1 (hash_id_scope "local")
    first = {r.block_hashes[0] for path in WEKA for r in read_records([path]) if r.step == 0 and r.parent is None}
    assert len(first) == len(WEKA)


def _doc(requests: list[object]) -> str:
    return json.dumps({"id": "t1", "block_size": 64, "requests": requests}, indent=1)


def _request(t: float, tokens_in: object, out: object = 10) -> dict[str, object]:
    return {"t": t, "type": "n", "in": tokens_in, "out": out, "hash_ids": [1, 2], "api_time": 1.0}


def test_bad_requests_are_reported_with_file_line_and_element(tmp_path: Path) -> None:
    path = tmp_path / "t1.json"
    missing = _request(2, 300)
    del missing["out"]
    sub = {"t": 5, "type": "subagent", "agent_id": "a1", "requests": [_request(0, 100), _request(1, -5)]}
    path.write_text(_doc([_request(0, 200), missing, _request(3, 400), sub]), encoding="utf-8")
    bad: list[BadRow] = []
    records = list(read_records([path], bad_rows=bad))
    assert [(r.session, r.prompt_tokens) for r in records] == [("t1", 200), ("t1", 400), ("t1/a1", 100)]
    assert [b.path for b in bad] == [str(path)] * 2
    assert "requests[1]: 'out' is missing" in bad[0].reason
    assert "requests[3].requests[1]: 'in' must be at least 0, got -5" in bad[1].reason
    text = path.read_text(encoding="utf-8").splitlines()
    assert '"in": 300' in "\n".join(text[bad[0].line - 1 : bad[0].line + 3])
    with pytest.raises(TraceError, match=rf"^{path}:\d+: requests\[1\]: 'out' is missing$"):
        list(read_records([path], strict=True))


def test_a_truncated_document_is_one_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "cut.json"
    path.write_text(_doc([_request(0, 200), _request(3, 400)])[:-40], encoding="utf-8")
    bad: list[BadRow] = []
    assert list(read_records([path], fmt="weka", bad_rows=bad)) == []
    assert len(bad) == 1 and bad[0].line > 1 and "not valid JSON" in bad[0].reason
    with pytest.raises(TraceError, match=r"cut\.json:\d+: not valid JSON"):
        list(read_records([path], fmt="weka", strict=True))


def test_a_document_without_requests_is_a_bad_row(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    path.write_text('{"id": "x"}', encoding="utf-8")
    bad: list[BadRow] = []
    assert list(read_records([path], fmt="weka", bad_rows=bad)) == []
    assert "no 'requests' list" in bad[0].reason


def test_a_repeated_agent_id_does_not_merge_two_subagents(tmp_path: Path) -> None:
    path = tmp_path / "t1.json"
    subs = [{"t": t, "type": "subagent", "agent_id": "a", "requests": [_request(0, 100)]} for t in (1, 2)]
    path.write_text(_doc([_request(0, 200), *subs]), encoding="utf-8")
    records = list(read_records([path]))
    assert [(r.session, r.parent, r.step) for r in records] == [
        ("t1", None, 0),
        ("t1/a", "t1", 0),
        ("t1/a#2", "t1", 0),
    ]


def test_a_request_dated_before_the_previous_one_is_a_bad_row(tmp_path: Path) -> None:
    """Time goes forward within a session (issue 22): a ``t`` before the previous request's is reported with its
    file, line and element and skipped (``--strict`` stops there); an equal ``t`` (whole seconds) is kept."""
    path = tmp_path / "t1.json"
    path.write_text(_doc([_request(10, 200), _request(10, 300), _request(4, 400), _request(12, 500)]), "utf-8")
    bad: list[BadRow] = []
    records = list(read_records([path], bad_rows=bad))
    assert [(r.start_s, r.prompt_tokens) for r in records] == [(10.0, 200), (10.0, 300), (12.0, 500)]
    assert len(bad) == 1
    assert "requests[2]: t 4 is before the previous request's t 10: a session's requests go forward" in bad[0].reason
    with pytest.raises(TraceError, match=r"requests\[2\]: t 4 is before"):
        list(read_records([path], strict=True))
