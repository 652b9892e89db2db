"""llama.cpp start-up logs in every generation, and Ollama's logs that embed them.

* 2023-early 2025: ``llama_new_context_with_model: n_ctx = N``, ``llama_kv_cache_init: kv_size = N,
  ... type_k = 'f16', type_v = 'f16', n_layer = L``, ``llama_new_context_with_model: KV self size =
  X MiB, K (f16): ..., V (f16): ...`` (one cache of n_ctx cells for every sequence);
* mid 2025: ``llama_kv_cache_unified: size = X MiB ( C cells, L layers, S seqs), K (...): ..., V (...): ...``
  and ``llama_kv_cache_unified_iswa: creating non-SWA KV cache, size = C cells``;
* now: ``llama_context: n_seq_max / n_ctx / n_ctx_seq / n_batch / n_ubatch / flash_attn / kv_unified``,
  ``llama_kv_cache: size = X MiB ( C cells, L layers, s/S seqs), K (...)...`` (C per stream),
  ``llama_kv_cache_iswa: creating [non-]SWA KV cache, size = C cells`` and ``llama_memory_recurrent:
  size = X MiB ( N cells, L layers, S seqs), R (f32): ..., S (f32): ...`` (2026 builds add
  ``T rs_seq`` and the rollback snapshots ``P (f32): ...``). The total is the sum of
  every ``size =`` line (src/llama-kv-cache.cpp, src/llama-memory-recurrent.cpp format strings).
  llama-server prints them only with ``-lv 4``.
* weights: ``load_tensors: <buffer> model buffer size = X MiB`` (older ``llm_load_tensors: <buffer>
  buffer size``), one line per buffer or device, summed.
* Ollama: its own ``level=INFO source=...`` lines (``msg="starting llama server" cmd="... --ctx-size
  N ... --parallel P"``, ``OLLAMA_*`` settings, ``Listening on ... (version X)``) around llama.cpp's.
"""

from __future__ import annotations

import re

from kvbudget.measure.logs.record import CacheKind, CacheSize, EngineLog, Figure, Refusal
from kvbudget.measure.logs.rules import Handler, Rule, put, rule, set_setting
from kvbudget.measure.logs.text import size
from kvbudget.units import counted

NAME = "llamacpp"
DETECT = (
    "llama_kv_cache",
    "llama_context:",
    "llama_new_context_with_model",
    "llama_model_loader",
    "print_info:",
    "llm_load_",
    "load_tensors:",
    "llama_memory_recurrent",
    "llama-server",
    "ggml_",
)
OLLAMA_DETECT = ("source=server.go", "source=sched.go", "ollama", "OLLAMA_")
MIB = r"(\d+(?:\.\d+)?) MiB"
PARTS = re.compile(r"(?P<name>[KVRSP] \((?P<type>\w+)\)):\s*(?P<num>\d+(?:\.\d+)?) MiB")


def _mib(text: str, line: int) -> Figure:
    value, resolution = size(text, "MiB")
    return Figure(value, "bytes", line, f"{text} MiB", resolution)


