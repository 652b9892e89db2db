"""One start-up per log: a file that holds two runs is refused, never merged into one measurement.

Two signs, each from the engines' own logging:

* **A line each start-up prints once, printed twice** by the same process. Per engine: vLLM's
  version line (api_server.py, ``LLMEngine``/``EngineCore`` config line), ``GPU KV cache size``,
  ``# GPU blocks`` and ``Maximum concurrency`` (once per engine core: v1/core/kv_cache_utils.py,
  V0 executor_base.py); SGLang's ``ServerArgs(`` and version line; llama.cpp's ``build``; Ollama's
  ``starting llama server`` and ``Listening on``. Lines printed once per GPU (vLLM ``Available KV
  cache memory`` and model loading, SGLang ``KV Cache is allocated``) count only with their worker
  prefix (``(VllmWorker rank=1 ..)``, ``[.. TP1]``): without it several GPUs look alike.
  vLLM's weights line names its release: ``Loading model weights took`` before 0.8
  (worker/model_runner.py), ``Model loading took`` after; a file with both is two runs.
* **Time going back**: vLLM (``INFO 08-20 18:03:31``), SGLang (``[2025-10-16 09:06:09``) and Ollama
  (``time=2025-06-05T12:36:11``) date each line; one start-up's lines go forward (workers interleave
  by at most a few seconds), so a line dated more than a minute before an earlier one starts another
  run appended out of order.

The refusal names both lines and the fix: cut the file to one start-up.
"""

from __future__ import annotations

import re

from kvbudget.errors import InputError
from kvbudget.measure.logs.record import EngineLog

SLACK_S = 60  # workers write out of order by seconds; a minute back is another run
_STAMPS = (
    # vLLM: "INFO 08-20 18:03:31" (no year); SGLang "[2025-10-16 09:06:09"; Ollama "time=2025-06-05T12:36:11"
    re.compile(
        r"\b(?:INFO|WARNING|DEBUG|ERROR|CRITICAL) (?P<mo>\d\d)-(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
    ),
    re.compile(r"\[(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"),
    re.compile(r"\btime=(?P<y>\d{4})-(?P<mo>\d\d)-(?P<d>\d\d)T(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"),
)
_OLD_NEW = ("Loading model weights took", "Model loading took")  # vLLM before 0.8 / from 0.8


def _seconds(m: re.Match[str]) -> int:
    """Seconds since an epoch good for comparing lines of one file (months as 31 days: order is what counts)."""
    g = m.groupdict()
    year = int(g["y"]) if g.get("y") else 0
    days = (year * 12 + int(g["mo"])) * 31 + int(g["d"])
    return ((days * 24 + int(g["h"])) * 60 + int(g["mi"])) * 60 + int(g["s"])


class Clock:
    """The latest time seen; ``see`` raises when a line is dated more than SLACK_S before it."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.latest: tuple[int, int, str] | None = None  # (seconds, line, stamp as printed)

    def see(self, line: int, text: str) -> None:
        for pattern in _STAMPS:
            m = pattern.search(text)
            if m is None:
                continue
            t = _seconds(m)
            latest = self.latest
            if latest is not None and t < latest[0] - SLACK_S:
                new_year = m.groupdict().get("y") is None and m.group("mo") == "01" and latest[2].startswith("12-")
                if not new_year:  # vLLM prints no year: 12-31 then 01-01 is going forward
                    raise InputError(
                        f"{self.path}: line {line:,} is dated {_printed(m)}, before line {latest[1]:,} "
                        f"({latest[2]}): the file joins logs of several runs; give the log of one start-up"
                    )
            if latest is None or t >= latest[0]:
                self.latest = (t, line, _printed(m))
            return


def _printed(m: re.Match[str]) -> str:
    g = m.groupdict()
    date = f"{g['y']}-{g['mo']}-{g['d']}" if g.get("y") else f"{g['mo']}-{g['d']}"
    return f"{date} {g['h']}:{g['mi']}:{g['s']}"


def check(log: EngineLog, path: str) -> None:
    """InputError when the log holds more than one start-up (module docstring)."""
    repeated = [
        (lines[-1], needle, rank, lines[0], lines[1])
        for (needle, rank), lines in log.once.items()
        if len(lines) > 2 and rank != "?"  # "?": a per-GPU line without its worker prefix (rules.seen)
    ]
    if repeated:
        times, needle, rank, first, second = max(repeated, key=lambda r: (r[0], -r[4]))
        who = f" by {rank}" if rank else ""
        raise InputError(
            f"{path}: holds {times:,} start-ups ('{needle}' printed{who} at line {first:,} and again at line "
            f"{second:,}); give one start-up: cut the file before line {second:,} or keep what follows it"
        )
    for (needle, rank), lines in log.once.items():
        if rank is None:  # an engine's line without a prefix, and the same line with one: two runs' formats
            other = next((ls[0] for (n, r), ls in log.once.items() if n == needle and r not in (None, "?")), None)
            if other is not None:
                first, second = sorted((lines[0], other))
                raise InputError(
                    f"{path}: holds 2 start-ups ('{needle}' printed at line {first:,} and again at line {second:,}, "
                    f"one with a worker prefix, one without); give one start-up: cut the file before line "
                    f"{second:,} or keep what follows it"
                )
    old = next((lines[0] for (needle, _), lines in log.once.items() if needle == _OLD_NEW[0]), None)
    new = next((lines[0] for (needle, _), lines in log.once.items() if needle == _OLD_NEW[1]), None)
    if log.engine == "vllm" and old is not None and new is not None:
        raise InputError(
            f"{path}: holds two vLLM runs of different releases ('{_OLD_NEW[0]}' at line {old:,}, before vLLM 0.8; "
            f"'{_OLD_NEW[1]}' at line {new:,}, from 0.8); give the log of one start-up"
        )
