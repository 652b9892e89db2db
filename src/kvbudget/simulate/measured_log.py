"""Speeds measured by a serving engine's own log (``--speed-from LOG``): the file ``calibrate`` reads for memory,
read again for what the server did while it served (measure/logs/serving.py reads the lines).

The figures must mean what the simulator charges (kvbudget.simulate.batch): a prefill backlog during which decode
stands still, then decode iterations of the sessions running.

* **Decode**: only the clean stretches (serving.py: intervals or requests with the same sessions decoding
  throughout and no prompt computed) give a decode speed. Per number of sessions ``k`` the iteration is the mean
  over those stretches of ``1 / tokens/s per session`` (a session's inter-token latency is a mean of its gaps);
  the simulator interpolates between the counts measured (simulate/measured.py ``iteration_s``). vLLM's and
  SGLang's generation throughput over an interval that also prefilled mixes the two (the prompt's time is in its
  wall time, and chunked prefill puts both in one batch): those intervals are excluded from decode.
* **Prefill**, vLLM and SGLang: the mixed intervals are accounted for, not dropped. With ``G`` tokens generated
  a second by ``k`` sessions that each decode at ``r(k)`` when alone (the clean curve), decode took ``G / (k r(k))``
  of the interval; the rest computed its prompt tokens, so prefill tokens/s = prompt tokens/s / (1 - that share).
  The median over the intervals where prefill took at least MIN_PREFILL_SHARE of the time (below, the share is
  within the noise of ``r(k)``). When none did (prompts that cost nothing measurable beside the decode), that is
  what was measured, not a refusal: the prefill took under MIN_PREFILL_SHARE of each interval, so its rate is at
  least the prompt tokens/s over that share, and the median of those lower bounds is used, said so. An interval
  idle for a while (no request at all) is not seen by the log and
  lowers its figure: the median is then conservative (prompts charged slower than they ran).
* **Prefill**, llama-server: the prompt eval time of the clean requests that ran alone (serving.py); when none
  did, every request's, whose prompt time holds the other slots' decode tokens too (a lower bound, said so).

A log belongs to one deployment like a load test's result: its engine is the reader's, its model the one its
start-up lines name (measure/belong.py, through MeasuredSpeeds.check); a log with no start-up lines names no
model, and a sweep listing several models is refused as for a result that names none.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import median

from kvbudget.errors import InputError
from kvbudget.simulate.measured import HIGHEST, LOWEST, MAX_LEVELS, MeasuredSpeeds

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.measure.logs.serving import ServingLog

MIN_PREFILL_SHARE = 0.05  # of an interval's time: below, the prefill share is noise of the decode curve
NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama-server"}


def is_log(path: Path) -> bool:
    """Whether ``path`` holds an engine's log rather than a JSON document (its first character that is not space
    is not ``{``; an empty file is an empty log); an unreadable file is left to the JSON reader's error."""
    if not path.is_file():  # a FIFO, a device, a directory: the JSON reader refuses it without reading
        return False
    try:
        with path.open("rb") as f:
            head = f.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    except OSError:
        return False
    return not head.startswith(b"{")


def _is_calibration(path: Path) -> bool:
    """Whether ``path`` holds a ``calibrate --json`` document (its first lines name ``lines_read``; a label only:
    the document itself is read and checked by simulate/measured_calibration.py)."""
    try:
        with path.open("rb") as f:
            return b'"lines_read"' in f.read(4096)
    except OSError:
        return False


def measured_by(speed_from: str) -> str:
    """``load test NAME[, NAME...]``, ``log NAME`` or ``calibration NAME``: what ``--speed-from`` named, in words."""
    paths = [Path(one.strip()) for one in speed_from.split(",") if one.strip()]
    kind = "load test"
    if len(paths) == 1 and is_log(paths[0]):
        kind = "log"
    elif len(paths) == 1 and paths[0].is_file() and _is_calibration(paths[0]):
        kind = "calibration"
    return f"{kind} {', '.join(p.name for p in paths)}"


def _lines(numbers: list[int]) -> str:
    """``lines 12, 40, 77 and 9 more`` (the lines a figure came from, the first few named)."""
    shown = ", ".join(f"{n:,}" for n in numbers[:3])
    more = f" and {len(numbers) - 3:,} more" if len(numbers) > 3 else ""
    return f"line{'s' if len(numbers) > 1 else ''} {shown}{more}"


def _rate(value: float, what: str, source: str) -> float:
    if not LOWEST <= value <= HIGHEST:
        raise InputError(
            f"--speed-from {source}: a {what} of {value:.3g} tokens/s is not a measured speed "
            f"({LOWEST:g}-{HIGHEST:g} tokens/s); give the engine's log as written"
        )
    return value


