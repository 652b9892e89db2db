"""SGLang: a token pool of ``page_size``-token pages; each cached token takes one slot in every layer.

* cell (bytes of one token over the layers of the full pool) = sum over full-attention layers of
  ``n_kv_per_rank x (Dk + Dv) x dsize``, KV heads replicated past tp as in vLLM; MLA caches the
  ``kv_lora_rank + rope`` latent once per token, replicated on every rank;
* full layers hold ``pad(N, page)`` slots per sequence;
* hybrid sliding-window models (full + sliding layers): the sliding layers live in a separate SWA pool
  sized ``swa_full_tokens_ratio`` (0.8) x the full pool; one sequence keeps ``min(N, W + page)`` there;
* Mamba / gated-delta-net state: conv (d_conv - 1 columns, bf16) + SSM state in **float32** by default.

S sequences cost S times one sequence. Pool-level sizes come from ``pools`` at the bottom, for a
given byte budget (SGLang's ``rest_memory``), as SGLang 0.5.23 sizes them (checked against its own
code in tests/oracle/test_sglang_oracle.py): the Mamba state cache first takes
``mamba_full_memory_ratio / (1 + ratio)`` (0.9/1.9) of the budget, the token pool the rest; hybrid
sliding-window models get a full pool and a sliding pool of fixed sizes, and a session needs its
whole context in the full pool; running requests are capped by ``tokens / context x 512`` within
[2,048, 4,096] (or by ``--max-running-requests`` // DP size), by half the tokens, and for Mamba models by
the state slots (5 per request with the radix cache's extra buffer, 3 without, 1 with the radix cache off).
With DP attention (``--enable-dp-attention --dp N``) each attention rank splits the KV heads over tp / N
GPUs and keeps its own pools for its own requests; tests/oracle/test_sglang_matrix.py checks all of this at
TP 1-8 on five GPU generations.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from kvbudget.engines import sglang_memory
from kvbudget.engines.contract import EngineRules, yarn_override
from kvbudget.engines.overhead import Overhead, Site
from kvbudget.engines.records import (
    Deployment,
    LoggedMemory,
    Measured,
    MemoryShape,
    RunningLimit,
    ServeSettings,
    Share,
    StartUp,
    log_line,
)
from kvbudget.engines.sglang_config import (
    DEFAULT_PAGE_SIZE,
    DEFAULT_VERSION,
    NAME,
    SWA_ARCHITECTURES,
    attention_tp,
    default_page_size,
    dp_attention,
    mamba_slots_per_request,
    swa_architecture,
)
from kvbudget.engines.sglang_layout import layout
from kvbudget.engines.sglang_pools import (
    SglangPools,
    mamba_cache_per_req,
    mamba_carve_out,
    max_running_requests,
    max_total_num_tokens,
    pool_cells,
    pools,
    swa_pool_split,
)
from kvbudget.errors import EngineRefusalError
from kvbudget.precision import CacheDType, parse_cache_dtype

if TYPE_CHECKING:
    from kvbudget.engines.base import EngineOptions, Layout
    from kvbudget.engines.metrics import EngineMetrics
    from kvbudget.measure.logs.record import EngineLog
    from kvbudget.model.spec import ModelSpec

# The rules live in sglang_config (defaults, allow-lists, page size), sglang_layout (bytes per sequence) and
# sglang_pools (pools for a budget); their public names stay importable from here.
__all__ = [
    "DEFAULT_PAGE_SIZE",
    "DEFAULT_VERSION",
    "NAME",
    "SWA_ARCHITECTURES",
    "Rules",
    "SglangPools",
    "attention_tp",
    "default_page_size",
    "dp_attention",
    "layout",
    "mamba_cache_per_req",
    "mamba_carve_out",
    "mamba_slots_per_request",
    "max_running_requests",
    "max_total_num_tokens",
    "pool_cells",
    "pools",
    "swa_architecture",
    "swa_pool_split",
]


class Rules(EngineRules):
    """SGLang: a static share of the free memory, token pools (full, sliding, Mamba state), the radix cache."""

    name = NAME
    title = "SGLang"
    default_version = DEFAULT_VERSION
    order = 20
    server = True
    divides_heads = True
    memory_fraction = "mem_fraction_static"
    cheaper_kv_dtypes = ("fp8_e4m3",)
    logs_version = True
    quantizes_at_load = ("fp8",)  # --quantization fp8 on a 16-bit checkpoint
    # SGLang 0.5 mem_cache/radix_cache.py: a finished request's KV stays in the radix tree, evicted LRU when needed
    sim_pause = "evictable"
    # SGLang python/sglang/srt/managers/schedule_batch.py ScheduleBatch.retract_decode (0.3-0.5): the running
    # requests sorted by (len(output_ids), -len(origin_input_ids)), reverse, and popped from the end until the
    # next decode fits: the request with the fewest generated tokens goes first, the longest prompt among equals
    sim_victim = "fewest-decoded"
    sim_basis = (
        "SGLang keeps a finished step's KV in its radix cache (evictable, LRU) and the next step reuses it if still "
        "cached; retraction recomputes"
    )
    concurrency_flag = "--max-running-requests"
    running_option = "--max-running-requests"
    # no decode or prefill graphs, so the derived mem_fraction_static reserves none (sglang_memory.py)
    eager_flag = "--disable-cuda-graph"

    def alert_metrics(self) -> EngineMetrics | None:
        from kvbudget.engines.metrics import SGLANG

        return SGLANG

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        return layout(spec, k, v, tp, options, self.version)

    def usable_share(self, m: MemoryShape) -> Share:
        o = m.options
        settings = sglang_memory.MemorySettings(
            tp=m.tp,
            pp=m.pp,
            mla=m.mla,
            chunked_prefill=o.max_num_batched_tokens,
            max_running_requests=o.max_running_requests,
            dp_attention=dp_attention(o),
            eager_prefill=sglang_memory.eager_prefill(m.architectures, m.vision, self.version),
            no_graphs=o.enforce_eager,
        )
        return sglang_memory.usable_share(
            m.total_bytes,
            m.utilization,
            settings,
            self.version,
            m.overhead,
            m.smi_total_bytes,
            m.architectures,
            m.vision,
        )

    def batched_tokens(
        self, total_bytes: int, gpu_label: str, options: EngineOptions, context: int = 0
    ) -> tuple[int, str]:
        return sglang_memory.chunked_prefill(total_bytes, dp_attention(options), self.version)

    def served_dtype(self, spec: ModelSpec, capability: int | None) -> tuple[str, str]:
        # SGLang 0.5.23 srt/configs/model_config.py _get_and_verify_dtype: dtype auto runs a float32 checkpoint in
        # float16 ("the common practice"), Gemma in bfloat16
        if parse_cache_dtype(spec.dtype, what="model dtype").name != "fp32":
            return spec.dtype, ""
        dtype = "bf16" if spec.model_type.startswith("gemma") else "fp16"
        return dtype, f"SGLang runs this float32 checkpoint in {dtype} (dtype auto)"

    def derived_options(self, options: EngineOptions, batched: int, capability: int | None) -> EngineOptions:
        # the page size of the GPU's attention backend (64 on Blackwell)
        return replace(options, gpu_capability=options.gpu_capability or capability)

    def overhead(self, spec: ModelSpec, site: Site) -> Overhead:
        """The memory in use before the weights load (CUDA context, communicators): SGLang's activations and CUDA
        graphs live in the (1 - mem_fraction_static) it keeps back, not in the pool (sglang_memory.usable_share)."""
        figure, low, high, words = sglang_memory.pre_load(site.tp, site.interconnect)
        basis = (
            f"heuristic: memory in use before SGLang loads the weights (CUDA context, communicators), "
            f"{sglang_memory.PRE_LOAD[0] / 2**30:.2f}-{sglang_memory.PRE_LOAD[1] / 2**30:.2f} GiB in SGLang start-up "
            f"logs{words}; activations and CUDA graphs use the share mem_fraction_static keeps back; measure it "
            "(calibrate, plan --from-log) or pass --overhead"
        )
        return Overhead(figure, low, high, "heuristic", basis)

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        # SGLang RadixAttention matches prefixes page by page (mem_cache/radix_cache.py)
        b = block or DEFAULT_PAGE_SIZE
        return prefix // b * b, f"SGLang RadixAttention shares whole {b}-token pages"

    def sessions(self, d: Deployment, warnings: list[str]) -> int:
        """Its pools, not fungible bytes: the Mamba carve-out, the full pool of a sliding-window hybrid, the
        running-request cap (one pipeline stage only)."""
        dp = dp_attention(d.options)
        if d.pp > 1:
            return d.sessions * dp
        try:
            built = pools(d.pool_bytes, d.spec, d.layout, d.context, d.options)
        except EngineRefusalError as refusal:
            warnings.append(str(refusal))
            return 0
        if dp > 1:
            # DP attention: each of the dp attention ranks has its own token pool (per-rank heads at tp / dp) and
            # serves its own requests (scheduler per DP rank, SGLang 0.5.23 managers/data_parallel_controller.py)
            warnings.append(
                f"DP attention: {dp} attention ranks, each with its own pool of {built.max_total_num_tokens:,} tokens "
                f"and up to {built.max_running_requests:,} running requests"
            )
        if built.sessions < d.sessions:
            warnings.append(
                f"SGLang serves {built.sessions} sessions of {d.context:,} tokens, not the {d.sessions} the bytes "
                f"alone would hold: max_total_num_tokens {built.max_total_num_tokens:,}"
                + (f" (full pool; sliding pool {built.swa_tokens:,})" if built.swa_tokens else "")
                + (
                    f", {built.max_mamba_cache_size} Mamba state slots"
                    if built.max_mamba_cache_size is not None
                    else ""
                )
                + f", max_running_requests {built.max_running_requests:,}"
            )
        return built.sessions * dp

    def running_limit(self, d: Deployment, gpu_memory: int, gpu_label: str) -> RunningLimit | None:
        """max_running_requests (per DP rank, x the DP ranks): the scheduler takes no new request into the batch
        once that many run (SGLang 0.5.23 python/sglang/srt/managers/scheduler.py get_new_batch_prefill: ``if
        running_bs >= self.max_running_requests: ... return None``). With --pp, only as set (the pools are not
        modelled per stage: ``sessions``)."""
        given = d.options.max_running_requests
        if d.pp > 1:
            return None if given is None else RunningLimit(given, f"--max-running-requests {given:,} as set", "given")
        try:
            built = pools(d.pool_bytes, d.spec, d.layout, d.context, d.options)
        except EngineRefusalError:
            return None
        dp = dp_attention(d.options)
        running = built.max_running_requests * dp
        ranks = f" ({built.max_running_requests:,} on each of {dp} DP ranks)" if dp > 1 else ""
        if given is not None:
            why = f"--max-running-requests {given:,} as set: SGLang max_running_requests {running:,}{ranks}"
            return RunningLimit(running, why, "given")
        why = (
            f"SGLang's derived max_running_requests {running:,}{ranks}: max_total_num_tokens / context x 512, "
            "clamped to [2,048, 4,096], at most half the tokens (KVCacheConfigurator.resolve_max_num_reqs)"
        )
        return RunningLimit(running, why, "computed")

    def start_up(self, d: Deployment) -> StartUp:
        try:
            built = pools(d.pool_bytes, d.spec, d.layout, d.context, d.options)
        except EngineRefusalError as refusal:
            return StartUp((str(refusal),), 0, f"SGLang {self.version} refuses to start", True)
        return StartUp(built.log_lines(), built.max_total_num_tokens, "SGLang max_total_num_tokens")

    def logged_memory(self, log: EngineLog) -> LoggedMemory:
        """Memory free before loading ("Load weight begin. avail mem"): mem_fraction_static is a share of it.
        Its overhead is the share mem_fraction_static leaves, not a profiled figure."""
        free = log.measured.get("free_before_load_bytes")
        if free is None:
            return LoggedMemory()
        return LoggedMemory(Measured(int(free.value), f"measured: free before loading, {log_line(log, free)}"))

    def serve_command(self, s: ServeSettings) -> tuple[str, ...]:
        args = ["python", "-m", "sglang.launch_server", "--model-path", s.model, "--context-length", str(s.context)]
        if s.fraction is not None:
            args += ["--mem-fraction-static", str(s.fraction)]
        # SGLang --kv-cache-dtype has no plain fp8: kvbudget's fp8 (e4m3, as vLLM's) is its fp8_e4m3
        dtype = {"fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}.get(s.k.name, "auto")
        args += ["--kv-cache-dtype", dtype]
        if s.options.block_size:
            args += ["--page-size", str(s.options.block_size)]
        if s.options.max_num_batched_tokens:
            args += ["--chunked-prefill-size", str(s.options.max_num_batched_tokens)]
        if s.tp > 1:
            args += ["--tp", str(s.tp)]
        if s.options.dp_attention and s.options.dp_attention > 1:
            args += ["--enable-dp-attention", "--dp", str(s.options.dp_attention)]
        if s.options.max_running_requests is not None:
            args += ["--max-running-requests", str(s.options.max_running_requests)]
        if s.quantize == "fp8":  # SGLang quantizes a 16-bit checkpoint to fp8 at load (--quantization fp8)
            args += ["--quantization", "fp8"]
        if s.options.enforce_eager:  # every release reads it (0.5.23: a deprecated spelling, still honoured)
            args.append(self.eager_flag)
        if s.past_native:
            # SGLang refuses a --context-length past the config's unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1
            # (model_config.py); YaRN rope scaling over the trained window through --json-model-override-args
            env = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1"
            return (env, *args, "--json-model-override-args", s.yarn_override)
        return tuple(args)

    def past_window(self, context: int, native: int) -> str:
        # SGLang 0.5 model_config.py: a --context-length past the config's is refused unless
        # SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1; config overrides through --json-model-override-args
        return (
            f"SGLang {self.version} refuses --context-length {context} unless "
            "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1, and the model needs rope scaling over its window: "
            f"--json-model-override-args '{yarn_override(context, native)}'"
        )
