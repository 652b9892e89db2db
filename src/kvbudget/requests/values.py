"""The values a request is built from, and how each kind is read and checked (one place, every face).

A request field names its kind in its metadata (``option(default, "tokens")``). Each kind takes the typed
value (an ``int`` for tokens, counts and bytes; ``float`` for rates and fractions; ``bool`` for switches) or
the text a person writes (``"32k"``, ``"80GB"``, ``"50/h"``), so the command line, the web API and a script
give the same value the same meaning; a value of the wrong type or out of range is one InputError naming
the option (``--context: ...``), whichever face it came through.
"""

from __future__ import annotations

import re

from kvbudget.errors import InputError
from kvbudget.units import (
    MAX_BYTES,
    MAX_COUNT,
    MAX_GPUS,
    MAX_RUNNING,
    MAX_SESSIONS,
    MAX_TOKENS,
    in_range,
    parse_count,
    parse_decimal,
    parse_memory,
    parse_per_second,
    parse_real,
    parse_tokens,
    shown,
)

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["MAX_BYTES", "MAX_COUNT", "MAX_GPUS", "MAX_LIST", "MAX_RUNNING", "MAX_SESSIONS", "MAX_TOKENS"]
MAX_LIST = 64  # items in one comma-separated list (a sweep's axes multiply; compare bounds the product)
MAX_REF = 4096  # characters in a model reference (a path of the longest the OS takes, or a Hub id)
# Plausible ranges of the real-valued kinds (numbers outside are typos or attacks, and would make the
# arithmetic that follows lose meaning): a rate in tokens per second or a delay in seconds, a bandwidth in
# bytes per second (1 PB/s is 300 H200s' worth), a time in seconds (one year).
POSITIVE = (1e-6, 1e12)
BANDWIDTH = (1.0, 1e16)
MAX_SECONDS = 365 * 86400


class Tokens(int):
    """A token count: ``Tokens("32k") == 32768``, ``Tokens(4096)`` (k = 1024, as context windows are quoted)."""

    def __new__(cls, value: int | str) -> Tokens:
        return super().__new__(cls, read_tokens(value, "tokens"))


class Memory(int):
    """A size in bytes: ``Memory("80GB") == 80 * 10**9``, ``Memory("24GiB") == 24 * 2**30``, ``Memory(2**30)``."""

    def __new__(cls, value: int | str) -> Memory:
        return super().__new__(cls, read_memory(value, "memory"))


def flag(name: str) -> str:
    """The option a field is given as on the command line (and named as in every error)."""
    return "--" + name.replace("_", "-")


def _brief(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:60]}… ({len(text):,} characters)"


def _whole(value: object, what: str, low: int, high: int, noun: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what}: give a whole number of {noun}, not {_brief(value)}")
    return in_range(int(value), what, low, high, noun)


def read_tokens(value: object, what: str) -> int:
    if isinstance(value, str):
        value = parse_tokens(value, what=what)
    return _whole(value, what, 1, MAX_TOKENS, "tokens")


def read_prefix(value: object, what: str) -> int | None:
    """Tokens of a shared prefix: a token count, or 0 for none (as every answer prints no prefix), read as not
    given."""
    if isinstance(value, str):
        if re.fullmatch(r"\s*0+\s*", value, re.ASCII):
            return None
        value = parse_tokens(value, what=what)
    if isinstance(value, int) and not isinstance(value, bool) and value == 0:
        return None
    return _whole(value, what, 1, MAX_TOKENS, "tokens")


def read_count(value: object, what: str) -> int:
    if isinstance(value, str):
        value = parse_count(value, what=what, noun="units")
    return _whole(value, what, 1, MAX_COUNT, "units")


def read_gpus(value: object, what: str) -> int:
    """A number of GPUs, replicas or a parallel size: 1..65,536."""
    if isinstance(value, str):
        value = parse_count(value, what=what, high=MAX_GPUS, noun="GPUs")
    return _whole(value, what, 1, MAX_GPUS, "GPUs")


def read_sessions(value: object, what: str) -> int:
    """A number of concurrent sessions or sequences: 1..10^9."""
    if isinstance(value, str):
        value = parse_count(value, what=what, high=MAX_SESSIONS, noun="sessions")
    return _whole(value, what, 1, MAX_SESSIONS, "sessions")