def _cache(kind: CacheKind) -> Handler:
    def handle(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
        seqs_text = m.group("seqs") or ""
        seqs, _, streams = seqs_text.partition("/")
        parts = tuple((p.group("name"), _mib(p.group("num"), line)) for p in PARTS.finditer(m.group("rest") or ""))
        pending = log.settings.pop("_pending_swa", None)
        this_kind: CacheKind = "swa" if kind == "kv" and pending is not None and pending.value == "swa" else kind
        log.caches.append(
            CacheSize(
                this_kind,
                _mib(m.group("size"), line),
                int(m.group("cells")) if m.group("cells") else None,
                int(m.group("layers")) if m.group("layers") else None,
                int(seqs) if seqs else None,
                int(streams) if streams else None,
                parts,
            )
        )
        if log.generation is None:
            log.generation = m.group("who")

    return handle


def _iswa(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    # the next size line belongs to this cache: "non-SWA" or "SWA"
    set_setting(log, "_pending_swa", "kv" if m.group("which") == "non-SWA" else "swa", line, override=True)
    set_setting(log, "swa_cells" if m.group("which") == "SWA" else "cells", int(m.group("cells")), line, override=True)


def _kv_self(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    parts = tuple((p.group("name"), _mib(p.group("num"), line)) for p in PARTS.finditer(m.group("rest")))
    cells = log.settings.get("kv_size") or log.settings.get("context")
    log.caches.append(
        CacheSize("kv", _mib(m.group("size"), line), int(cells.value) if cells else None, None, None, 1, parts)
    )
    log.generation = log.generation or "llama_new_context_with_model"


def _kv_init(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    set_setting(log, "kv_size", int(m.group("n")), line)
    set_setting(
        log, "cache_dtype", f"{m.group('k')}/{m.group('v')}" if m.group("k") != m.group("v") else m.group("k"), line
    )


def _buffer(name: str) -> Handler:
    def handle(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
        fig = _mib(m.group("num"), line)
        old = log.measured.get(name)
        if old is None:
            log.measured[name] = Figure(fig.value, "bytes", line, f"{m.group('buf')} {fig.text}", fig.resolution)
        else:  # one line per buffer or device: the figure is their sum
            log.measured[name] = Figure(
                int(old.value) + int(fig.value),
                "bytes",
                old.line,
                f"{old.text} + {m.group('buf')} {fig.text}",
                old.resolution + fig.resolution,
            )

    return handle


def _context(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    key, raw = m.group("k"), m.group("v")
    names = {
        "n_seq_max": "n_seq",
        "n_ctx": "context",
        "n_ctx_seq": "n_ctx_seq",
        "n_ctx_per_seq": "n_ctx_seq",
        "n_batch": "n_batch",
        "n_ubatch": "n_ubatch",
        "flash_attn": "flash_attn",
        "kv_unified": "kv_unified",
        "swa_full": "swa_full",
        "type_k": "type_k",
        "type_v": "type_v",
    }
    if key in names:
        value: str | int | bool = int(raw) if raw.isdigit() else {"true": True, "false": False}.get(raw, raw)
        set_setting(log, names[key], value, line)


def _slots(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    set_setting(log, "n_seq", int(m.group("k")), line)
    set_setting(log, "n_ctx_seq", int(m.group("v")), line)


def _model_path(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    if log.model is None:
        set_setting(log, "model", m.group("v"), line)
        log.model = log.settings["model"]


def _version(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    if log.version is None:
        log.version, log.version_line = f"b{m.group('n')}" + (f" ({m.group('c')})" if m.group("c") else ""), line


def _ollama_cmd(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    cmd = m.group("cmd")
    for flag, name in (
        ("--ctx-size", "context"),
        ("--parallel", "n_seq"),
        ("--batch-size", "n_batch"),
        ("--ubatch-size", "n_ubatch"),
        ("--kv-cache-type", "cache_dtype"),
    ):
        fm = re.search(rf"{flag}[ =](\S+)", cmd)
        if fm:
            set_setting(log, name, int(fm.group(1)) if fm.group(1).isdigit() else fm.group(1), line, override=True)
    if "--flash-attn" in cmd:
        set_setting(log, "flash_attn", True, line, override=True)
    fm = re.search(r"--model (\S+)", cmd)
    if fm and log.model is None:
        set_setting(log, "model", fm.group(1), line)
        log.model = log.settings["model"]


def _ollama_env(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    for key, name in (
        ("OLLAMA_NUM_PARALLEL", "ollama_num_parallel"),
        ("OLLAMA_CONTEXT_LENGTH", "ollama_context_length"),
        ("OLLAMA_KV_CACHE_TYPE", "ollama_kv_cache_type"),
        ("OLLAMA_FLASH_ATTENTION", "ollama_flash_attention"),
    ):
        fm = re.search(rf"{key}:(\S*)", m.group(0))
        if fm and fm.group(1):
            raw = fm.group(1).rstrip("]")
            set_setting(log, name, int(raw) if raw.isdigit() else raw, line)


def _ollama_version(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    log.version, log.version_line = m.group("v"), line


def _ollama_kv(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    value, res = size(m.group("num"), m.group("unit"))
    put(log, "ollama_estimated_kv_bytes", Figure(value, "bytes", line, f"{m.group('num')} {m.group('unit')}", res))


def _failed(log: EngineLog, m: re.Match[str], line: int, rank: str | None) -> None:
    if log.refusal is None:
        log.refusal = Refusal("allocation_failed", line, m.group(0).strip())


SIZE_LINE = (
    r"(?P<who>llama_kv_cache(?:_unified)?): size = +"
    + MIB.replace("(", "(?P<size>", 1)
    + r" \( *(?P<cells>\d+) cells, +(?P<layers>\d+) layers, +(?P<seqs>\d+(?:/ *\d+)?) seqs\)(?P<rest>.*)"
)
RULES: tuple[Rule, ...] = (
    rule("build", r"\bbuild(?::| =)? (?P<n>\d+) \((?P<c>\w+)\)", _version, once="engine"),
    rule("loaded meta data", r"loaded meta data with .* from (?P<v>.+?) \(version", _model_path),
    rule(
        "general.name",
        r"general\.name\s+(?:str\s+)?= (?P<v>.+?)\s*$",
        lambda log, m, line, rank: set_setting(log, "model_name", m.group("v"), line),
    ),
    rule("llama_context:", r"llama_context: +(?P<k>\w+) += (?P<v>\S+)\s*$", _context),
    rule(
        "llama_new_context_with_model:",
        r"llama_new_context_with_model: +(?P<k>n_ctx|n_batch|n_ubatch|flash_attn)"
        r" += (?P<v>\S+)\s*$",
        _context,
    ),
    rule(
        "kv_size =",
        r"llama_kv_cache_init: kv_size = (?P<n>\d+), offload = \d+, type_k = '(?P<k>\w+)', "
        r"type_v = '(?P<v>\w+)'",
        _kv_init,
    ),
    rule("creating", r"creating +(?P<which>non-SWA|SWA) KV cache, size = (?P<cells>\d+) cells", _iswa),
    rule("size =", SIZE_LINE, _cache("kv")),
    rule(
        "llama_memory_recurrent",
        r"(?P<who>llama_memory_recurrent): size = +(?P<size>\d+(?:\.\d+)?) MiB \( *"
        r"(?P<cells>\d+) cells, +(?P<layers>\d+) layers, +(?P<seqs>\d+) seqs(?: +\d+ rs_seq)?\)(?P<rest>.*)",
        _cache("recurrent"),
    ),
    rule("KV self size", r"KV self size += +(?P<size>\d+(?:\.\d+)?) MiB(?P<rest>.*)", _kv_self),
    rule(
        "model buffer size", r"(?P<buf>\S+) model buffer size = +(?P<num>\d+(?:\.\d+)?) MiB", _buffer("weights_bytes")
    ),
    rule(
        "llm_load_tensors:",
        r"llm_load_tensors: +(?P<buf>\S+) buffer size = +(?P<num>\d+(?:\.\d+)?) MiB",
        _buffer("weights_bytes"),
    ),
    rule("KV buffer size", r"(?P<buf>\S+) KV buffer size = +(?P<num>\d+(?:\.\d+)?) MiB", _buffer("kv_buffer_bytes")),
    rule(
        "compute buffer size",
        r"(?P<buf>\S+) compute buffer size = +(?P<num>\d+(?:\.\d+)?) MiB",
        _buffer("compute_buffer_bytes"),
    ),
    rule("n_ctx_slot", r"n_slots = (?P<k>\d+), n_ctx_slot = (?P<v>\d+)", _slots),
    rule("failed to", r"(?:failed to allocate|failed to create context|failed to initialize the context).*", _failed),
    rule("starting llama server", r"msg=\"starting llama server\" cmd=\"(?P<cmd>[^\"]*)\"", _ollama_cmd, once="engine"),
    rule("OLLAMA_", r"OLLAMA_\w+:.*", _ollama_env),
    rule("Listening on", r"Listening on \S+ \(version (?P<v>[\w.\-+]+)\)", _ollama_version, once="engine"),
    rule("memory.required.kv", r"memory\.required\.kv=\"?(?P<num>\d+(?:\.\d+)?) ?(?P<unit>[KMGT]iB|B)\"?", _ollama_kv),
)


def finish(log: EngineLog) -> None:
    log.settings.pop("_pending_swa", None)
    for name, kinds in (("kv_cache_bytes", ("kv", "swa")), ("recurrent_state_bytes", ("recurrent",))):
        caches = [c for c in log.caches if c.kind in kinds]
        if caches:
            total = sum(int(c.size.value) for c in caches)
            res = sum(c.size.resolution for c in caches)
            text = " + ".join(c.size.text for c in caches)
            log.measured[name] = Figure(total, "bytes", caches[0].size.line, text, res)
    full = [c for c in log.caches if c.kind == "kv" and c.cells is not None]
    if full and full[0].cells is not None:
        streams = full[0].streams or 1
        log.measured["kv_cells"] = Figure(
            full[0].cells * streams,
            "tokens",
            full[0].size.line,
            f"{full[0].cells} cells x {counted(streams, 'stream')}",
        )
