"""TensorRT-LLM (PyTorch backend, ``trtllm-serve`` / the LLM API, KV cache manager V1).

The budget is a share of the memory **free after** the weights, the profiled activation peak and the
non-torch memory (NCCL, CUDA graphs), unlike vLLM's share of the total (tensorrt_llm/_torch/pyexecutor/
_util.py KvCacheCreator.configure_kv_cache_capacity, _cal_max_memory):

    available = (total - peak + temporary KV) x free_gpu_memory_fraction (0.9, llmapi/llm_args.py KvCacheConfig)

Then (resource_manager.py KVCacheManager):

* bytes per token, for the budget (get_cache_size_per_token): 2 x attention layers on the rank x
  (head_dim x kv_heads // tp) x 2 B (1 B fp8; nvfp4 ceil(n/2) + ceil(n/16)); MLA: 1 x (kv_lora_rank +
  qk_rope_head_dim), not divided by tp. The allocation itself gives each layer ceil(kv_heads / tp) heads
  (get_cache_bytes_per_token), more than the budget assumed when kv_heads < tp;
* max_tokens = (available - fixed cost) // bytes per token (CacheCost.tokens_for_budget), blocks of
  ``tokens_per_block`` = 32 tokens: floor(max_tokens / 32) (ceil before 1.3), one block spanning every layer;
* a request of N tokens holds ceil(N / 32) blocks (get_needed_resource_to_completion, beam 1);
* the V1 manager sizes no sliding window from the model config: every attention layer, sliding or not,
  keeps the whole sequence unless ``kv_cache_config.max_attention_window`` is set;
* Mamba-2 / gated-delta-net hybrids (CppMambaHybridCacheManager): conv (model dtype) + SSM state
  (mamba_ssm_cache_dtype, else the model dtype) per slot, for max_batch_size x pp + 1 slots reserved
  before any KV token (the fixed cost of _estimate_mamba_hybrid_cache_cost);
* block reuse (prefix caching) on by default, by whole blocks.

Read at NVIDIA/TensorRT-LLM main (2026, the 1.3 line; files cited by function). Not modelled, refused:
the V2 cache manager (Gemma 4), the DSA indexer cache, KDA / Mamba-1 / short-conv state, cross attention,
KV shared across layers, per-layer head counts (the budget takes their mean).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from kvbudget.engines.base import NO_SLOTS, EngineOptions, Group, Layout, Slots, cdiv, version_tuple
from kvbudget.engines.common import group_primitives, shared_kv_group, state_dtype
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
from kvbudget.engines.trtllm_profile import profiled_overhead, terms
from kvbudget.errors import EngineRefusalError
from kvbudget.model.spec import (
    ChunkedLocal,
    CrossAttention,
    FullAttention,
    IndexerKeys,
    LatentAttention,
    ModelSpec,
    Recurrent,
    SharedKV,
    SlidingWindow,
)
from kvbudget.precision import CacheDType

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvbudget.engines.records import PoolShape
    from kvbudget.measure.logs.record import EngineLog

NAME = "trtllm"
DEFAULT_VERSION = "1.3.0"
TOKENS_PER_BLOCK = 32  # llmapi/llm_args.py KvCacheConfig.tokens_per_block
FREE_GPU_MEMORY_FRACTION = 0.9  # KvCacheConfig.free_gpu_memory_fraction
MAX_BATCH_SIZE = 2048  # builder.py BuildConfig.max_batch_size (trtllm-serve --max_batch_size default)
MAX_NUM_TOKENS = 8192  # BuildConfig.max_num_tokens (trtllm-serve --max_num_tokens default)
FLOOR_BLOCKS_SINCE = (1, 3)  # calculate_max_num_blocks: int(max_tokens // tpb); math.ceil before (a Dec-2025 log)
OLDEST = (1, 0)
CACHE_DTYPES = ("bf16", "fp16", "fp8", "fp8_e4m3", "nvfp4")  # KvCacheConfig.dtype: auto, fp8, nvfp4
V2_MANAGER_MODEL_TYPES = frozenset({"gemma4", "gemma4_text"})  # forced to the V2 manager (not modelled)
MAMBA_VARIANTS = ("mamba2", "gated_delta_net")


def _element_bytes(dtype: CacheDType, elems: int) -> int:
    """KVCacheManager byte rule: 2 B per value, 1 B for fp8, nvfp4 1 B per 2 values + one fp8 scale per 16."""
    if dtype.name == "nvfp4":
        return cdiv(elems, 2) + cdiv(elems, 16)
    if dtype.name.startswith("fp8"):
        return elems
    return 2 * elems


def _check(spec: ModelSpec, k: CacheDType, v: CacheDType, version: str) -> None:
    if version_tuple(version)[:2] < OLDEST:
        raise EngineRefusalError(
            f"trtllm@{version}: kvbudget implements the PyTorch backend of TensorRT-LLM 1.x (KvCacheCreator); "
            "read that server's own figures with its log"
        )
    if k != v:
        raise EngineRefusalError(f"{NAME}: kv_cache_config.dtype is one type for K and V; got {k.name} and {v.name}")
    if k.name not in CACHE_DTYPES:
        raise EngineRefusalError(
            f"{NAME}: --kv-dtype {k.name} is not a TensorRT-LLM cache dtype (kv_cache_config.dtype auto, fp8, "
            f"nvfp4); accepted: {', '.join(CACHE_DTYPES)}"
        )
    if spec.model_type in V2_MANAGER_MODEL_TYPES:
        raise EngineRefusalError(
            f"{NAME}: {spec.model_type} runs on TensorRT-LLM's KV cache manager V2 (pool groups, a device quota), "
            "whose sizing kvbudget does not model yet"
        )


def _attention_heads(spec: ModelSpec) -> tuple[int, int]:
    """(kv_heads, head_dim) shared by every attention layer: the budget formula takes one of each."""
    shapes = {
        (s.kv_heads, s.k_dim, s.v_dim)
        for _, s in spec.primitives()
        if isinstance(s, FullAttention | SlidingWindow | ChunkedLocal)
    }
    if len(shapes) > 1 or any(kd != vd for _, kd, vd in shapes):
        raise EngineRefusalError(
            f"{NAME}: {spec.name} has per-layer KV heads or K/V dims ({sorted(shapes)}); TensorRT-LLM's budget "
            "takes their mean (get_cache_size_per_token), which kvbudget does not model"
        )
    heads, dim, _ = next(iter(shapes)) if shapes else (0, 0, 0)
    return heads, dim


def _block_slots() -> Slots:
    return Slots(
        f"cdiv(N, {TOKENS_PER_BLOCK}) x {TOKENS_PER_BLOCK} x S (blocks spanning every layer)",
        lambda n, s: cdiv(n, TOKENS_PER_BLOCK) * TOKENS_PER_BLOCK * s,
    )


def _recurrent(rec: Recurrent, tp: int, model_dtype: str) -> tuple[int, str]:
    """MambaKVCacheParams.get_states_bytes_per_layer: conv_dim = (d_inner + 2 x n_groups x d_state) / tp over
    d_conv - 1 columns in the model dtype, SSM (num_heads / tp) x head_dim x d_state in the SSM dtype."""
    if rec.variant not in MAMBA_VARIANTS:
        raise EngineRefusalError(
            f"{NAME}: {rec.variant} state is not modelled for TensorRT-LLM (its hybrid manager sizes Mamba-2 and "
            "gated-delta-net layers)"
        )
    if rec.variant == "mamba2":
        conv_dim = (rec.d_inner + 2 * rec.n_groups * rec.d_state) // tp
        heads, head_dim, state = rec.num_heads // tp, rec.head_dim, rec.d_state
    else:  # qwen3_next: n_groups = linear_num_key_heads, state_size = linear_key_head_dim
        conv_dim = (rec.num_v_heads * rec.head_v_dim + 2 * rec.num_k_heads * rec.head_k_dim) // tp
        heads, head_dim, state = rec.num_v_heads // tp, rec.head_v_dim, rec.head_k_dim
    conv_t = state_dtype(None, model_dtype)
    ssm_t = state_dtype(rec.ssm_dtype, model_dtype)
    conv = conv_dim * (rec.conv_kernel - 1) * conv_t.block_bytes
    ssm = heads * head_dim * state * ssm_t.block_bytes
    text = (
        f"{rec.variant}: conv {rec.conv_kernel - 1} x {conv_dim:,} x {conv_t.block_bytes} B ({conv_t.name}) = "
        f"{conv:,} B + state {heads} x {head_dim} x {state} x {ssm_t.block_bytes} B ({ssm_t.name}) = {ssm:,} B"
    )
    return conv + ssm, text


def layout(
    spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions, version: str = DEFAULT_VERSION
) -> Layout:
    """Bytes TensorRT-LLM allocates per GPU for S sequences of N tokens (the allocation: ceil(kv_heads / tp)
    heads per layer), each sequence in whole 32-token blocks."""
    _check(spec, k, v, version)
    _attention_heads(spec)  # one head count and one head dim for K and V, as the budget needs
    groups: list[Group] = []
    notes: list[str] = []
    for state, indices in group_primitives(spec):
        n = len(indices)
        if isinstance(state, FullAttention | SlidingWindow | ChunkedLocal):
            heads = cdiv(state.kv_heads, tp)  # get_cache_bytes_per_token: (h + tp - 1) // tp per layer
            slot = 2 * _element_bytes(k, heads * state.k_dim)
            text = f"2 (K,V) x {heads} kv heads (ceil({state.kv_heads}/{tp})) x {state.k_dim} dims @ {k.name}"
            label = "full attention"
            if not isinstance(state, FullAttention):
                label = f"{'sliding window' if isinstance(state, SlidingWindow) else 'chunked'} layers, cached in full"
                notes.append(
                    "the V1 KV cache manager takes no sliding window from the model config: sliding and chunked "
                    "layers keep the whole sequence unless kv_cache_config.max_attention_window is set"
                )
            groups.append(Group("full_attention", label, n, slot, text, _block_slots(), True, layer_indices=indices))
        elif isinstance(state, LatentAttention):
            slot = _element_bytes(k, state.latent_dim)  # SELFKONLY, one head of kv_lora_rank + rope, every rank
            text = f"K only: ({state.kv_lora_rank} latent + {state.rope_dim} rope) @ {k.name}, replicated on each rank"
            groups.append(Group("latent_attention", "latent attention (MLA)", n, slot, text, _block_slots(), True))
        elif isinstance(state, Recurrent):
            size, text = _recurrent(state, tp, spec.dtype)
            groups.append(
                Group(
                    "recurrent", f"{state.variant} state", n, 0, "", NO_SLOTS, False, size, text, layer_indices=indices
                )
            )
        elif isinstance(state, SharedKV):
            groups.append(shared_kv_group(state, indices))
        elif isinstance(state, IndexerKeys | CrossAttention):
            what = "the DSA indexer key cache" if isinstance(state, IndexerKeys) else "cross attention"
            raise EngineRefusalError(f"{NAME}: {what} is not modelled for TensorRT-LLM")
    if any(g.kind == "recurrent" for g in groups):
        notes.append(
            f"TensorRT-LLM reserves max_batch_size x pp + 1 recurrent state slots before any KV token "
            f"(max_batch_size {options.max_batch_size or MAX_BATCH_SIZE:,}); the per-sequence state here is one slot"
        )
    return Layout(NAME, version, k, v, tp, tuple(groups), TOKENS_PER_BLOCK, tuple(dict.fromkeys(notes)))


@dataclass(frozen=True)
class Pool:
    """What TensorRT-LLM makes of a KV budget on one GPU."""

    bytes_per_token: int  # the budget's slope (get_cache_size_per_token)
    fixed_cost: int  # recurrent state slots reserved up front (the intercept)
    max_tokens: int
    blocks: int
    allocated_bytes: int  # blocks x 32 x the allocation's bytes per token, + the fixed cost


def budget_bytes_per_token(spec: ModelSpec, k: CacheDType, tp: int) -> int:
    """get_cache_size_per_token: kv_factor x attention layers x head_dim x kv_heads // tp x bytes (MLA: one
    latent head, no tp division)."""
    total = 0
    heads, dim = _attention_heads(spec)
    for _, state in spec.primitives():
        if isinstance(state, FullAttention | SlidingWindow | ChunkedLocal):
            total += 2 * _element_bytes(k, dim * heads // tp)
        elif isinstance(state, LatentAttention):
            total += _element_bytes(k, state.latent_dim)
    return total


def pool(spec: ModelSpec, built: Layout, available: int, max_batch_size: int, pp: int, version: str) -> Pool:
    """Tokens and blocks for ``available`` bytes (the fraction already applied)."""
    slope = budget_bytes_per_token(spec, built.k_dtype, built.tp)
    fixed = (max_batch_size * pp + 1) * built.state_bytes  # _estimate_mamba_hybrid_cache_cost intercept
    tokens = max((available - fixed) // slope, 0) if slope else 0  # CacheCost.tokens_for_budget
    blocks = tokens // TOKENS_PER_BLOCK
    if version_tuple(version)[:2] < FLOOR_BLOCKS_SINCE:
        blocks = cdiv(tokens, TOKENS_PER_BLOCK)
    allocated = blocks * TOKENS_PER_BLOCK * built.kv_bytes_per_token + fixed
    return Pool(slope, fixed, tokens, blocks, allocated)


def usable(total: int, weights: int, overhead: int, fraction: float) -> int:
    """weights + overhead + fraction x what is free after them: the plan's pool is then the budget itself."""
    return weights + overhead + int((total - weights - overhead) * fraction)


