"""The agent workload model (``Workload``) and its file format: TOML, or YAML with the ``yaml`` extra.

A workload says how sessions arrive and what each one does: a shared prefix (system prompt + tool
catalogue) that every session's first prompt starts with, a first prompt, then steps that each
append tokens (tool results, user turns), generate output, and pause (tool latency + think time)
holding their cache; the cap and what a client does when its context reaches it; and client
retries after a timeout. docs/workload.md documents every key with an example.

Files are untrusted input (read by ``kvbudget.workload.loader``): every table is checked at load
time, unknown keys are errors (a typo must not silently fall back to a default), and each error is
one line naming the file, the field and the fix, e.g.
``workload.toml: [steps].mean must be at least 1 (counts start at 1), got -3``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal

from kvbudget.errors import InputError
from kvbudget.workload.distributions import Constant, Distribution

CapAction = Literal["refuse", "compact", "summarize"]
CAP_ACTIONS: tuple[CapAction, ...] = ("refuse", "compact", "summarize")

# Tables holding one distribution each: file key -> what it is, for messages and docs.
DISTRIBUTIONS = {
    "steps": "model calls per session (whole numbers >= 1)",
    "first_prompt_tokens": "tokens of the first prompt after the shared prefix",
    "append_tokens": "tokens appended before each later step (tool results + user turn)",
    "output_tokens": "tokens generated per step",
    "tool_latency_s": "seconds a tool runs after a step (the session holds its cache)",
    "think_time_s": "seconds of user / agent think time after a step",
}
REQUIRED = ("arrival", "steps", "first_prompt_tokens", "append_tokens", "output_tokens")
TOP_KEYS = ("name", "description", "arrival", "prefix", *DISTRIBUTIONS, "cap", "retries")


@dataclass(frozen=True, slots=True)
class Arrival:
    """Sessions arrive as a Poisson process of ``rate_per_s``, or at the session starts of a trace."""

    rate_per_s: float | None = None
    replay: str | None = None  # trace path (relative paths resolved against the workload file)
    format: str | None = None  # trace format for replay (None: detected)


@dataclass(frozen=True, slots=True)
class Prefix:
    """A byte-stable prefix every session's first prompt starts with (shareable in a prefix cache)."""

    system_prompt_tokens: int = 0
    tool_catalog_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.system_prompt_tokens + self.tool_catalog_tokens


@dataclass(frozen=True, slots=True)
class CapPolicy:
    """What happens when a session's context would pass the cap.

    * ``refuse``: the step is refused and the session ends there (counted as refused).
    * ``compact``: the client drops old history so the context (shared prefix included) becomes the
      target; nothing is generated, the compacted context is prefilled again.
    * ``summarize``: the model first generates ``summary_tokens`` output tokens over the full context,
      then the context becomes the target (prefix + summary + recent turns), prefilled again.

    ``tokens`` is the cap itself; None means the serving cap (the simulator's ``--context``).
    The target is ``target_tokens``, or ``target_fraction`` of the cap.
    """

    action: CapAction = "refuse"
    tokens: int | None = None
    target_tokens: int | None = None
    target_fraction: float | None = None
    summary_tokens: int = 0

    def target_for(self, cap: int) -> int:
        """Tokens the context is cut to at a cap of ``cap`` tokens (refuse: the cap itself)."""
        if self.target_tokens is not None:
            return self.target_tokens
        if self.target_fraction is not None:
            return max(1, math.floor(cap * self.target_fraction))
        return cap


@dataclass(frozen=True, slots=True)
class Retries:
    """Clients abandon a step's request after ``timeout_s`` without an answer and send it again after
    a backoff (``backoff_s`` x ``backoff_multiplier``^(k-1) before the k-th retry), at most
    ``max_retries`` times. Unless ``server_cancels``, the server keeps serving an abandoned attempt
    (it never noticed the client left), so each retry is one more in-flight sequence."""

    timeout_s: float
    max_retries: int = 3
    backoff_s: float = 1.0
    backoff_multiplier: float = 2.0
    server_cancels: bool = False

    def backoff(self, k: int) -> float:
        """Seconds before the k-th retry (k >= 1)."""
        return self.backoff_s * self.backoff_multiplier ** (k - 1)


@dataclass(frozen=True, slots=True)
class Workload:
    """An agent workload. Token quantities are whole tokens; times are seconds."""

    arrival: Arrival
    steps: Distribution
    first_prompt_tokens: Distribution
    append_tokens: Distribution
    output_tokens: Distribution
    tool_latency_s: Distribution = field(default_factory=lambda: Constant(0))
    think_time_s: Distribution = field(default_factory=lambda: Constant(0))
    prefix: Prefix = field(default_factory=Prefix)
    cap: CapPolicy = field(default_factory=CapPolicy)
    retries: Retries | None = None
    name: str = ""
    description: str = ""
    source: str = ""  # where it came from (a file path, "fit of N sessions"); used in messages

    def __post_init__(self) -> None:
        where = self.source or "workload"
        if math.floor(self.steps.min_value()) < 1:
            raise InputError(
                f"{where}: [steps] can draw 0 steps ({self.steps.describe()}); every session makes at "
                "least one call: use geometric, uniform with low >= 1, constant >= 1 or empirical values >= 1"
            )
        cap = self.cap
        if cap.target_tokens is not None and cap.target_tokens <= self.prefix.tokens:
            raise InputError(
                f"{where}: [cap].target_tokens ({cap.target_tokens}) must exceed the shared prefix "
                f"({self.prefix.tokens} tokens): compaction keeps the prefix"
            )

    @property
    def prefix_tokens(self) -> int:
        return self.prefix.tokens

    def distributions(self) -> dict[str, Distribution]:
        return {name: getattr(self, name) for name in DISTRIBUTIONS}

    def to_dict(self) -> dict[str, Any]:
        """The file structure (what ``dump_toml`` writes and ``workload_from_dict`` reads)."""
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        if self.description:
            out["description"] = self.description
        a = self.arrival
        arrival: dict[str, Any] = {"rate_per_s": a.rate_per_s} if a.rate_per_s is not None else {"replay": a.replay}
        if a.format is not None:
            arrival["format"] = a.format
        out["arrival"] = arrival
        out["prefix"] = {
            "system_prompt_tokens": self.prefix.system_prompt_tokens,
            "tool_catalog_tokens": self.prefix.tool_catalog_tokens,
        }
        for name, dist in self.distributions().items():
            out[name] = dist.to_dict()
        c = self.cap
        cap: dict[str, Any] = {"at_cap": c.action}
        for key, value in (
            ("tokens", c.tokens),
            ("target_tokens", c.target_tokens),
            ("target_fraction", c.target_fraction),
        ):
            if value is not None:
                cap[key] = value
        if c.action == "summarize":
            cap["summary_tokens"] = c.summary_tokens
        out["cap"] = cap
        if self.retries is not None:
            r = self.retries
            out["retries"] = {
                "timeout_s": r.timeout_s,
                "max_retries": r.max_retries,
                "backoff_s": r.backoff_s,
                "backoff_multiplier": r.backoff_multiplier,
                "server_cancels": r.server_cancels,
            }
        return out
