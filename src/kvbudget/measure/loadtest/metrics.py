"""The server's own metrics: Prometheus ``/metrics`` per engine, and llama.cpp's ``/slots``.

Names (docs/loadtest.md cites their sources), each with the older spellings still in the field:

* vLLM: KV usage ``vllm:kv_cache_usage_perc`` (``vllm:gpu_cache_usage_perc`` before V1), running
  and waiting ``vllm:num_requests_running`` / ``vllm:num_requests_waiting``, preemptions
  ``vllm:num_preemptions_total``, prefix cache ``vllm:prefix_cache_hits_total`` /
  ``vllm:prefix_cache_queries_total`` (``vllm:gpu_prefix_cache_*`` before V1; tokens).
* SGLang: ``sglang:token_usage``, ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``,
  retractions ``sglang:num_retracted_requests_total``, ``sglang:cached_tokens_total`` over
  ``sglang:prompt_tokens_total``.
* llama.cpp (``--metrics``): ``llamacpp:requests_processing``, ``llamacpp:requests_deferred``,
  ``llamacpp:prompt_tokens_cached_total`` and ``llamacpp:prompt_tokens_total`` (the latter excludes
  cached tokens), ``llamacpp:n_tokens_max``; KV usage only on builds before mid-2025
  (``llamacpp:kv_cache_usage_ratio``), otherwise from ``/slots``: the sum of each slot's
  ``n_prompt_tokens`` (prompt and generated tokens it holds, kept after the request) over the sum
  of the slots' ``n_ctx``. llama.cpp never preempts: slots are fixed.
* TGI: ``tgi_queue_size``, ``tgi_batch_current_size``.

Parsing uses prometheus_client's text parser on the lines of the wanted families only (a vLLM
``/metrics`` body is mostly histograms). Gauges of several label sets (data-parallel engines) are
summed, except usage, whose maximum is kept; counters are summed.
"""

from __future__ import annotations

from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

NAMES: dict[str, dict[str, tuple[str, ...]]] = {
    "vllm": {
        "kv_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "preemptions": ("vllm:num_preemptions_total", "vllm:num_preemptions"),
        "hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits"),
        "queries": (
            "vllm:prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries_total",
            "vllm:gpu_prefix_cache_queries",
        ),
    },
    "sglang": {
        "kv_usage": ("sglang:token_usage",),
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "preemptions": ("sglang:num_retracted_requests_total",),
        "hits": ("sglang:cached_tokens_total",),
        "queries": ("sglang:prompt_tokens_total",),
        "capacity": ("sglang:max_total_num_tokens",),
    },
    "llamacpp": {
        "kv_usage": ("llamacpp:kv_cache_usage_ratio",),
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        "hits": ("llamacpp:prompt_tokens_cached_total",),
        "processed": ("llamacpp:prompt_tokens_total",),
        "n_tokens_max": ("llamacpp:n_tokens_max",),
    },
    "tgi": {"running": ("tgi_batch_current_size",), "waiting": ("tgi_queue_size",)},
}
KV_USAGE_METRIC = {
    "vllm": "vllm:kv_cache_usage_perc",
    "sglang": "sglang:token_usage",
    "llamacpp": "/slots (sum n_prompt_tokens / sum n_ctx)",
}


@dataclass(frozen=True)
class Snapshot:
    """One scrape. Counters are cumulative since the server started; None: not exposed."""

    t: float
    kv_usage: float | None = None
    running: float | None = None
    waiting: float | None = None
    preemptions: float | None = None
    prefix_hits: float | None = None
    prefix_queries: float | None = None
    n_tokens_max: float | None = None
    capacity_tokens: float | None = None


def _wanted_lines(text: str, names: tuple[str, ...]) -> str:
    """The TYPE lines and samples of the wanted families (prefix match: suffixes and labels stay)."""
    keep = []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            if line[7:].startswith(names):
                keep.append(line)
        elif line.startswith(names):
            keep.append(line)
    return "\n".join(keep) + "\n"


def parse_values(text: str, engine: str) -> dict[str, float]:
    """Each wanted quantity of ``engine`` found in a /metrics body (first alias present wins).

    Raises ValueError when the wanted lines are not Prometheus text."""
    table = NAMES.get(engine, {})
    all_names = tuple(name for aliases in table.values() for name in aliases)
    if not all_names:
        return {}
    # prometheus_client names a counter's sample NAME_total even when the server wrote NAME
    # (llama.cpp's counter llamacpp:n_tokens_max), so both spellings map to the alias.
    lookup = {name + "_total": name for name in all_names if not name.endswith("_total")}
    lookup.update({name: name for name in all_names})
    found: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(_wanted_lines(text, all_names)):
        for sample in family.samples:
            name = lookup.get(sample.name)
            if name is not None:
                found.setdefault(name, []).append(float(sample.value))
    out: dict[str, float] = {}
    for key, aliases in table.items():
        for name in aliases:
            if name in found:
                values = found[name]
                out[key] = max(values) if key == "kv_usage" else sum(values)
                break
    return out


def snapshot(t: float, values: dict[str, float], engine: str, slots: tuple[int, int] | None = None) -> Snapshot:
    """A Snapshot from parsed values; ``slots`` (tokens held, cells) gives llama.cpp's KV usage."""
    hits, queries = values.get("hits"), values.get("queries")
    if engine == "llamacpp" and hits is not None and "processed" in values:
        queries = hits + values["processed"]
    usage = values.get("kv_usage")
    if slots is not None and slots[1] > 0:
        usage = slots[0] / slots[1]
    preemptions = values.get("preemptions")
    if engine == "llamacpp":
        preemptions = 0.0  # fixed slots: nothing is ever preempted
    return Snapshot(
        t=t,
        kv_usage=usage,
        running=values.get("running"),
        waiting=values.get("waiting"),
        preemptions=preemptions,
        prefix_hits=hits,
        prefix_queries=queries,
        n_tokens_max=values.get("n_tokens_max"),
        capacity_tokens=values.get("capacity"),
    )


def slot_occupancy(slots: object) -> tuple[int, int] | None:
    """(tokens held, cells) over llama.cpp's ``/slots``; None when the answer is not a slot list."""
    if not isinstance(slots, list) or not slots:
        return None
    held = cells = 0
    for slot in slots:
        if not isinstance(slot, dict) or not isinstance(slot.get("n_ctx"), int):
            return None
        cells += slot["n_ctx"]
        tokens = slot.get("n_prompt_tokens")
        if isinstance(tokens, int) and tokens > 0:
            held += min(tokens, slot["n_ctx"])
    return held, cells
