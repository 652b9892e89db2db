"""The body the gateway forwards: the client's own bytes, with only the keys the gateway adds spliced in
(``max_tokens`` when the client set no limit, ``stream_options.include_usage`` for a stream), so a long conversation
is not serialised again; anything else is serialised from the parsed body. Either way the engine reads the same
JSON document as the gateway's changes applied to the client's."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.gateway.proxy import _encoded

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
BODIES = st.dictionaries(st.text(max_size=12), VALUES, max_size=6)
ADDED = st.fixed_dictionaries(
    {}, optional={"max_tokens": st.integers(1, 10**6), "stream_options": st.just({"include_usage": True})}
)
STYLES = [{}, {"indent": 2}, {"ensure_ascii": False}, {"separators": (",", ":")}]


@settings(deadline=None)  # no time limit: a loaded machine
@given(body=BODIES, added=ADDED, style=st.sampled_from(STYLES), padding=st.sampled_from(["", " ", "\n", "\t \r\n"]))
def test_the_forwarded_bytes_read_as_the_body_with_the_gateways_keys(
    body: dict[str, Any], added: dict[str, Any], style: dict[str, Any], padding: str
) -> None:
    raw = (padding + json.dumps(body, **style) + padding).encode()
    sent = _encoded(raw, body, {**body, **added}, added)
    assert json.loads(sent) == {**body, **added}
    if not added:
        assert sent == raw  # nothing to add: the client's bytes as they came
    elif not added.keys() & body.keys():
        assert sent.startswith(raw.rstrip()[:-1])  # spliced: the client's bytes kept, not serialised again


def test_a_body_in_utf16_or_with_a_key_the_gateway_changes_is_serialised_again() -> None:
    body = {"messages": [{"role": "user", "content": "é"}], "stream": True}
    added = {"stream_options": {"include_usage": True}}
    for raw in (json.dumps(body).encode("utf-16-le"), json.dumps(body).encode("utf-16"), b"\xef\xbb\xbf" + b"x"):
        assert json.loads(_encoded(raw, body, {**body, **added}, added)) == {**body, **added}
    kept = {**body, "stream_options": {"include_usage": False, "continuous_usage_stats": True}}
    merged = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    assert json.loads(_encoded(json.dumps(kept).encode(), kept, {**kept, **merged}, merged)) == {**kept, **merged}
