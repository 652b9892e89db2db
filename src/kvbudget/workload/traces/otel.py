"""OpenTelemetry GenAI spans as JSON: a flat span list or an OTLP/JSON export.

Shapes read: ``{"spans": [...]}`` or a bare list (kubernetes-sigs/inference-perf
docs/otel_trace_replay.md: ``trace_id``, ``span_id``, ``parent_span_id``, ``name``, ISO ``start_time`` /
``end_time``, ``attributes`` as an object), and OTLP/JSON (``resourceSpans[].scopeSpans[].spans[]``
with ``traceId``, ``spanId``, ``parentSpanId``, ``startTimeUnixNano``, ``endTimeUnixNano`` and
``attributes`` as ``[{key, value: {stringValue | intValue | doubleValue}}]``).

Which spans are steps: a span that reports token usage, or whose ``gen_ai.operation.name`` is an
inference (``chat``, ``text_completion``, ``generate_content``). An inference span without usage
is a bad row (kvbudget does not tokenize message content). Tool and agent spans are structure.

Fields (open-telemetry/semantic-conventions gen-ai, v1.27-v1.41): prompt = ``gen_ai.usage.input_tokens``,
else the deprecated ``gen_ai.usage.prompt_tokens`` (still emitted by vLLM's own spans), else
OpenInference ``llm.token_count.prompt``; output likewise from ``output_tokens`` /
``completion_tokens`` / ``llm.token_count.completion``; cached = ``gen_ai.usage.cache_read.input_tokens``.

Sessions: ``gen_ai.conversation.id`` on the span or its nearest ancestor; else ``session.id``
(OpenInference, Langfuse), ``langfuse.session.id`` or any other ``*.session.id`` attribute; else the
trace id (one trace = one session, as inference-perf replays them). Sub-agents come only from what
the data says: a chat span under two or more ``invoke_agent`` spans belongs to the innermost agent,
a session ``<session>/<agent id or name>`` whose parent is the enclosing agent's session.
Within a session, steps are ordered by start time; ``pause_s`` = next start - this end (tool and
think time), ``new_tokens`` = prompt[t] - prompt[t-1] - output[t-1] (each call re-sends the history).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from kvbudget.workload.record import BadRow, StepRecord
from kvbudget.workload.traces._common import (
    BadSink,
    JsonPath,
    RowError,
    as_whole,
    gap,
    json_path,
    line_of,
    load_document,
    parse_time,
)

INFERENCE = {"chat", "text_completion", "generate_content"}  # gen_ai.operation.name values that call a model
PROMPT_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
OUTPUT_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")
CACHED_KEYS = ("gen_ai.usage.cache_read.input_tokens", "llm.token_count.prompt_details.cache_read")
SESSION_KEYS = ("gen_ai.conversation.id", "session.id", "langfuse.session.id")


@dataclass(frozen=True, slots=True)
class _Span:
    trace: str
    span: str
    parent: str | None
    attrs: Mapping[str, object]
    start: object
    end: object
    where: JsonPath
    index: int


@dataclass(frozen=True, slots=True)
class _Call:
    session: str
    parent: str | None
    start: float
    end: float | None
    prompt: int
    output: int
    cached: int | None
    index: int


def _otlp_value(value: object) -> object:
    if not isinstance(value, dict):
        return value
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in value:
            return value[kind]
    if "intValue" in value:  # OTLP/JSON writes 64-bit integers as strings
        raw = value["intValue"]
        return int(raw) if isinstance(raw, str) and raw.lstrip("-").isdigit() else raw
    return None


def _attributes(raw: object) -> dict[str, object]:
    if isinstance(raw, dict):
        return dict(raw)
    if isinstance(raw, list):
        return {
            a["key"]: _otlp_value(a.get("value")) for a in raw if isinstance(a, dict) and isinstance(a.get("key"), str)
        }
    return {}


def _spans(doc: object, odd: Callable[[JsonPath], None]) -> Iterator[_Span]:
    if isinstance(doc, dict) and isinstance(doc.get("resourceSpans"), list):
        count = 0
        for a, rs in enumerate(doc["resourceSpans"]):
            scopes = rs.get("scopeSpans", rs.get("instrumentationLibrarySpans")) if isinstance(rs, dict) else None
            key = "scopeSpans" if isinstance(rs, dict) and "scopeSpans" in rs else "instrumentationLibrarySpans"
            for b, ss in enumerate(scopes if isinstance(scopes, list) else []):
                for c, span in enumerate(ss.get("spans", []) if isinstance(ss, dict) else []):
                    where: JsonPath = ("resourceSpans", a, key, b, "spans", c)
                    if not isinstance(span, dict):
                        odd(where)
                    else:
                        yield _Span(
                            trace=str(span.get("traceId", "")),
                            span=str(span.get("spanId", "")),
                            parent=str(span["parentSpanId"]) if span.get("parentSpanId") else None,
                            attrs=_attributes(span.get("attributes")),
                            start=_nanos(span.get("startTimeUnixNano")),
                            end=_nanos(span.get("endTimeUnixNano")),
                            where=where,
                            index=count,
                        )
                    count += 1
        return
    spans, root = (doc.get("spans"), ("spans",)) if isinstance(doc, dict) else (doc, ())
    for i, span in enumerate(spans if isinstance(spans, list) else []):
        if not isinstance(span, dict):
            odd((*root, i))
        else:
            yield _Span(
                trace=str(span.get("trace_id", span.get("traceId", ""))),
                span=str(span.get("span_id", span.get("spanId", ""))),
                parent=_parent(span),
                attrs=_attributes(span.get("attributes")),
                start=span.get("start_time", _nanos(span.get("startTimeUnixNano"))),
                end=span.get("end_time", _nanos(span.get("endTimeUnixNano"))),
                where=(*root, i),
                index=i,
            )


def _parent(span: Mapping[str, object]) -> str | None:
    value = span.get("parent_span_id", span.get("parentSpanId"))
    return str(value) if value else None


def _nanos(value: object) -> object:
    """OTLP times are nanoseconds since the epoch (as text or a number); None stays None."""
    if isinstance(value, str) and value.isdigit():
        return int(value) / 1e9
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value / 1e9
    return value


def _first(attrs: Mapping[str, object], keys: tuple[str, ...]) -> tuple[str, object] | None:
    for key in keys:
        if attrs.get(key) is not None:
            return key, attrs[key]
    return None


class _Tree:
    """Ancestors of a span within its trace, for conversation ids and agent nesting."""

    def __init__(self, spans: list[_Span]) -> None:
        self.by_id = {(s.trace, s.span): s for s in spans}

    def chain(self, span: _Span) -> Iterator[_Span]:
        """The span, then its ancestors, innermost first (cycles are cut)."""
        seen: set[str] = set()
        current: _Span | None = span
        while current is not None and current.span not in seen:
            seen.add(current.span)
            yield current
            current = self.by_id.get((current.trace, current.parent)) if current.parent else None

    def session(self, span: _Span) -> str:
        for key in SESSION_KEYS:
            for node in self.chain(span):
                if node.attrs.get(key) not in (None, ""):
                    return str(node.attrs[key])
        for node in self.chain(span):
            for key, value in node.attrs.items():
                if key.endswith(".session.id") and value not in (None, ""):
                    return str(value)
        return span.trace or "trace"

    def agents(self, span: _Span) -> list[str]:
        """Names of the enclosing invoke_agent spans, outermost first."""
        names = []
        for node in self.chain(span):
            if node is not span and node.attrs.get("gen_ai.operation.name") == "invoke_agent":
                name = node.attrs.get("gen_ai.agent.id") or node.attrs.get("gen_ai.agent.name") or node.span
                names.append(str(name))
        return names[::-1]


def read(path: Path, bad: BadSink) -> Iterator[StepRecord]:
    loaded = load_document(path, bad)
    if loaded is None:
        return
    text, doc = loaded
    shaped = isinstance(doc, list) or (
        isinstance(doc, dict) and (isinstance(doc.get("spans"), list) or isinstance(doc.get("resourceSpans"), list))
    )
    if not shaped:
        bad(BadRow(str(path), 1, "not an OpenTelemetry export: no 'spans' or 'resourceSpans' list; skipped"))
        return

    def odd(where: JsonPath) -> None:
        bad(BadRow(str(path), line_of(text, where), f"{json_path(where)}: a span must be a JSON object"))

    spans = list(_spans(doc, odd))
    tree = _Tree(spans)
    calls: dict[str, list[_Call]] = {}
    for span in spans:
        usage = _first(span.attrs, PROMPT_KEYS) or _first(span.attrs, OUTPUT_KEYS)
        if usage is None and span.attrs.get("gen_ai.operation.name") not in INFERENCE:
            continue  # a tool, agent or workflow span: structure, not a model call
        try:
            call = _call(span, tree)
        except RowError as exc:
            bad(BadRow(str(path), line_of(text, span.where), f"{json_path(span.where)}: {exc}"))
            continue
        calls.setdefault(call.session, []).append(call)
    source = f"otel:{path.name}"
    for session, steps in calls.items():
        steps.sort(key=lambda c: (c.start, c.index))
        for k, call in enumerate(steps):
            following = steps[k + 1] if k + 1 < len(steps) else None
            previous = steps[k - 1] if k else None
            yield StepRecord(
                session=session,
                step=k,
                start_s=call.start,
                prompt_tokens=call.prompt,
                output_tokens=call.output,
                parent=call.parent,
                new_tokens=call.prompt - previous.prompt - previous.output if previous else call.prompt,
                cached_tokens=call.cached,
                pause_s=gap(following.start, call.end) if following and call.end is not None else None,
                source=source,
            )


def _call(span: _Span, tree: _Tree) -> _Call:
    prompt = _first(span.attrs, PROMPT_KEYS)
    output = _first(span.attrs, OUTPUT_KEYS)
    if prompt is None or output is None:
        raise RowError(
            "no token usage: needs gen_ai.usage.input_tokens (or prompt_tokens) and gen_ai.usage.output_tokens "
            "(or completion_tokens); kvbudget does not tokenize message content"
        )
    cached = _first(span.attrs, CACHED_KEYS)
    if span.start is None:
        raise RowError("the span has no start time")
    start = parse_time(span.start, "start_time")
    end = None if span.end is None else parse_time(span.end, "end_time")
    base = tree.session(span)
    agents = tree.agents(span)
    # the outermost agent is the session itself; each deeper invoke_agent is a sub-agent of the one around it
    session = "/".join([base, *agents[1:]])
    parent = "/".join([base, *agents[1:-1]]) if len(agents) >= 2 else None
    return _Call(
        session=session,
        parent=parent,
        start=start,
        end=end,
        prompt=as_whole(prompt[1], prompt[0]),
        output=as_whole(output[1], output[0]),
        cached=None if cached is None else as_whole(cached[1], cached[0]),
        index=span.index,
    )