def _decode(log: ServingLog, source: str) -> tuple[tuple[tuple[int, float], ...], str]:
    """(count, tokens/s per session) points and their basis."""
    engine = NAMES.get(log.engine or "", "the engine")
    if not log.decode:
        raise InputError(
            f"--speed-from {source}: {log.stats_lines:,} {engine} stats lines, none a clean decode stretch (every "
            "one prefilled, or its running count changed); give a log of a server that served a while at a steady "
            "concurrency"
        )
    seconds: dict[int, list[float]] = defaultdict(list)
    for d in log.decode:
        seconds[d.running].append(1 / _rate(d.tokens_per_s, "decode speed", source))
    if len(seconds) > MAX_LEVELS:
        raise InputError(
            f"--speed-from {source}: {len(seconds):,} running counts, more than a measurement holds ({MAX_LEVELS:,})"
        )
    points = tuple((k, len(v) / sum(v)) for k, v in sorted(seconds.items()))
    rates = ", ".join(f"{r:,.1f} at {k}" for k, r in points)
    basis = (
        f"log {source}: decode tokens/s per session by sessions running ({rates}), from {len(log.decode):,} clean "
        f"{'request' if log.engine == 'llamacpp' else 'interval'}{'s' if len(log.decode) > 1 else ''} "
        f"({_lines([d.line for d in log.decode])}), interpolated"
    )
    return points, basis


def _prefill(log: ServingLog, curve: MeasuredSpeeds, source: str) -> tuple[float, str]:
    """Prefill tokens/s and its basis (module doc)."""
    if log.engine == "llamacpp":
        alone = [p for p in log.prompts if p.alone]
        used = alone or log.prompts
        if not used:
            raise InputError(f"--speed-from {source}: no prompt eval time line; give the llama-server log as written")
        rate = _rate(sum(p.tokens for p in used) / sum(p.seconds for p in used), "prefill speed", source)
        how = "alone in the server" if alone else "with other slots decoding (their tokens in its time: a lower bound)"
        return rate, (
            f"log {source}: prefill {rate:,.0f} tokens/s, the prompt eval time of {len(used):,} "
            f"request{'s' if len(used) > 1 else ''} {how} "
            f"({_lines([p.line for p in used])})"
        )
    rates, lines = [], []
    for m in log.mixed:
        share = m.generation_tokens_per_s * curve.iteration_s(max(1, m.running)) / max(1, m.running)
        if 1 - share >= MIN_PREFILL_SHARE:
            rates.append(m.prompt_tokens_per_s / (1 - share))
            lines.append(m.line)
    bounds = [] if rates else [(m.prompt_tokens_per_s / MIN_PREFILL_SHARE, m.line) for m in log.mixed]
    bounds = [(b, line) for b, line in bounds if b > 0]
    if not rates and bounds:
        rate = _rate(median(b for b, _ in bounds), "prefill speed", source)
        return rate, (
            f"log {source}: prefill at least {rate:,.0f} tokens/s: in none of {len(bounds):,} interval"
            f"{'s' if len(bounds) > 1 else ''} that prefilled did the prompts take {MIN_PREFILL_SHARE:.0%} of the "
            f"time beside the decode, so the median of prompt tokens/s over {MIN_PREFILL_SHARE:.0%} "
            f"(a lower bound; {_lines([line for _, line in bounds])})"
        )
    if not rates:
        raise InputError(
            f"--speed-from {source}: no interval of the log both prefilled and decoded with requests running "
            f"({len(log.mixed):,} mixed, none with prefill {MIN_PREFILL_SHARE:.0%} of its time), so its prefill "
            "speed is unknown; give a log of a server that took new requests while others generated"
        )
    rate = _rate(median(rates), "prefill speed", source)
    return rate, (
        f"log {source}: prefill {rate:,.0f} tokens/s, the median over {len(rates):,} interval"
        f"{'s' if len(rates) > 1 else ''} of prompt tokens/s "
        f"over the share of time not decoding ({_lines(lines)})"
    )


def _served(path: Path, engine: str) -> tuple[str, str | None]:
    """(engine, model) as the log's start-up lines say (measure/logs read_names): Ollama for a llama.cpp log of
    Ollama's; no model when the log has no start-up line naming one."""
    from kvbudget.measure.belong import log_model_name
    from kvbudget.measure.logs import read_names

    startup = read_names(path, engine)
    return startup.engine, log_model_name(startup)


def speeds_of_log(log: ServingLog, source: str) -> MeasuredSpeeds:
    """The measured speeds of serving samples (module doc); engine and model are the caller's to add."""
    if log.engine is None:
        raise InputError(
            f"--speed-from {source}: no serving stats lines (vLLM 'Avg prompt throughput', SGLang 'Decode batch', "
            "llama-server 'eval time'); give a kvbudget loadtest --json result or the log of a server that served"
        )
    points, decode_basis = _decode(log, source)
    curve = MeasuredSpeeds(source, 1.0, points)
    rate, prefill_basis = _prefill(log, curve, source)
    return MeasuredSpeeds(source, rate, points, origin="log", bases=(prefill_basis, decode_basis))


def log_speeds(path: Path) -> MeasuredSpeeds:
    """The measured speeds of the engine log at ``path``, with the engine and model it names."""
    from dataclasses import replace

    from kvbudget.measure.logs.serving import read_serving

    serving = read_serving(path)
    speeds = speeds_of_log(serving, path.name)
    engine, served = _served(path, serving.engine or "")
    return replace(speeds, engine=engine, served=served)