class Rules(EngineRules):
    """TensorRT-LLM: a share of the memory free after weights and activations, 32-token blocks over all layers,
    recurrent state slots reserved for the whole batch."""

    name = NAME
    title = "TensorRT-LLM"
    default_version = DEFAULT_VERSION
    order = 25
    running_option = "--max-batch-size"  # kvbudget's name for trtllm-serve --max_batch_size
    reads_attn_backend = True  # FlashInfer's 320 MiB workspace (trtllm_profile.FLASHINFER_WORKSPACE)
    aliases = ("tensorrt-llm", "tensorrt_llm", "trt-llm", "tensorrtllm")
    server = True
    memory_fraction = "free_gpu_memory_fraction"
    # _util.py KvCacheCreator: extra_cost = (total - free) - torch allocated after the dummy pass, subtracted with the
    # peak; on a DGX Spark (1.1.0rc3, tests/data/memory/trtllm_logs.csv) it counted 49.28 GiB the host held
    counts_host_on_unified_memory = True
    cheaper_kv_dtypes = ("fp8", "nvfp4")
    logs_version = True
    # TensorRT-LLM 1.3 KvCacheConfig.enable_block_reuse defaults to True: a finished request's blocks stay reusable
    # (evictable) for the next request with the same prefix
    sim_pause = "evictable"
    sim_basis = (
        "TensorRT-LLM keeps a finished step's blocks for reuse (enable_block_reuse, on by default; evictable) and the "
        "next step reuses them if still cached"
    )
    below: ClassVar[Mapping[str, str]] = {"1.3": "1.2.1"}

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        return layout(spec, k, v, tp, options, self.version)

    def usable_share(self, m: MemoryShape) -> Share:
        fraction = m.utilization if m.utilization is not None else FREE_GPU_MEMORY_FRACTION
        how = "given" if m.utilization is not None else "default"
        return Share(
            usable(m.total_bytes, m.weights, m.overhead, fraction),
            f"weights + overhead + free_gpu_memory_fraction {fraction} ({how}) x the memory free after them "
            "(KvCacheCreator: (total - peak) x fraction)",
            fraction,
            ("weights", "overhead"),
        )

    def batched_tokens(
        self, total_bytes: int, gpu_label: str, options: EngineOptions, context: int = 0
    ) -> tuple[int, str]:
        return MAX_NUM_TOKENS, "trtllm-serve --max_num_tokens default (the profiling run fills it)"

    def overhead(self, spec: ModelSpec, site: Site) -> Overhead:
        # KvCacheCreator's own profiling pass, term by term (engines/trtllm_profile.py); the dummy requests are cut
        # at max_seq_len - 1 tokens (the plan's context; with none, one request of the whole batch)
        return profiled_overhead(
            terms(
                spec,
                tp=site.tp,
                max_num_tokens=site.batched,
                max_seq_len=site.context or site.batched + 1,
                batched_basis=site.batched_basis,
                attn_backend=site.attn_backend,
            )
        )

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        # KvCacheConfig.enable_block_reuse (default True): whole blocks of tokens_per_block
        return (
            prefix // TOKENS_PER_BLOCK * TOKENS_PER_BLOCK,
            f"TensorRT-LLM block reuse shares whole {TOKENS_PER_BLOCK}-token blocks",
        )

    def _pool(self, d: Deployment) -> Pool:
        return pool(d.spec, d.layout, d.pool_bytes, d.options.max_batch_size or MAX_BATCH_SIZE, d.pp, self.version)

    def sessions(self, d: Deployment, warnings: list[str]) -> int:
        """Blocks // blocks per request, at most max_batch_size requests."""
        p = self._pool(d)
        batch = d.options.max_batch_size or MAX_BATCH_SIZE
        if p.fixed_cost:
            best = best_max_batch_size(d, self.version)
            if not d.options.max_batch_size and best < batch:
                warnings.append(
                    f"TensorRT-LLM reserves max_batch_size x pp + 1 = {batch * d.pp + 1:,} recurrent state slots "
                    f"({p.fixed_cost:,} B) before any KV token at its default max_batch_size {batch:,}: "
                    f"set --max_batch_size {best} (then {best} sessions fit)"
                )
        per_request = cdiv(d.context, TOKENS_PER_BLOCK)
        sessions = min(p.blocks // per_request, batch)
        if sessions < 1 and p.blocks:
            warnings.append(
                f"TensorRT-LLM lowers max_seq_len to {p.blocks * TOKENS_PER_BLOCK:,} tokens (the whole pool) "
                "instead of refusing ('Attention window size ... exceeds upper bound')"
            )
        return max(sessions, 0)

    def running_limit(self, d: Deployment, gpu_memory: int, gpu_label: str) -> RunningLimit | None:
        """max_batch_size: the capacity scheduler schedules at most that many requests (TensorRT-LLM 1.x
        tensorrt_llm/_torch/pyexecutor/_util.py: ``BindCapacityScheduler(max_batch_size, ...)``, max_num_requests)."""
        given = d.options.max_batch_size
        if given:
            return RunningLimit(given, f"--max-batch-size {given:,} as set", "given")
        return RunningLimit(MAX_BATCH_SIZE, f"TensorRT-LLM default max_batch_size {MAX_BATCH_SIZE:,}", "exact")

    def start_up(self, d: Deployment) -> StartUp:
        p = self._pool(d)
        batch = d.options.max_batch_size or MAX_BATCH_SIZE
        if p.blocks * TOKENS_PER_BLOCK == 0:
            return StartUp(("Impossible to fit in any sequence in kvCache",), 0, f"TensorRT-LLM {self.version}", True)
        per_seq = cdiv(d.context, TOKENS_PER_BLOCK)
        gib = 2**30
        cost = f"{p.bytes_per_token} bytes/token" + (f" + {p.fixed_cost} bytes fixed cost" if p.fixed_cost else "")
        max_seq = min(d.context, p.blocks * TOKENS_PER_BLOCK)
        lines = (
            f"kv size per token is {cost}",
            f"Estimated max memory in KV cache : {d.pool_bytes / gib:.2f} GiB",
            f"Max KV cache blocks per sequence: {per_seq} [window size={max_seq}], tokens per block="
            f"{TOKENS_PER_BLOCK}, primary blocks={p.blocks}, secondary blocks=0, max sequence length={max_seq}",
            f"Number of tokens per block: {TOKENS_PER_BLOCK}.",
            f"[MemUsageChange] Allocated {p.allocated_bytes / gib:.2f} GiB for max tokens in paged KV cache "
            f"({p.blocks * TOKENS_PER_BLOCK}).",
            f"max_seq_len={max_seq}, max_num_requests={batch * d.pp}, max_num_tokens="
            f"{d.options.max_num_batched_tokens or MAX_NUM_TOKENS}, max_batch_size={batch}",
        )
        return StartUp(
            lines,
            p.blocks * TOKENS_PER_BLOCK,
            f"TensorRT-LLM {self.version} primary blocks ({p.blocks:,} x {TOKENS_PER_BLOCK} tokens; "
            f"max_tokens {p.max_tokens:,} = (KV budget - {p.fixed_cost:,} B fixed) // {p.bytes_per_token:,} B)",
        )

    def printed_capacity(
        self, shape: PoolShape, pool_bytes: int, token_budget: Callable[[], int], generation: str | None
    ) -> dict[str, int]:
        """The tokens of the pool, and its primary blocks x tokens_per_block (KVCacheManager)."""
        tokens = token_budget() if pool_bytes > 0 else 0
        return {"kv_tokens": tokens, "kv_blocks": tokens // TOKENS_PER_BLOCK}

    def logged_memory(self, log: EngineLog) -> LoggedMemory:
        """The device total it profiled against, and the overhead its peak held beyond the weights and the
        temporary KV cache (peak - temporary KV - weights: activations, NCCL, CUDA graphs)."""
        total, peak = log.measured.get("total_gpu_memory_bytes"), log.measured.get("peak_bytes")
        weights, tmp = log.measured.get("weights_bytes"), log.measured.get("tmp_kv_bytes")
        gpu = (
            Measured(int(total.value), f"measured: device total as TensorRT-LLM saw it, {log_line(log, total)}")
            if total
            else None
        )
        # the KV budget KvCacheCreator printed: "... available KV cache memory ..." with the peak, else the
        # "Estimated max memory in KV cache" line (tensorrt_llm/_torch/pyexecutor/_util.py)
        pool = log.measured.get("available_kv_bytes") or log.measured.get("estimated_kv_bytes")
        if peak is None or weights is None:
            return LoggedMemory(gpu, None, kv_pool=pool)
        extra = int(peak.value) - int(weights.value) - (int(tmp.value) if tmp else 0)
        basis = f"measured: peak {log_line(log, peak)} - weights {log_line(log, weights)}" + (
            f" - temporary KV {log_line(log, tmp)}" if tmp else ""
        )
        return LoggedMemory(gpu, Measured(max(extra, 0), basis), kv_pool=pool)

    def serve_command(self, s: ServeSettings) -> tuple[str, ...]:
        args = ["trtllm-serve", s.model, "--backend", "pytorch", "--max_seq_len", str(s.context)]
        fraction = s.fraction if s.fraction is not None else FREE_GPU_MEMORY_FRACTION
        if s.tp > 1:
            args += ["--tp_size", str(s.tp)]
        if s.pp > 1:
            args += ["--pp_size", str(s.pp)]
        if s.options.max_batch_size:
            args += ["--max_batch_size", str(s.options.max_batch_size)]
        if s.options.max_num_batched_tokens:
            args += ["--max_num_tokens", str(s.options.max_num_batched_tokens)]
        # LLM API settings trtllm-serve has no flag for go in a YAML file (--extra_llm_api_options)
        yaml = f"attn_backend: {s.options.attn_backend.upper()}\\n" if s.options.attn_backend else ""
        if s.k.name in ("fp8", "fp8_e4m3", "nvfp4"):
            # a YAML kv_cache_config replaces the CLI-built one whole: repeat the fraction in it
            dtype = "nvfp4" if s.k.name == "nvfp4" else "fp8"
            yaml += f"kv_cache_config:\\n  dtype: {dtype}\\n  free_gpu_memory_fraction: {fraction}\\n"
        if yaml:
            return (
                "printf",
                yaml,
                ">",
                "trtllm-options.yaml",
                "&&",
                *args,
                "--extra_llm_api_options",
                "trtllm-options.yaml",
                *(() if "kv_cache_config" in yaml else ("--kv_cache_free_gpu_memory_fraction", str(fraction))),
            )
        return (*args, "--kv_cache_free_gpu_memory_fraction", str(fraction))

    def past_window(self, context: int, native: int) -> str:
        # TensorRT-LLM 1.3 reads rope scaling from the checkpoint's config.json (PyTorch backend model config);
        # trtllm-serve has no config-override flag, so the override is an edit of a local copy
        return (
            f"TensorRT-LLM {self.version} takes rope scaling from the checkpoint's config.json only: add "
            f"{yarn_override(context, native)[1:-1]} to a local copy's config.json and serve that directory"
        )

    def serve_note(self, s: ServeSettings) -> str | None:
        if s.past_native and s.native_context:
            return f"first add {s.yarn_override[1:-1]} to the checkpoint's config.json (a local copy)"
        return None


def best_max_batch_size(d: Deployment, version: str) -> int:
    """The max_batch_size that serves the most sessions of ``d.context`` tokens on a hybrid, where each batch slot
    reserves recurrent state: the largest m with blocks(m) // blocks per request >= m."""
    per_request = cdiv(d.context, TOKENS_PER_BLOCK)

    def served(m: int) -> int:
        return min(m, pool(d.spec, d.layout, d.pool_bytes, m, d.pp, version).blocks // per_request)

    lo, hi = 1, MAX_BATCH_SIZE
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if served(mid) >= mid:
            lo = mid
        else:
            hi = mid - 1
    return lo
