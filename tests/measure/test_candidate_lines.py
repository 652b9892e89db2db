"""The block scan under every reader: a window only skips work, never a line (small blocks force the skip)."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.measure import logs

NEEDLES = ("KV cache", "GPU blocks")
LINE = st.sampled_from(["noise", "the KV cache is 3 GiB", "# GPU blocks: 10", "", "x KV cache and GPU blocks"])


def scan(text: str, window: tuple[int, int] = (1, 2**63)) -> list[tuple[int, str]]:
    return list(logs.candidate_lines(io.StringIO(text), NEEDLES, window))


@settings(max_examples=200, deadline=None)
@given(
    lines=st.lists(LINE, max_size=60),
    first=st.integers(1, 70),
    span=st.integers(0, 70),
    chunk=st.integers(1, 64),
    tail=st.booleans(),
)
def test_a_window_yields_the_whole_scan_s_lines_inside_it(
    lines: list[str], first: int, span: int, chunk: int, tail: bool
) -> None:
    text = "\n".join(lines) + ("" if tail else "\n")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(logs, "CHUNK", chunk)
        whole = scan(text)
        inside = scan(text, (first, first + span))
    assert inside[-1] == whole[-1]  # the line count is the file's either way
    assert inside[:-1] == [(n, line) for n, line in whole[:-1] if first <= n < first + span]
    assert [line for _, line in whole[:-1]] == [line for line in text.split("\n") if any(k in line for k in NEEDLES)]