def read_running(value: object, what: str) -> int:
    """An engine's limit on running sequences (vLLM --max-num-seqs): 1..1,048,576 (units.MAX_RUNNING)."""
    if isinstance(value, str):
        value = parse_count(value, what=what, high=MAX_RUNNING, noun="running sequences", example="64")
    return _whole(value, what, 1, MAX_RUNNING, "running sequences")


MAX_LAYERS = 65_536  # -ngl: far above any model's layer count (llama.cpp caps it at n_layer + 1 itself)
LAYER_WORDS = {"auto": -1, "all": -2}  # common/arg.cpp: -ngl auto stores -1, all stores -2
MAX_SPLIT = 16  # --tensor-split: llama_max_devices() of the CUDA backend


def read_layers(value: object, what: str) -> int:
    """llama.cpp -ngl: a layer count 0..65,536, or auto (-1: the most that fit) or all (-2)."""
    if isinstance(value, str):
        word = LAYER_WORDS.get(value.strip().lower())
        if word is not None:
            return word
        value = parse_count(value, what=what, low=0, high=MAX_LAYERS, noun="layers (or auto, all)", example="20")
    return _whole(value, what, 0, MAX_LAYERS, "layers (or auto, all)")


def read_split(value: object, what: str) -> tuple[float, ...]:
    """llama.cpp --tensor-split: one non-negative proportion per GPU (``3,1``), at most 16, one above 0."""
    items = [part.strip() for part in value.split(",")] if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        items = [items]
    if not items or len(items) > MAX_SPLIT:
        raise InputError(f"{what}: give 1 to {MAX_SPLIT} proportions, one per GPU (e.g. 3,1), not {_brief(value)}")
    split = tuple(
        parse_real(x, what=what, low=0, high=1e6, noun="(a proportion)", example="3,1")
        if isinstance(x, str)
        else _proportion(x, what)
        for x in items
    )
    if not any(x > 0 for x in split):
        raise InputError(f"{what}: every proportion is 0; give at least one above 0 (e.g. 3,1)")
    return split


