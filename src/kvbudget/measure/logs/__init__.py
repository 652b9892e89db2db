"""Reading serving engines' start-up logs: vLLM (V0, V1), SGLang, TensorRT-LLM, llama.cpp and Ollama.

``read_log(path)`` streams the file once. A cheap prefilter (one regex of every phrase any reader
knows) keeps the per-line cost low for long logs; matching lines go to every engine's rules, and
the engine whose rules matched most wins. A log no reader recognises, or one with no sizing lines,
is an InputError saying what was found.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TextIO

from kvbudget.errors import InputError
from kvbudget.measure.logs import llamacpp, plausible, sglang, startups, trtllm, vllm
from kvbudget.measure.logs.record import EngineLog
from kvbudget.measure.logs.rules import Rule, apply
from kvbudget.measure.logs.text import MAX_LOG_BYTES, clean, rank_of
from kvbudget.safeio import regular_file

__all__ = ["EngineLog", "read_log", "read_names"]

_READERS: tuple[tuple[str, tuple[Rule, ...]], ...] = (
    ("vllm", vllm.RULES),
    ("sglang", sglang.RULES),
    ("trtllm", trtllm.RULES),
    ("llamacpp", llamacpp.RULES),
)
_NEEDLES = sorted(
    {r.needle for _, rules in _READERS for r in rules}
    | set(vllm.V1_MARKS)
    | set(vllm.V0_MARKS)
    | set(llamacpp.OLLAMA_DETECT),
    key=len,
    reverse=True,
)
CHUNK = 8 << 20  # characters read at a time


def candidate_lines(
    f: TextIO, needles: Sequence[str] = _NEEDLES, window: tuple[int, int] = (1, 2**63)
) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line holding a phrase some reader knows (``needles``: the start-up readers'
    unless given), and finally (lines, "").

    Scans big blocks with str.find per phrase (C speed) instead of a regex per line: a 100 MB log of
    request lines costs well under a second before any rule runs (bench/calibrate.py). A block wholly outside
    ``window`` (lines [first, past last), as read_log's second pass over one start-up asks) is only counted,
    not searched: that pass costs a newline count, not a search per phrase, for the lines it does not want.
    """
    base, carry = 0, ""
    while True:
        block = f.read(CHUNK)
        text = carry + block
        if not block:
            if text:
                base += 1
                if window[0] <= base < window[1] and any(n in text for n in needles):
                    yield base, text
            yield base, ""
            return
        cut = text.rfind("\n")
        if cut < 0:
            carry = text
            continue
        body, carry = text[: cut + 1], text[cut + 1 :]
        count = body.count("\n")
        if base + count < window[0] or base + 1 >= window[1]:
            base += count
            continue
        starts: set[int] = set()
        for needle in needles:
            i = body.find(needle)
            while i >= 0:
                starts.add(body.rfind("\n", 0, i) + 1)
                i = body.find(needle, body.find("\n", i))
        pos, line = 0, base
        for start in sorted(starts):
            line += body.count("\n", pos, start)
            pos = start
            if window[0] <= line + 1 < window[1]:
                yield line + 1, body[start : body.find("\n", start)]
        base += count


SIZING = {
    "vllm": ("available_kv_bytes", "kv_tokens", "kv_blocks", "weights_bytes", "max_concurrency"),
    "sglang": ("kv_tokens", "max_total_num_tokens", "weights_bytes", "k_bytes"),
    "trtllm": ("available_kv_bytes", "kv_blocks", "kv_cache_bytes", "kv_tokens", "estimated_kv_bytes"),
    "llamacpp": (
        "kv_cache_bytes",
        "recurrent_state_bytes",
        "weights_bytes",
        "kv_buffer_bytes",
        "ollama_estimated_kv_bytes",
    ),
}


