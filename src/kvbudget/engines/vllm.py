"""vLLM (V1 engine): KV cache in blocks of ``block_size`` tokens per layer, sized for the admission worst case.

Per sequence of N tokens (N in the role of ``max_model_len``) each layer holds what vLLM's
``KVCacheSpec.max_memory_usage_bytes`` reserves, the figure "Maximum concurrency" divides by:

* full attention and MLA: ``cdiv(N, B)`` blocks; MLA caches the latent only, replicated on every rank;
* sliding window W: ``cdiv(min(W - 1 + R, N), B) + 1`` blocks, R = max_num_batched_tokens (<= 0.25) or
  max_in_flight_tokens = concurrent batches x max_num_batched_tokens (>= 0.26; 2, or pp + 1: vllm_batches);
* chunked local attention: ``cdiv(min(chunk + R, N), B)`` blocks; cross attention ``cdiv(image_tokens, B)``;
* Mamba / gated-delta-net state, padded to the attention page: one page per sequence with prefix caching
  off (mamba_cache_mode "none"); with prefix caching on, vLLM's default for hybrids (mode "align"),
  2 pages plus a prefill checkpoint page for Mamba2 (>= 0.32) and Gated DeltaNet on FlashInfer (>= 0.33).

The MLA block size follows the attention backend vLLM picks for the GPU and cache dtype (0.26+):
FLASH_ATTN_MLA (multiples of 16) on Hopper with a 16-bit cache, FlashMLA (64) on Hopper with fp8,
FlashInfer-MLA (32) on Blackwell, Triton MLA (16) on Ampere, Ada and consumer Blackwell.

Hybrid models are cut into KV-cache groups of equal size (padding layers included); see ``vllm_pool``.
S sequences cost S times one sequence.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, ClassVar

from kvbudget.engines import vllm_memory
from kvbudget.engines.base import EngineOptions, Layout
from kvbudget.engines.capability import compute_capability, flashinfer_runs
from kvbudget.engines.contract import EngineRules, yarn_override
from kvbudget.engines.nccl_memory import nvls_bytes
from kvbudget.engines.overhead import Overhead, Site, activation_overhead, dims, plus
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
    logged_sum,
)
from kvbudget.engines.vllm_config import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_CAPABILITY,
    DEFAULT_VERSION,
    NAME,
    accepted_dtypes,
    default_prefix_caching,
    fa4_hd256,
    mla_backend,
)
from kvbudget.engines.vllm_encoder import encoder_pass
from kvbudget.engines.vllm_layout import layout, pool
from kvbudget.engines.vllm_pool import (
    VllmPool,
    check_admission,
    estimate_max_model_len,
    kv_cache_size_tokens,
    max_concurrency,
    num_blocks,
    report_lines,
)
from kvbudget.engines.vllm_profile import (
    V0_SEQUENCES,
    chosen_sampler,
    model_runner_v2,
    profile_sampler,
    profiled_overhead,
    sampler_path,
    v0_profiled_overhead,
)
from kvbudget.errors import EngineRefusalError, InputError
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import CacheDType, parse_cache_dtype

if TYPE_CHECKING:
    from collections.abc import Callable

    from kvbudget.engines.metrics import EngineMetrics
    from kvbudget.engines.records import PoolShape
    from kvbudget.measure.logs.record import EngineLog

# The rules live in vllm_config (defaults, accepted dtypes, attention backend and block size, prefix caching,
# Mamba pages), vllm_layout (bytes per sequence, the pool plan) and vllm_pool (the block pool); their public names
# stay importable from here.
__all__ = [
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_GPU_CAPABILITY",
    "DEFAULT_VERSION",
    "NAME",
    "Rules",
    "VllmPool",
    "accepted_dtypes",
    "check_admission",
    "default_prefix_caching",
    "estimate_max_model_len",
    "fa4_hd256",
    "kv_cache_size_tokens",
    "layout",
    "max_concurrency",
    "mla_backend",
    "num_blocks",
    "pool",
    "report_lines",
]


# Cache dtype names of vLLM's --kv-cache-dtype, by kvbudget's name; anything else is "auto".
_SERVE_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2", "nvfp4", "int8_per_token_head", "fp8_per_token_head")


class Rules(EngineRules):
    """vLLM V1: a share of the total memory, blocks sized for the admission worst case, prefix caching by blocks."""

    name = NAME
    title = "vLLM"
    default_version = DEFAULT_VERSION
    order = 10
    below: ClassVar[Mapping[str, str]] = {"0.26": "0.25.0", "0.21": "0.20.0"}
    server = True
    divides_heads = True
    memory_fraction = "gpu_memory_utilization"
    cheaper_kv_dtypes = ("fp8",)
    logs_version = True
    quantizes_at_load = ("fp8",)  # --quantization fp8 on a 16-bit checkpoint
    # vLLM V1 core/sched: a finished request frees its blocks into the prefix cache (evictable, LRU); the session's
    # next step is a new request that hits them if nothing evicted them; preemption recomputes
    sim_pause = "evictable"
    sim_basis = (
        "vLLM frees a finished step's blocks into its prefix cache (evictable, LRU) and the next step reuses them "
        "if still cached; preemption recomputes"
    )
    concurrency_flag = "--max-num-seqs"
    running_option = "--max-num-seqs"
    eager_flag = "--enforce-eager"  # the overhead's CUDA-graph term is 0 (vllm_memory.EAGER_WORDS)
    reads_flashinfer_sampler = True  # the dummy sampler run's path (vllm_profile.chosen_sampler)

    def alert_metrics(self) -> EngineMetrics | None:
        from kvbudget.engines.metrics import VLLM

        return VLLM

    def layout(self, spec: ModelSpec, k: CacheDType, v: CacheDType, tp: int, options: EngineOptions) -> Layout:
        return layout(spec, k, v, tp, options, self.version)

    def usable_share(self, m: MemoryShape) -> Share:
        return vllm_memory.usable_share(m.total_bytes, m.utilization, self.version)

    def served_dtype(self, spec: ModelSpec, capability: int | None) -> tuple[str, str]:
        # vLLM 0.33 config/model.py _resolve_auto_dtype: a float32 checkpoint runs in the platform's first
        # supported dtype (bf16 from compute capability 8.0, else fp16); bf16 falls back to fp16 below 8.0
        name = parse_cache_dtype(spec.dtype, what="model dtype").name
        old_gpu = capability is not None and capability < 80
        if name == "fp32":
            dtype = "fp16" if old_gpu else "bf16"
            return dtype, f"vLLM runs this float32 checkpoint in {dtype} (dtype auto: the GPU's preferred dtype)"
        if name == "bf16" and old_gpu:
            return "fp16", "vLLM falls back from bf16 to fp16 on a GPU below compute capability 8.0"
        return spec.dtype, ""

    def batched_tokens(
        self, total_bytes: int, gpu_label: str, options: EngineOptions, context: int = 0
    ) -> tuple[int, str]:
        capability = compute_capability(gpu_label)
        return vllm_memory.batched_tokens(total_bytes, gpu_label, self.version, context, capability)

    def derived_options(self, options: EngineOptions, batched: int, capability: int | None) -> EngineOptions:
        # the batch that sliding windows reserve, and the GPU generation that picks the attention backend
        return replace(
            options,
            max_num_batched_tokens=options.max_num_batched_tokens or batched,
            gpu_capability=options.gpu_capability or capability,
        )

    def overhead(self, spec: ModelSpec, site: Site) -> Overhead:
        estimate = self._overhead(spec, site)
        if not site.enforce_eager:
            return estimate
        return replace(estimate, basis=f"{estimate.basis}; {vllm_memory.EAGER_WORDS}")

    def _overhead(self, spec: ModelSpec, site: Site) -> Overhead:
        # --enforce-eager: VllmConfig sets cudagraph_mode NONE, so no graphs are captured and (from 0.20) no
        # estimate of them is subtracted (EAGER_WORDS)
        graphs = vllm_memory.subtracts_graphs(self.version) and not site.enforce_eager
        # NCCL's NVLS buffers at TP > 2 on NVSwitch boards are non-torch memory vLLM subtracts (nccl_memory.py)
        nvls, nvls_words = nvls_bytes(site.tp, site.interconnect, self.version)
        if vllm_memory.runs_v0(self.version, compute_capability(site.gpu_label)):
            if site.flashinfer_sampler:
                raise InputError(
                    f"--flashinfer-sampler: vLLM {self.version} runs its V0 engine here, whose profile kvbudget models "
                    "with the sorting sampler only; drop it, or plan vLLM's V1 engine (0.8 or later on SM 8.0+)"
                )
            # V0 SchedulerConfig: max_num_seqs 256 unless set; one logits row per dummy sequence
            v0 = v0_profiled_overhead(
                spec,
                tp=site.tp,
                batched=site.batched,
                batched_basis=site.batched_basis,
                seqs=site.max_num_seqs or V0_SEQUENCES,
            )
            return plus(v0, nvls, nvls_words)
        if not site.gpu_memory:
            return activation_overhead(
                spec, tp=site.tp, batched=site.batched, batched_basis=site.batched_basis, graphs=graphs
            )
        seqs, seqs_basis = vllm_memory.running_limit(site.max_num_seqs, site.gpu_memory, site.gpu_label)
        flashinfer = flashinfer_runs(site.gpu_label)  # FlashInfer's kernels can run here (not ROCm, SM 7.5+)
        default_seqs = vllm_memory.max_num_seqs(site.gpu_memory, site.gpu_label)[0]
        profiled = profiled_overhead(
            spec,
            tp=site.tp,
            batched=site.batched,
            batched_basis=site.batched_basis,
            seqs=seqs,
            seqs_basis=seqs_basis,
            graphs=graphs,
            sampler=profile_sampler(
                self.version,
                spec,
                site.quantized,
                chosen_sampler(self.version, site.flashinfer_sampler, flashinfer),
            ),
            default_seqs=default_seqs,
            capability=compute_capability(site.gpu_label),
            encoder=encoder_pass(
                spec.config,
                spec.model_type,
                dims(spec)[0],
                version=self.version,
                context=site.context or spec.max_position_embeddings or 0,
                batched=site.batched,
                tp=site.tp,
            ),
            pp=site.pp,
        )
        if not flashinfer and sampler_path(self.version) in ("flashinfer", "flashinfer if installed"):
            profiled = replace(
                profiled,
                basis=f"{profiled.basis}; FlashInfer does not run on this GPU (an AMD GPU on ROCm, or below SM 7.5), "
                "so vLLM samples with its own path",
            )
        if site.flashinfer_sampler is not None and model_runner_v2(self.version, spec, site.quantized):
            profiled = replace(
                profiled,
                basis=f"{profiled.basis}; --flashinfer-sampler changes nothing here: Model Runner V2's dummy run "
                "samples greedily, with no top-k/top-p path",
            )
        if vllm_memory.whole_device_non_torch(self.version):
            profiled = replace(
                profiled,
                basis=f"{profiled.basis}; vLLM {self.version} counts as non-torch memory all the GPU holds outside its "
                "torch allocations (its CUDA context, other processes): on a shared GPU the pool is smaller by what "
                "else is on it (vllm_memory.WHOLE_DEVICE_NON_TORCH)",
            )
        return plus(profiled, nvls, nvls_words)

    def sessions(self, d: Deployment, warnings: list[str]) -> int:
        """The sessions the pool holds, at most --max-num-seqs running: vLLM's scheduler stops admitting at
        max_num_running_reqs = max_num_seqs (v1/core/sched/scheduler.py schedule(): the waiting loop breaks when
        len(self.running) == self.max_num_running_reqs); the rest wait. Unset, the plan keeps the pool's count (the
        default, 256 or 1,024, is above it on most plans; kvbudget speed applies it)."""
        limit = d.options.max_num_seqs
        if limit is not None and limit < d.sessions:
            warnings.append(
                f"vLLM runs at most {limit:,} sequences at once (--max-num-seqs {limit:,}): the KV pool holds "
                f"{d.sessions:,} sessions of {d.context:,} tokens; {limit:,} running, the rest wait"
            )
            return limit
        return d.sessions

    def running_limit(self, d: Deployment, gpu_memory: int, gpu_label: str) -> RunningLimit | None:
        """--max-num-seqs as set, else vLLM's default for the GPU: the scheduler stops taking waiting requests at
        max_num_running_reqs = max_num_seqs (vLLM 0.33.0 vllm/v1/core/sched/scheduler.py schedule(): ``if
        len(self.running) == self.max_num_running_reqs: break``; V0 vllm/core/scheduler.py _schedule_prefills stops
        at scheduler_config.max_num_seqs, 256 unless set)."""
        given = d.options.max_num_seqs
        if given is None and vllm_memory.runs_v0(self.version, compute_capability(gpu_label)):
            return RunningLimit(V0_SEQUENCES, f"vLLM V0 default max_num_seqs {V0_SEQUENCES}", "exact")
        seqs, why = vllm_memory.running_limit(given, gpu_memory, gpu_label)
        return RunningLimit(seqs, why, "exact" if given is None else "given")

    def shared_prefix(self, prefix: int, block: int | None, unified: bool = False) -> tuple[int, str]:
        # vLLM automatic prefix caching hashes whole blocks only (vllm/v1/core/kv_cache_utils.py hash_block_tokens)
        b = block or DEFAULT_BLOCK_SIZE
        return prefix // b * b, f"vLLM prefix caching shares whole {b}-token blocks"

    def start_up(self, d: Deployment) -> StartUp:
        vpool = pool(d.spec, d.k, d.v, d.tp, d.options, self.version)
        checked = vpool
        if d.options.chunked_hybrid is None and vllm_memory.chunked_hybrid_off_by_default(self.version):
            # 0.10.1-0.13 kv_cache_utils.py: get_kv_cache_config(s) runs check_enough_kv_cache_memory on the layers'
            # own specs (chunked local: chunk + batch tokens) before get_kv_cache_groups unifies them to full
            # attention, so the engine starts where one request at the cap fits only with the chunked layers
            checked = pool(d.spec, d.k, d.v, d.tp, replace(d.options, chunked_hybrid=True), self.version)
        try:
            check_admission(checked, d.pool_bytes, d.context)
        except EngineRefusalError as refusal:
            # vLLM stops before the capacity line: the refusal (and its estimated length) is what it prints
            return StartUp((str(refusal),), 0, f"vLLM {self.version} refuses to start (admission check)", True)
        backend = (
            f"; MLA backend {vpool.attention_backend} assumed for compute capability "
            f"{(d.options.gpu_capability or DEFAULT_GPU_CAPABILITY) / 10:.1f}"
            if vpool.attention_backend
            else ""
        )
        return StartUp(
            report_lines(vpool, d.pool_bytes, d.context),
            kv_cache_size_tokens(vpool, d.pool_bytes, d.context),
            f'vLLM {self.version} "GPU KV cache size" ({num_blocks(vpool, d.pool_bytes):,} blocks of '
            f"{vpool.block_size or d.context:,} tokens{backend}; "
            f"prefix caching {'on' if vpool.prefix_caching else 'off'})",
        )

    def printed_capacity(
        self, shape: PoolShape, pool_bytes: int, token_budget: Callable[[], int], generation: str | None
    ) -> dict[str, int]:
        """vLLM get_num_blocks and _report_kv_cache_config (kv_cache_utils.py), before any admission check; V0
        (worker.py) states tokens only in its refusal: num_gpu_blocks x block_size."""
        vpool = pool(shape.spec, shape.k, shape.v, shape.tp, shape.options, self.version)
        blocks = num_blocks(vpool, pool_bytes)
        if generation == "V0":
            return {"kv_blocks": blocks, "kv_tokens": blocks * vpool.min_block_size}
        return {"kv_blocks": blocks, "kv_tokens": kv_cache_size_tokens(vpool, max(pool_bytes, 0), shape.context)}

    def logged_memory(self, log: EngineLog) -> LoggedMemory:
        """total_gpu_memory; overhead = activation peak + non-torch memory, + CUDA graphs where V1 >= 0.20
        subtracts them (gpu_worker.py)."""
        total = log.measured.get("total_gpu_memory_bytes")
        gpu = (
            Measured(int(total.value), f"measured: CUDA total as vLLM saw it, {log_line(log, total)}")
            if total
            else None
        )
        names: tuple[str, ...] = ("activation_peak_bytes", "non_torch_bytes")
        if log.generation == "V1" and vllm_memory.subtracts_graphs(self.version):
            names += ("cuda_graph_bytes",)
        # the pool: "Available KV cache memory" (V1 gpu_worker.py, per worker; the smallest governs) or V0's
        # kv_cache_size / available_kv_cache_memory / "reserved for KV Cache is" (worker.py)
        pool = log.measured.get("available_kv_bytes")
        if all(n in log.measured for n in names[:2]):
            return LoggedMemory(gpu, logged_sum(log, names), kv_pool=pool)
        return LoggedMemory(gpu, None, kv_pool=pool)

    def serve_command(self, s: ServeSettings) -> tuple[str, ...]:
        args = ["vllm", "serve", s.model, "--max-model-len", str(s.context)]
        if s.overhead_measured:
            # measured overhead: hand vLLM the KV size directly instead of a fraction (skips profiling)
            args += ["--kv-cache-memory-bytes", str(s.kv_pool_bytes)]
        elif s.fraction is not None:
            args += ["--gpu-memory-utilization", str(s.fraction)]
        args += ["--kv-cache-dtype", s.k.name if s.k.name in _SERVE_DTYPES else "auto"]
        # --max-num-seqs only as given: vLLM admits by free blocks, so sessions shorter than the cap run more than
        # the worst-case count; the plan's explanation says how to cap it (render/plan.py)
        if s.options.max_num_seqs is not None:
            args += ["--max-num-seqs", str(s.options.max_num_seqs)]
        if s.options.block_size:
            args += ["--block-size", str(s.options.block_size)]
        if s.options.max_num_batched_tokens:
            args += ["--max-num-batched-tokens", str(s.options.max_num_batched_tokens)]
        if s.options.enforce_eager:
            args.append("--enforce-eager")
        if s.options.prefix_caching is False:
            args.append("--no-enable-prefix-caching")
        elif s.prefix:
            args.append("--enable-prefix-caching")
        if s.tp > 1:
            args += ["--tensor-parallel-size", str(s.tp)]
        if s.pp > 1:
            args += ["--pipeline-parallel-size", str(s.pp)]
        if s.quantize == "fp8":  # vLLM quantizes a 16-bit checkpoint to fp8 at load (--quantization fp8)
            args += ["--quantization", "fp8"]
        # the plan kept Llama 4's chunk (--chunked-hybrid): vLLM 0.10.1-0.13 does so only with this variable set
        env: tuple[str, ...] = (
            ("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1",) if s.options.chunked_hybrid else ()
        )
        # the sampler the plan's profile took (with flashinfer-python installed)
        if s.options.flashinfer_sampler is not None:
            env += (f"VLLM_USE_FLASHINFER_SAMPLER={int(s.options.flashinfer_sampler)}",)
        if s.past_native:
            # vLLM refuses --max-model-len past the config's window unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1
            # (config/model.py); YaRN rope scaling over the trained window is what lets the model use it
            return (*env, "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1", *args, "--hf-overrides", s.yarn_override)
        return (*env, *args)

    def past_window(self, context: int, native: int) -> str:
        # vLLM 0.33 config/model.py: a max_model_len past the derived one is an error unless
        # VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; rope scaling comes from the config, overridable by --hf-overrides
        return (
            f"vLLM {self.version} refuses --max-model-len {context} unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and the "
            f"model needs rope scaling over its window: --hf-overrides '{yarn_override(context, native)}'"
        )