def _proportion(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1e6:
        raise InputError(f"{what}: give proportions from 0 to 1,000,000 (e.g. 3,1), not {_brief(value)}")
    return float(value)


def max_jobs() -> int:
    """The most processes one request may ask for (``jobs``: simulate's probes, compare's and size's rows): the
    cores this process may run on (simulate/parallel.py ``default_jobs``, the default ``--jobs``), so that no face
    (the command line, the Python API, the web server) starts more processes than it has cores."""
    from kvbudget.simulate.parallel import default_jobs

    return default_jobs()


def read_jobs(value: object, what: str) -> int:
    """A number of processes: 1 .. the cores this machine may run on (``max_jobs``)."""
    if isinstance(value, str):
        value = parse_count(value, what=what, noun="processes", example="2")
    count = _whole(value, what, 1, MAX_COUNT, "processes")
    if count > (cores := max_jobs()):
        raise InputError(
            f"{what}: {count:,} processes asked; this machine runs at most {cores:,} (its cores): give {cores:,} or "
            "fewer, or leave it out (every core)"
        )
    return count


def read_index(value: object, what: str) -> int:
    """A whole number from 0 (a seed)."""
    if isinstance(value, str):
        value = parse_count(value, what=what, low=0, high=2**63 - 1, noun="units")
    return _whole(value, what, 0, 2**63 - 1, "units")


def read_port(value: object, what: str) -> int:
    """A TCP port to listen on: 0..65,535 (0: a free one, chosen by the system)."""
    if isinstance(value, str):
        value = parse_count(value, what=what, low=0, high=65_535, noun="(0 = a free port)", example="8731")
    return _whole(value, what, 0, 65_535, "(0 = a free port)")


def read_startup(value: object, what: str) -> int | str:
    """One start-up of a log holding several: 1-based, or "last" (measure/logs/startups.py)."""
    if isinstance(value, str) and value.strip().lower() == "last":
        return "last"
    if isinstance(value, str):
        value = parse_count(value, what=what, high=MAX_COUNT, noun="start-ups")
    return _whole(value, what, 1, MAX_COUNT, "start-ups (1-based), or last")


def read_memory(value: object, what: str) -> int:
    if isinstance(value, str):
        value = parse_memory(value, what=what)
    return _whole(value, what, 1, MAX_BYTES, "bytes")


def _real(value: object, what: str, low: float, high: float, noun: str, example: str) -> float:
    """A real number in ``low..high``: text read exactly (no exponent, no ``inf``/``nan``), an int compared
    as an int (a 400-digit int never becomes a float), a float only if finite."""
    if isinstance(value, str):
        num, den = parse_decimal(value, what=what, example=example)
        if not low * den <= num <= high * den:
            raise InputError(f"{what}: {shown(value)} is outside {low:g}..{high:g} {noun}")
        return num / den
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{what}: give {noun}, not {_brief(value)}")
    if not low <= value <= high:  # exact for an int of any size; nan fails it
        raise InputError(f"{what}: {_brief(value)} is outside {low:g}..{high:g} {noun}")
    return float(value)


def read_positive(value: object, what: str) -> float:
    """A positive finite number (tokens per second, seconds of delay)."""
    return _real(value, what, *POSITIVE, "(a positive number)", "2.5")


def read_fraction(value: object, what: str) -> float:
    """A fraction above 0 and at most 1 (gpu_memory_utilization, mem_fraction_static)."""
    number = _real(value, what, 0.0, 1.0, "(a fraction like 0.9)", "0.9")
    if number == 0:
        raise InputError(f"{what}: {shown(str(value))} must be above 0 and at most 1")
    return number


def read_share(value: object, what: str) -> float:
    """A share of the pool below 1: ``0.05`` or ``5%``."""
    if isinstance(value, str) and value.strip().endswith("%"):
        number = _real(value.strip()[:-1], what, 0.0, 100.0, "percent", "5%") / 100
    else:
        number = _real(value, what, 0.0, 1.0, "(a share like 0.05 or 5%)", "0.05")
    if not 0 < number < 1:
        raise InputError(f"{what}: {shown(str(value))} must be above 0 and below 1 (100%)")
    return number


def read_tolerance(value: object, what: str) -> float:
    """A tolerated rate, 0 included: ``0``, ``0.001`` or ``0.1%`` (below 1)."""
    if isinstance(value, str) and value.strip().endswith("%"):
        number = _real(value.strip()[:-1], what, 0.0, 100.0, "percent", "0.1%") / 100
    else:
        number = _real(value, what, 0.0, 1.0, "(a rate like 0.001 or 0.1%)", "0.001")
    if number >= 1:
        raise InputError(f"{what}: {shown(str(value))} must be below 1 (100%); 0 tolerates none")
    return number


_SECONDS = {None: 1, "s": 1, "m": 60, "min": 60, "h": 3600}
_MILLI = "ms"  # a latency target: 50ms


def read_seconds(value: object, what: str) -> float:
    """Seconds from ``600``, ``90s``, ``10m``, ``2h`` or ``50ms`` (or a number of seconds), above 0 and at most a
    year."""
    if isinstance(value, str):
        import re

        match = re.match(r"^\s*([0-9.]{1,40})\s*(ms|s|m|min|h)?\s*$", value, re.ASCII) if len(value) <= 64 else None
        if match is None:
            raise InputError(f"{what}: cannot read {shown(value)} as a positive time; write e.g. 600, 90s, 10m or 2h")
        num, den = parse_decimal(match.group(1), what=what, example="600, 90s, 10m or 2h")
        if match.group(2) == _MILLI:
            den *= 1000
        else:
            num *= _SECONDS[match.group(2)]
        if not 0 < num <= MAX_SECONDS * den:
            raise InputError(
                f"{what}: {shown(value)} must be above 0 and at most {MAX_SECONDS:,} seconds (one year); write e.g. 30s"
            )
        return num / den
    return _real(value, what, 1e-6, MAX_SECONDS, "seconds", "600")


_RATE_POW = {"": 0, "k": 3, "M": 6, "G": 9, "T": 12}


def read_bandwidth(value: object, what: str) -> float:
    """Bytes per second from ``3.35TB/s``, ``3350GB/s``, ``3.35e12`` or a plain number (decimal units, as
    published), within 1 B/s..10 PB/s; read exactly (an exponent of at most two digits)."""
    if isinstance(value, str):
        import re

        pattern = r"^\s*([0-9]+(?:\.[0-9]+)?)(?:[eE]([0-9]{1,2}))?\s*([kMGT]?)B?(?:/s)?\s*$"
        match = re.match(pattern, value, re.ASCII) if len(value) <= 64 else None
        if match is None:
            raise InputError(f"{what}: cannot read {shown(value)}; write e.g. 3.35TB/s, 3350GB/s or 3.35e12")
        num, den = parse_decimal(match.group(1), what=what, example="3.35TB/s")
        num *= int(10 ** (int(match.group(2) or 0) + _RATE_POW[match.group(3)]))
        low, high = BANDWIDTH
        if not low * den <= num <= high * den:
            raise InputError(f"{what}: {shown(value)} is outside 1 B/s..10 PB/s")
        return num / den
    return _real(value, what, *BANDWIDTH, "bytes per second", "3.35e12")


def read_per_second(value: object, what: str) -> float:
    """A rate per second: ``50/h``, ``0.2/s``, ``1200/day``; a bare number is per second."""
    if isinstance(value, str):
        return parse_per_second(value, what=what, default_unit="s")
    return _real(value, what, 1e-9, 1e9, "per second", "0.2/s")


def read_text(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what}: give text, not {_brief(value)}")
    if not value.strip():
        raise InputError(f"{what}: give a value, not an empty text")
    if len(value) > MAX_REF or any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise InputError(f"{what}: {shown(value)} is not a name kvbudget reads (control characters or too long)")
    return value


def read_model(value: object, what: str) -> str:
    """A model reference as written: a catalog name, a file or folder, or a Hub id (model/sources.py tells which);
    never something that reads as an option (``-h``, ``--help``), a control character or a 5,000-character text."""
    ref = read_text(value, what)
    if ref.lstrip().startswith("-"):
        raise InputError(
            f"{what}: {shown(ref)} reads as an option, not a model; give a catalog name (kvbudget models), "
            "a config.json, a model folder, a .gguf file or a Hub id (org/name)"
        )
    if ref != ref.strip():
        raise InputError(f"{what}: {shown(ref)} has spaces around it; give the model's name alone")
    return ref


_ADDRESS = re.compile(r"(?:ray://)?(?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:]+\]):([0-9]{1,5})")


def read_address(value: object, what: str) -> str:
    """A Ray cluster's address as ``ray.init`` takes it: ``auto`` (the cluster this machine joined), the head's
    ``HOST:PORT`` (``ray start --head`` prints it) or a Ray Client ``ray://HOST:PORT``."""
    text = read_text(value, what)
    found = _ADDRESS.fullmatch(text)
    if text != "auto" and (found is None or not 1 <= int(found.group(1)) <= 65535):
        raise InputError(
            f"{what}: {shown(text)} is not a Ray cluster's address; give the head's HOST:PORT (ray start --head "
            "prints it), ray://HOST:PORT, or auto"
        )
    return text


def read_engine(value: object, what: str) -> str:
    """An engine as written (``vllm``, ``vllm@0.25``, ``transformers<5``), checked against the engines kvbudget
    implements when the request is made, so a misspelt engine in a list is refused, not a row that cannot serve."""
    text = read_text(value, what)
    from kvbudget.engines import parse_engine

    _named(what, lambda: parse_engine(text.strip()))
    return text


def read_gpu(value: object, what: str) -> str:
    """A catalog GPU as written (id, alias or name), checked against the catalog when the request is made."""
    text = read_text(value, what)
    from kvbudget import hardware

    _named(what, lambda: hardware.gpu(text))
    return text


def read_link(value: object, what: str) -> str:
    """A catalog link (PCIe, NVLink, InfiniBand) as written, checked against the catalog when the request is made,
    even where the answer does not use it (an offload link without --offload-memory)."""
    text = read_text(value, what)
    from kvbudget import hardware

    _named(what, lambda: hardware.link(text))
    return text


def read_kv_dtype(value: object, what: str) -> str:
    """A cache dtype as written (``auto``, ``fp8``, ``q8_0/q4_0``: K and V apart), checked when the request is
    made."""
    text = read_text(value, what)
    from kvbudget.precision import parse_cache_dtype

    k_text, slash, v_text = text.partition("/")
    if slash and (not k_text.strip() or not v_text.strip()):
        raise InputError(f"{what} {shown(text)}: give both sides of K/V, e.g. q8_0/q4_0, or one dtype for both")
    for side in (k_text, v_text) if slash else (k_text,):
        parse_cache_dtype(side, what=what)
    return text


def read_weights(value: object, what: str) -> str:
    """A weights precision as written (``bf16``, ``fp8``, ``awq``, ``q4_k``, a bit count, or ``checkpoint``: the
    checkpoint's own), checked when the request is made."""
    text = read_text(value, what)
    if text.strip().lower() != "checkpoint":
        from kvbudget.weights.precision import weight_precision

        weight_precision(text, what=what)
    return text


def read_serving_weights(value: object, what: str) -> str | None:
    """One deployment's weights precision; ``checkpoint`` (as size and compare name it) is the checkpoint's own,
    as not given."""
    text = read_weights(value, what)
    return None if text.strip().lower() == "checkpoint" else text


def _named(what: str, check: Callable[[], object]) -> None:
    """Run ``check``; an error it raises is raised again naming the request's field, once
    (``--size-gpu: GPU 'x' is not in the catalog``, not ``GPU 'x' ...``, nor ``--size-engine: --engine: ...``)."""
    try:
        check()
    except InputError as exc:
        message = str(exc)
        if message.startswith(f"{what}:") or message.startswith(f"{what} "):
            raise
        if message.startswith("--engine"):
            message = message.removeprefix("--engine").lstrip(": ")
        raise InputError(f"{what}: {message}") from None


def read_switch(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what}: a switch; give True or False, not {_brief(value)}")
    return value


def read_list(value: object, what: str, item: Callable[[object, str], object]) -> tuple[object, ...]:
    """A comma-separated text or a list of values, each read as ``item`` reads one; at least one value."""
    if isinstance(value, str):
        if value.count(",") >= MAX_LIST:
            raise InputError(f"{what}: {value.count(',') + 1:,} values; give at most {MAX_LIST}")
        parts = [part.strip() for part in value.split(",")]
        if not any(parts):
            raise InputError(f"{what}: give at least one value (comma-separated)")
        if not all(parts):
            raise InputError(f"{what}: {shown(value)} has an empty item; remove the extra comma")
        items: list[object] = list(parts)
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        items = [value]
    if not items:
        raise InputError(f"{what}: give at least one value (comma-separated)")
    if len(items) > MAX_LIST:
        raise InputError(f"{what}: {len(items):,} values; give at most {MAX_LIST}")
    read = tuple(item(part, what) for part in items)
    seen: set[object] = set()
    for one in read:
        key = one.casefold() if isinstance(one, str) else one
        if key in seen:
            raise InputError(f"{what}: {shown(str(one))} is given twice; give each value once")
        seen.add(key)
    return read


READERS: dict[str, Callable[[object, str], object]] = {
    "text": read_text,
    "tokens": read_tokens,
    "prefix": read_prefix,
    "count": read_count,
    "gpus": read_gpus,
    "sessions": read_sessions,
    "running": read_running,
    "layers": read_layers,
    "split": read_split,
    "model": read_model,
    "jobs": read_jobs,
    "index": read_index,
    "port": read_port,
    "startup": read_startup,
    "memory": read_memory,
    "positive": read_positive,
    "fraction": read_fraction,
    "share": read_share,
    "tolerance": read_tolerance,
    "seconds": read_seconds,
    "bandwidth": read_bandwidth,
    "per_second": read_per_second,
    "switch": read_switch,
    "engine": read_engine,
    "gpu": read_gpu,
    "link": read_link,
    "kv_dtype": read_kv_dtype,
    "weights": read_weights,
    "serving_weights": read_serving_weights,
    "address": read_address,
}
