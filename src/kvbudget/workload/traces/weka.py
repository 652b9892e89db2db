"""WEKA kv-cache-tester traces: one JSON document per real Claude Code session, sub-agents nested.

Format: callanjfox/kv-cache-tester docs/trace_replay_tester.md ("Trace Format", "Sub-Agent Handling")
and tests/data/traces/README.md. The document has ``id``, ``block_size`` (64), ``hash_id_scope`` and
``requests[]``. A request has ``t`` (seconds from the session start), ``in`` (the **whole prompt**),
``out``, ``hash_ids`` (64-token blocks, full blocks only, chained), ``api_time`` (server time, not
on every request), ``think_time``, ``type`` (``s`` streaming / ``n`` non-streaming / ``subagent``).
A ``type: subagent`` entry has its own ``t`` (on the enclosing session's clock), ``agent_id`` and
``requests[]`` whose ``t`` restart at 0 (trace_0277: agent_001 at t=79.224 s, its requests at 0, 6, 13 s).

Mapping to StepRecord:

* one session per document, id = the document's ``id`` (file stem when absent); each sub-agent is its
  own session ``<id>/<agent_id>`` with ``parent`` = the enclosing session, and its own step indexes;
* every request is a step, streaming and non-streaming alike (the replay tester sends both);
* ``new_tokens`` = in[t] - in[t-1] - out[t-1] (README "Semantics"), negative when Claude Code
  compacted the context; the first step's whole prompt is new;
* ``pause_s`` = t[next] - t - api_time (the gap between this response and the next request),
  clipped at 0 for the traces' whole-second ``t``. ``think_time`` is not used: it counts from the end
  of the last request that *has* an ``api_time`` (trace_0314 request 23: think_time 1,283 s across a
  26 s gap). Without ``api_time`` the whole gap counts as pause, an upper bound;
* ``hash_ids`` are local to a trace when ``hash_id_scope`` is ``local`` (every trace numbers from 0),
  so they are salted with the trace id to stop unrelated traces from looking like a shared prefix;
* ``system_tokens`` and ``tool_tokens`` (of the document, and of each sub-agent entry for its own
  session) are the session's shared prefix (system prompt, tool catalogue): ``declared_prefix`` of its
  first step.
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import xor
from pathlib import Path
from typing import cast

from kvbudget.workload.record import BadRow, StepRecord, common_prefix
from kvbudget.workload.traces._common import (
    INT_ONLY,
    MAX_COUNT,
    BadSink,
    JsonPath,
    RowError,
    as_whole,
    hash_list,
    json_path,
    line_of,
    load_document,
    number,
    optional_number,
    whole,
)

DEFAULT_BLOCK = 64  # kv-cache-tester --chunk-size default and every shipped trace's "block_size"


@dataclass(slots=True)  # not frozen: a frozen constructor costs three times as much (one a request)
class _Request:
    t: float
    prompt: int
    output: int
    api_time: float | None
    hashes: list[int]  # as the document has them (checked integers), not yet salted
    shared: int  # leading ids equal to the previous step's (0 for a session's first step)
    packed: bytes | None  # the ids as _packed packs them (None: ids past int64, compared as lists)
    small: list[int] | None  # where the ids valued 0 or 1 are (None: not known)


_PACKERS: dict[int, Callable[..., bytes]] = {}  # id count: the pack of a struct of that many int64s
_MAX_PACKERS = 4096  # distinct id counts kept (about 150 bytes each); past it the cache starts over
_BOOL_LOOKS = 16  # ids with a low byte of 0 or 1 looked at one by one (one more per 32 ids) before all are


_Ids = tuple[list[int], int, bytes | None, list[int] | None]  # _block_ids: ids, shared, packed, small


def _block_ids(entry: dict[str, object], previous: _Request | None) -> _Ids:
    """A request's ``hash_ids``, checked; how many lead ``previous``'s (the step before it); and, for
    the step after it, the ids packed (``_packed``) and where those valued 0 or 1 are (``_small``).

    Any value but a list of int64 ids goes through ``hash_list``: its one-line reason for a bad one,
    or the ids as a list (compared as lists) for ids past int64."""
    value = entry.get("hash_ids")
    if type(value) is list:
        packed = _packed(value)
        if packed is not None:
            known: list[int] | None = []
            if previous is None:
                shared = 0
            elif previous.packed is not None:
                shared, known = _shared_packed(packed, previous.packed), previous.small
            else:
                shared, known = _shared(value, previous.hashes), None
            small = _small(value, packed, shared, known)
            if small is not None:
                return cast("list[int]", value), shared, packed, small
    ids = hash_list(entry)
    return ids, 0 if previous is None else _shared(ids, previous.hashes), None, None


def _packed(ids: list[object]) -> bytes | None:
    """The ids as little-endian int64s, packed in one C pass that also checks them: None when one is not
    an ``int`` within int64 (a float, string, null, list or object, or an id past 2**63). A bool packs
    as 0 or 1; ``_small`` tells it from an int.

    Equal packed prefixes are equal id prefixes, so a step's ids are compared with the previous step's
    as bytes (memcmp) rather than one ``int`` comparison per id."""
    pack = _PACKERS.get(len(ids))
    if pack is None:
        if len(_PACKERS) >= _MAX_PACKERS:
            _PACKERS.clear()
        pack = _PACKERS[len(ids)] = struct.Struct(f"<{len(ids)}q").pack
    try:
        return pack(*ids)
    except struct.error:
        return None


def _small(ids: list[object], packed: bytes, shared: int, known: list[int] | None) -> list[int] | None:
    """Where the packed ids valued 0 or 1 are, each one's type checked: True and False pack as 1 and 0,
    so only there can a bool be. None when one is a bool.

    The first ``shared`` ids equal the previous step's, whose ids valued 0 or 1 are at ``known`` (None:
    not known; then every id is searched). The others can be 0 or 1 only where their low byte is: those
    are found by a C search of every 8th byte. Past a budget of finds (many small ids), every id's type
    is checked and the places are looked for one by one."""
    if known is None:
        known, shared = [], 0
    places = [at for at in known if at < shared]
    for at in places:
        if type(ids[at]) is not int:
            return None
    lows = packed[shared << 3 :: 8]
    budget = _BOOL_LOOKS + (len(lows) >> 5)
    for low in (0, 1):
        at = lows.find(low)
        while at >= 0:
            value = ids[shared + at]
            if type(value) is not int:
                return None
            if value == low:
                places.append(shared + at)
            budget -= 1
            if not budget:
                if not INT_ONLY.issuperset(map(type, ids)):
                    return None
                return [at for at, value in enumerate(ids) if value in (0, 1)]
            at = lows.find(low, at + 1)
    return places


def _shared_packed(ids: bytes, before: bytes) -> int:
    """``common_prefix`` of two packed id lists, in ids: one ``startswith`` (memcmp) when the step extends
    the previous one, else a binary search that compares the half not yet known to be equal (the ids
    compared, and copied, come to about one list's length in all)."""
    if ids.startswith(before):
        return len(before) >> 3
    lo, hi = 0, min(len(ids), len(before)) >> 3  # ids[:lo] are equal; ids[:hi] differ unless before is ids' prefix
    if before.startswith(ids):
        return hi
    while hi - lo > 1:
        mid = (lo + hi) >> 1
        if ids[lo << 3 : mid << 3] == before[lo << 3 : mid << 3]:
            lo = mid
        else:
            hi = mid
    return lo


def _shared(ids: list[int], before: list[int]) -> int:
    """``common_prefix(ids, before)`` without copying the shared ids in the usual case, a step that
    extends the previous one: ``ids`` is cut to the previous length for one C-level comparison, then
    given its tail back (only the few new ids are copied)."""
    n = len(before)
    if n < len(ids):
        tail = ids[n:]
        del ids[n:]
        same = ids == before
        ids += tail
        if same:
            return n
    elif n == len(ids) and ids == before:
        return n
    return common_prefix(ids, before)


class _Reader:
    def __init__(self, path: Path, text: str, bad: BadSink, block_size: int, salt: int | None) -> None:
        self.path, self.text, self.bad = path, text, bad
        self.block_size, self.salt = block_size, salt
        self.source = f"weka:{path.name}"
        self.names: set[str] = set()  # session ids handed out: a repeated agent_id must not merge two sessions

    def report(self, where: JsonPath, reason: str) -> None:
        self.bad(BadRow(str(self.path), line_of(self.text, where), f"{json_path(where)}: {reason}"))

    def session(
        self,
        requests: Sequence[object],
        where: JsonPath,
        session: str,
        parent: str | None,
        offset: float,
        prefix: tuple[int, int] | None = None,
    ) -> Iterator[StepRecord]:
        steps: list[_Request] = []
        agents: list[tuple[dict[str, object], JsonPath]] = []
        for i, entry in enumerate(requests):
            here = (*where, i)
            if not isinstance(entry, dict):
                self.report(here, f"a request must be a JSON object, not {type(entry).__name__}")
            elif entry.get("type") == "subagent":
                agents.append((entry, here))
            else:
                try:
                    ids, shared, packed, small = _block_ids(entry, steps[-1] if steps else None)
                    t, prompt, output, api = entry.get("t"), entry.get("in"), entry.get("out"), entry.get("api_time")
                    if not (  # the usual request checked at once; any other shape takes the checked calls
                        (type(t) is float or type(t) is int)
                        and 0 <= t < math.inf
                        and type(prompt) is int
                        and 0 <= prompt <= MAX_COUNT
                        and type(output) is int
                        and 0 <= output <= MAX_COUNT
                        and (api is None or ((type(api) is float or type(api) is int) and 0 <= api < math.inf))
                    ):
                        t, prompt, output = number(entry, "t"), whole(entry, "in"), whole(entry, "out")
                        api = optional_number(entry, "api_time")
                    api = None if api is None else float(api)
                    if steps and t < steps[-1].t:  # the session's clock goes forward (equal: whole-second t)
                        raise RowError(
                            f"t {t} is before the previous request's t {steps[-1].t:g}: a session's requests go "
                            "forward in time; the request is skipped"
                        )
                    steps.append(_Request(float(t), prompt, output, api, ids, shared, packed, small))  # field order
                except RowError as exc:
                    self.report(here, str(exc))
        yield from self.records(steps, session, parent, offset, prefix)
        for j, (agent, here) in enumerate(agents, start=1):
            name = agent.get("agent_id")
            child = f"{session}/{name if isinstance(name, str) and name else f'subagent_{j}'}"
            if child in self.names:
                child = f"{child}#{j}"
            self.names.add(child)
            inner = agent.get("requests")
            try:
                start = number(agent, "t")
                if not isinstance(inner, list):
                    raise RowError("a sub-agent needs a 'requests' list")
            except RowError as exc:
                self.report(here, f"sub-agent {child}: {exc}")
                continue
            yield from self.session(inner, (*here, "requests"), child, session, offset + start, declared_prefix(agent))

    def records(
        self, steps: list[_Request], session: str, parent: str | None, offset: float, prefix: tuple[int, int] | None
    ) -> Iterator[StepRecord]:
        salt = self.salt
        blocks: tuple[int, ...] = ()
        for k, step in enumerate(steps):
            following = steps[k + 1] if k + 1 < len(steps) else None
            pause = None
            if following is not None:
                pause = round(max(0.0, following.t - step.t - (step.api_time or 0.0)), 6)
            new = step.prompt if k == 0 else step.prompt - steps[k - 1].prompt - steps[k - 1].output
            if salt is None:
                blocks = tuple(step.hashes)
            else:  # a step repeats the previous step's chained ids and adds a few: salt only the new ones
                blocks = blocks[: step.shared] + tuple(map(xor, repeat(salt), step.hashes[step.shared :]))
            yield StepRecord(  # positional, in field order: a keyword call costs 2.5 times as much
                session,
                k,  # step
                offset + step.t,  # start_s
                step.prompt,  # prompt_tokens
                step.output,  # output_tokens
                parent,
                new,  # new_tokens
                None,  # cached_tokens
                pause,  # pause_s
                blocks,  # block_hashes
                self.block_size if blocks else None,  # block_size
                self.source,
                following is None,  # final
                step.shared if k else None,  # shared_blocks
                None if k else prefix,  # declared_prefix: on the session's first step
            )


def read(path: Path, bad: BadSink) -> Iterator[StepRecord]:
    loaded = load_document(path, bad)
    if loaded is None:
        return
    text, doc = loaded
    if not isinstance(doc, dict) or not isinstance(doc.get("requests"), list):
        bad(BadRow(str(path), 1, "not a WEKA trace: the document has no 'requests' list; the document is skipped"))
        return
    trace_id = doc.get("id")
    session = trace_id if isinstance(trace_id, str) and trace_id else path.stem
    try:
        block_size = as_whole(doc.get("block_size", DEFAULT_BLOCK), "block_size", minimum=1)
    except RowError as exc:
        bad(BadRow(str(path), line_of(text, ("block_size",)), f"{exc}; the document is skipped"))
        return
    # "hash_id_scope": "local" ids restart at 0 in every trace (docs/trace_replay_tester.md, "global" traces share ids)
    salt = None if doc.get("hash_id_scope") == "global" else zlib.crc32(session.encode()) << 32
    reader = _Reader(path, text, bad, block_size, salt)
    yield from reader.session(doc["requests"], ("requests",), session, None, 0.0, declared_prefix(doc))


def declared_prefix(entry: dict[str, object]) -> tuple[int, int] | None:
    """(system_tokens, tool_tokens) of a document or sub-agent entry; None unless both are whole numbers >= 0
    (a missing or odd figure only loses the prefix, never the steps)."""
    system, tool = entry.get("system_tokens"), entry.get("tool_tokens")
    if type(system) is int and type(tool) is int and 0 <= system <= MAX_COUNT and 0 <= tool <= MAX_COUNT:
        return system, tool
    return None