def read_log(path: str | Path, engine: str | None = None, startup: int | str | None = None) -> EngineLog:
    """What the log at ``path`` says; ``engine`` forces a reader (vllm, sglang, trtllm, llamacpp, ollama);
    ``startup`` (1-based, or "last") takes that start-up of a file holding several (refused without it)."""
    p = Path(path)
    chosen, clock, ollama = _read(p, engine, (1, 2**63))
    if startup is not None:
        starts = startups.begins(chosen, clock)
        lines = startups.window(starts, startup, str(p))
        if len(starts) > 1:  # read again, the lines of that start-up alone
            served = startups.serving(chosen, clock, startup)
            chosen, clock, ollama = _read(p, engine, lines)
            chosen.window = served  # where it served: its speeds (simulate/measured_calibration.py)
    startups.check(chosen, str(p), clock)  # one start-up per log
    plausible.check(chosen, str(p))  # no figure an engine cannot print
    if chosen.engine == "llamacpp" and (engine == "ollama" or (engine is None and ollama)):
        chosen.engine = "ollama"
    if chosen.engine != "ollama":
        for key in [k for k in chosen.settings if k.startswith("ollama_")]:
            del chosen.settings[key]
    return chosen


def read_names(path: str | Path, engine: str) -> EngineLog:
    """What the log at ``path`` says of ``engine``'s settings (its model, tp, ...), sizing lines or not: a serving
    log (``--speed-from LOG``) is read for its speeds, and needs no KV cache line to name its model."""
    chosen, _, ollama = _read(Path(path), engine, (1, 2**63), sizing=False)
    if chosen.engine == "llamacpp" and ollama:
        chosen.engine = "ollama"
    return chosen


def _read(
    p: Path, engine: str | None, window: tuple[int, int], *, sizing: bool = True
) -> tuple[EngineLog, startups.Clock, int]:
    """One pass over lines [first, past last) of ``window``: the chosen engine's record, the clock, and how many
    lines were Ollama's own."""
    logs = {name: EngineLog(str(p), name) for name, _ in _READERS}
    v1 = v0 = ollama = lines = 0
    clock = startups.Clock(str(p))
    try:
        regular_file(p, "engine start-up log")
        if p.stat().st_size > MAX_LOG_BYTES:
            raise InputError(f"{p}: larger than 2 GiB; cut the start-up part of the log (its first lines)")
        with p.open("r", encoding="utf-8-sig", errors="replace", newline="") as f:
            for n, raw in candidate_lines(f, window=window):
                if not raw:
                    lines = n
                    break
                text = clean(raw)
                clock.see(n, text)
                rank = rank_of(text)
                v1 += any(m in text for m in vllm.V1_MARKS)
                v0 += any(m in text for m in vllm.V0_MARKS)
                ollama += any(m in text for m in llamacpp.OLLAMA_DETECT)
                for name, rules in _READERS:
                    apply(rules, logs[name], n, text, rank)
    except OSError as e:
        raise InputError(f"{p}: cannot read the log ({e.strerror or e})") from None
    vllm.finish(logs["vllm"], v1, v0)
    llamacpp.finish(logs["llamacpp"])
    for log in logs.values():
        log.lines_read = lines
    chosen = _choose(p, logs, engine, lines, sizing)
    return chosen, clock, ollama


def _score(log: EngineLog) -> int:
    return (
        len(log.measured) + len(log.caches) + len(log.settings) + (log.refusal is not None) + (log.version is not None)
    )


def _choose(p: Path, logs: dict[str, EngineLog], engine: str | None, lines: int, sizing: bool = True) -> EngineLog:
    if engine is not None:
        key = "llamacpp" if engine in ("ollama", "llama.cpp", "llamacpp") else engine
        if key not in logs:
            raise InputError(f"--engine {engine}: calibrate reads vllm, sglang, trtllm, llamacpp or ollama logs")
        chosen = logs[key]
    else:
        chosen = max(logs.values(), key=_score)
        if _score(chosen) == 0:
            what = "an empty file" if lines == 0 else f"{lines:,} lines"
            raise InputError(
                f"{p}: no vLLM, SGLang, TensorRT-LLM, llama.cpp or Ollama start-up lines in {what}; give the engine's "
                "start-up "
                "log (llama-server needs -lv 4 to print its KV lines)"
            )
    if (
        sizing
        and chosen.refusal is None
        and not any(k in chosen.measured for k in SIZING[chosen.engine])
        and not chosen.caches
    ):
        found = ", ".join(sorted(chosen.settings)) or "no settings"
        hint = " (llama-server prints its KV lines only with -lv 4)" if chosen.engine == "llamacpp" else ""
        raise InputError(
            f"{p}: a {chosen.engine} log with no sizing lines (found: {found}); it ends before the KV cache was "
            f"allocated: give the whole start-up log{hint}"
        )
    return chosen
