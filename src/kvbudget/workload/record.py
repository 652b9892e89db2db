"""The internal per-step record every trace reader produces, and the session shape the simulator consumes.

``StepRecord`` is one model call inside an agent session, as a trace saw it. Token counts are the
trace's own: ``prompt_tokens`` is the whole prompt of that call (the context the engine must hold),
``new_tokens`` the tokens appended since the previous call's prompt and output when the trace says
so, ``cached_tokens`` the prefix the serving side reported as reused.

``SessionPlan`` / ``Step`` is what a serving instance sees of one session: when it arrives, a shared
prefix, then steps that each append tokens, generate output, and pause (tool call / think time)
while holding or releasing their cache. Trace replay and workload generators both produce it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from itertools import repeat

# A step as the simulator's hot loop reads it: (append_tokens, output_tokens, pause_s, compact_to).
Row = tuple[int, int, float, int | None]


@dataclass(slots=True, unsafe_hash=True)
class StepRecord:
    """One step as a trace saw it. Treat it as immutable (derive changed copies with
    ``dataclasses.replace``); it is not ``frozen`` only because a frozen dataclass's constructor
    costs three times as much, and readers build one per trace row (bench/trace_stats.py)."""

    session: str
    step: int
    start_s: float
    prompt_tokens: int
    output_tokens: int
    parent: str | None = None
    new_tokens: int | None = None
    cached_tokens: int | None = None
    pause_s: float | None = None
    block_hashes: tuple[int, ...] = ()
    block_size: int | None = None
    source: str = ""
    # The reader knows no later step of this session follows in its stream (a plain Mooncake row, a
    # WEKA session's last request, a buffered session's last step): consumers may drop its state.
    final: bool = False
    # Leading block hashes equal to the previous step's of this session, where the reader compared
    # them anyway (WEKA, to salt only the new ids); None: not known, consumers compare themselves.
    shared_blocks: int | None = field(default=None, compare=False)
    # The session's shared prefix as the trace declares it: (system prompt tokens, tool catalogue tokens)
    # (WEKA's ``system_tokens`` and ``tool_tokens``), on a session's first step; None: the trace does not say.
    declared_prefix: tuple[int, int] | None = field(default=None, compare=False)

    def to_json(self) -> dict[str, object]:
        """The kvbudget JSONL per-step format (docs/traces.md), also the `trace convert` export."""
        out: dict[str, object] = {
            "session": self.session,
            "step": self.step,
            "start_s": self.start_s,
            "prompt_tokens": self.prompt_tokens,
            "output_tokens": self.output_tokens,
        }
        if self.parent is not None:
            out["parent"] = self.parent
        if self.new_tokens is not None:
            out["new_tokens"] = self.new_tokens
        if self.cached_tokens is not None:
            out["cached_tokens"] = self.cached_tokens
        if self.pause_s is not None:
            out["pause_s"] = self.pause_s
        if self.block_hashes:
            out["block_hashes"] = list(self.block_hashes)
            out["block_size"] = self.block_size
        if self.declared_prefix is not None:
            out["system_prompt_tokens"], out["tool_catalog_tokens"] = self.declared_prefix
        return out


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """The length of the longest common prefix of two block-hash sequences of one type (tuples or lists).

    Chained ids make the usual case one C-level comparison (a step repeats the previous step's ids and
    appends some); otherwise a binary search over slice comparisons, O(n log n) compares in C."""
    n = len(b)
    if n <= len(a):
        if a[:n] == b:  # a slice of a tuple's whole length is the tuple itself: one copy at most
            return n
    elif a == b[: len(a)]:
        return len(a)
    n = min(n, len(a))
    lo, hi = 0, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True, slots=True)
class BadRow:
    """A row a reader could not use: reported with file and line, never silently dropped."""

    path: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass(slots=True, unsafe_hash=True)
class Step:
    """One step of a session as the simulator replays it. Treat it as immutable; it is not
    ``frozen`` because the generator builds one per simulated step and a frozen constructor costs
    three times as much (StepRecord likewise)."""

    append_tokens: int  # tokens added to the context before this step's prefill (tool result, user turn)
    output_tokens: int  # tokens generated (decode) in this step; they join the context
    pause_s: float  # tool latency + think time after this step, before the next (0 after the last)
    # Trace replay only (workload.generate.replay_sessions): when set, the client compacted its
    # context before this step: the context is cut to ``compact_to`` tokens (re-prefilled), then
    # ``append_tokens`` are added as usual. Generated sessions leave compaction to the cap policy.
    compact_to: int | None = None


class StepRows:
    """A generated session's steps held as three columns (appended tokens, output tokens, pauses).

    It is an iterator of ``Step`` like any session's steps; ``rows()`` hands the steps not yet
    consumed to the simulator as plain tuples instead, so the hot loop builds no ``Step`` per step.
    """

    __slots__ = ("appends", "at", "outputs", "pauses")

    def __init__(self, appends: list[int], outputs: list[int], pauses: list[float]) -> None:
        self.appends, self.outputs, self.pauses = appends, outputs, pauses
        self.at = 0

    def __iter__(self) -> StepRows:
        return self

    def __next__(self) -> Step:
        i = self.at
        if i >= len(self.outputs):
            raise StopIteration
        self.at = i + 1
        return Step(self.appends[i], self.outputs[i], self.pauses[i])

    def __len__(self) -> int:
        """Steps not yet consumed."""
        return len(self.outputs) - self.at

    def rows(self) -> Iterator[Row]:
        """The steps not yet consumed, as ``Row`` tuples; they count as consumed from here on."""
        i, self.at = self.at, len(self.outputs)
        a, o, p = self.appends, self.outputs, self.pauses
        if i:
            a, o, p = a[i:], o[i:], p[i:]
        return zip(a, o, p, repeat(None))


def step_rows(steps: Iterator[Step]) -> Iterator[Row]:
    """Any session's steps as ``Row`` tuples (generated ones without building a ``Step`` each)."""
    if isinstance(steps, StepRows):
        return steps.rows()
    return ((s.append_tokens, s.output_tokens, s.pause_s, s.compact_to) for s in steps)


@dataclass(frozen=True, slots=True)
class SessionPlan:
    """A session as a serving instance sees it. ``steps`` may be a lazy iterator (memory stays
    bounded by live sessions); ``prefix_tokens`` of the first step's prompt are a byte-stable prefix
    shared by every session (system prompt + tool catalogue)."""

    session_id: str
    arrival_s: float
    steps: Iterator[Step]
    prefix_tokens: int = 0
    parent: str | None = None
    retries: int = field(default=0)
