"""OpenTelemetry GenAI spans: the shipped inference-perf fixtures (deprecated attribute names), an
OTLP/JSON export with current names, conversation ids and nested agents, and bad spans."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from kvbudget.errors import TraceError
from kvbudget.workload.record import BadRow
from kvbudget.workload.traces import detect_format, read_records
from tests.workload.raw_traces import OTEL, iso


def test_prefix_sharing_example_uses_the_deprecated_names() -> None:
    path = next(p for p in OTEL if p.stem == "prefix_sharing_example")
    spans = json.loads(path.read_text(encoding="utf-8"))["spans"]
    records = list(read_records([path]))
    assert len(records) == len(spans) == 7
    by_trace: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_trace.setdefault(span["trace_id"], []).append(span)
    assert {r.session for r in records} == set(by_trace)  # no conversation id: one trace, one session
    turns = [r for r in records if r.session == "conversation_trace"]
    raw = by_trace["conversation_trace"]
    assert [r.prompt_tokens for r in turns] == [s["attributes"]["gen_ai.usage.prompt_tokens"] for s in raw]
    assert [r.output_tokens for r in turns] == [s["attributes"]["gen_ai.usage.completion_tokens"] for s in raw]
    pauses = [iso(b["start_time"]) - iso(a["end_time"]) for a, b in pairwise(raw)]
    assert [r.pause_s for r in turns[:-1]] == pytest.approx(pauses) and turns[-1].pause_s is None
    assert [r.new_tokens for r in turns] == [100, 180 - 150, 270 - 240, 380 - 340]


def test_spans_without_usage_are_bad_rows_not_silence() -> None:
    path = next(p for p in OTEL if p.stem == "multi_agent_research")
    bad: list[BadRow] = []
    assert list(read_records([path], bad_rows=bad)) == []
    assert len(bad) == len(json.loads(path.read_text(encoding="utf-8"))["spans"]) == 12
    lines = path.read_text(encoding="utf-8").splitlines()
    assert all('"trace_id"' in lines[b.line] for b in bad)  # the line after each span's opening brace
    assert "no token usage" in bad[0].reason and bad[0].reason.startswith("spans[0]: ")


def _attr(key: str, value: object) -> dict[str, object]:
    kind = "intValue" if isinstance(value, int) else "stringValue"
    return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}


def _span(span_id: str, parent: str | None, start_s: float, end_s: float, **attrs: object) -> dict[str, object]:
    return {
        "traceId": "t" * 32,
        "spanId": span_id,
        "parentSpanId": parent or "",
        "name": span_id,
        "startTimeUnixNano": str(int(start_s * 1e9)),
        "endTimeUnixNano": str(int(end_s * 1e9)),
        "attributes": [_attr(k.replace("__", "."), v) for k, v in attrs.items()],
    }


def _otlp(tmp_path: Path, spans: list[object]) -> Path:
    path = tmp_path / "otlp.json"
    doc = {"resourceSpans": [{"resource": {}, "scopeSpans": [{"scope": {"name": "x"}, "spans": spans}]}]}
    path.write_text(json.dumps(doc, indent=2), encoding="utf-8")
    return path


def _chat(span_id: str, parent: str, start: float, tokens: int, **extra: object) -> dict[str, object]:
    usage = {"gen_ai__usage__input_tokens": tokens, "gen_ai__usage__output_tokens": 10}
    return _span(span_id, parent, start, start + 1, gen_ai__operation__name="chat", **usage, **extra)


def test_otlp_json_conversations_and_nested_agents(tmp_path: Path) -> None:
    spans: list[object] = [
        _span(
            "root",
            None,
            0,
            100,
            gen_ai__operation__name="invoke_agent",
            gen_ai__agent__name="coder",
            gen_ai__conversation__id="conv-1",
        ),
        _chat("c1", "root", 1, 1000, gen_ai__usage__cache_read__input_tokens=800),
        _span("tool", "root", 2, 5, gen_ai__operation__name="execute_tool", gen_ai__tool__name="grep"),
        _span("sub", "root", 6, 20, gen_ai__operation__name="invoke_agent", gen_ai__agent__id="explorer"),
        _chat("s1", "sub", 7, 300),
        _chat("s2", "sub", 9, 500),
        _chat("c2", "root", 30, 1400),
    ]
    path = _otlp(tmp_path, spans)
    assert detect_format(path) == "otel"
    records = list(read_records([path]))
    sessions = {r.session: [x for x in records if x.session == r.session] for r in records}
    assert set(sessions) == {"conv-1", "conv-1/explorer"}
    main, sub = sessions["conv-1"], sessions["conv-1/explorer"]
    assert [r.prompt_tokens for r in main] == [1000, 1400] and main[0].cached_tokens == 800
    assert main[0].pause_s == pytest.approx(28.0) and main[0].parent is None
    assert [r.prompt_tokens for r in sub] == [300, 500] and {r.parent for r in sub} == {"conv-1"}
    assert sub[0].pause_s == pytest.approx(1.0) and sub[1].pause_s is None


def test_bad_spans_and_truncated_documents(tmp_path: Path) -> None:
    spans: list[object] = [
        _chat("c1", "", 1, 1000),
        _chat("c2", "", 2, -7),
        _span("c3", None, 3, 4, gen_ai__operation__name="chat"),
        "not a span",
    ]
    path = _otlp(tmp_path, spans)
    bad: list[BadRow] = []
    assert len(list(read_records([path], bad_rows=bad))) == 1
    bad.sort(key=lambda b: b.line)
    assert [b.reason.split(": ", 1)[0] for b in bad] == [
        "resourceSpans[0].scopeSpans[0].spans[1]",
        "resourceSpans[0].scopeSpans[0].spans[2]",
        "resourceSpans[0].scopeSpans[0].spans[3]",
    ]
    assert "must be at least 0, got -7" in bad[0].reason and "no token usage" in bad[1].reason
    assert len({b.line for b in bad}) == 3 and all(b.line > 1 for b in bad)
    cut = tmp_path / "cut.json"
    cut.write_text(path.read_text(encoding="utf-8")[:300], encoding="utf-8")
    bad = []
    assert list(read_records([cut], fmt="otel", bad_rows=bad)) == []
    assert len(bad) == 1 and "not valid JSON" in bad[0].reason
    with pytest.raises(TraceError, match=r"cut\.json:\d+: not valid JSON"):
        list(read_records([cut], fmt="otel", strict=True))


def test_session_falls_back_to_session_id_attributes(tmp_path: Path) -> None:
    path = tmp_path / "flat.json"
    spans = [
        {
            "trace_id": f"tr{i}",
            "span_id": f"s{i}",
            "start_time": f"2026-02-25T12:00:0{i}",
            "end_time": f"2026-02-25T12:00:0{i}.5",
            "attributes": {
                "session.id": "user-7",
                "gen_ai.usage.input_tokens": 10 * (i + 1),
                "gen_ai.usage.output_tokens": 1,
            },
        }
        for i in range(3)
    ]
    path.write_text(json.dumps({"spans": spans}), encoding="utf-8")
    records = list(read_records([path]))
    assert {r.session for r in records} == {"user-7"} and [r.step for r in records] == [0, 1, 2]
    assert [r.pause_s for r in records] == [0.5, 0.5, None]
