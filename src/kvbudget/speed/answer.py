"""``kvbudget speed``: one request shape on one deployment, answered as a benchmark run of it would measure it.

The deployment's memory comes from the plan (its KV pool gives ``concurrency max``: as many sequences of
isl + osl tokens as it holds); its time from the roofline (speed/roofline.py) with the fitted efficiencies
(speed/efficiency.py). In steady state each request in flight goes through one prefill and ``osl`` decode
iterations, so one cycle of the ``B`` sequences a replica runs takes

    T = prefill(B prompts) + osl x decode iteration(B sequences at isl + osl/2 tokens)

and a replica outputs B x osl tokens per T. Not modelled: speculative decoding, chunked-prefill overlap of
prefill with decode (prefill and decode add up here), pipeline parallelism, expert parallelism and attention
data parallelism, CPU-bound tokenization, and the queue of an arrival process (``kvbudget simulate``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvbudget.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.hardware import Gpu
    from kvbudget.model.spec import ModelSpec
    from kvbudget.plan.plan import Plan
    from kvbudget.requests.plan import Deployment
    from kvbudget.requests.speed import SpeedRequest
    from kvbudget.speed.efficiency import Efficiency
    from kvbudget.speed.roofline import Roofline, Step


@dataclass(frozen=True)
class Speed:
    """The answer of ``kvbudget speed``; ``to_dict()`` is its --json document."""

    model: str
    engine: dict[str, str]
    gpu: str
    gpus: int
    tp: int
    replicas: int
    isl: int
    osl: int
    prefix: int
    concurrency: int  # in flight over the deployment
    batch: int  # running per replica
    queued: int  # asked beyond what the KV pool holds (wait, not run)
    compute_precision: str
    compute_basis: str
    output_tokens_per_s: float
    output_tokens_per_s_per_gpu: float
    decode_tokens_per_s_per_request: float
    prefill_tokens_per_s: float
    ttft_s: float
    ttft_wait_s: float
    itl_s: float
    cycle_s: float
    prefill_s: float
    step: Step
    binding: str
    efficiency: Efficiency
    basis: tuple[str, ...]
    not_modelled: tuple[str, ...]
    warnings: tuple[str, ...]

    def to_dict(self) -> dict[str, object]:
        s = self.step
        return {
            "schema_version": 1,
            "model": self.model,
            "engine": self.engine,
            "gpu": self.gpu,
            "gpus": self.gpus,
            "tp": self.tp,
            "replicas": self.replicas,
            "isl": self.isl,
            "osl": self.osl,
            "prefix": self.prefix,
            "concurrency": self.concurrency,
            "batch_per_replica": self.batch,
            "queued": self.queued,
            "compute_precision": self.compute_precision,
            "compute_basis": self.compute_basis,
            "provenance": "computed",
            "output_tokens_per_s": round(self.output_tokens_per_s, 3),
            "output_tokens_per_s_per_gpu": round(self.output_tokens_per_s_per_gpu, 3),
            "decode_tokens_per_s_per_request": round(self.decode_tokens_per_s_per_request, 3),
            "prefill_tokens_per_s": round(self.prefill_tokens_per_s, 3),
            "ttft_s": round(self.ttft_s, 6),
            "ttft_wait_s": round(self.ttft_wait_s, 6),
            "itl_s": round(self.itl_s, 6),
            "cycle_s": round(self.cycle_s, 6),
            "prefill_s": round(self.prefill_s, 6),
            "decode_step": {
                "seconds": round(s.seconds, 6),
                "memory_s": round(s.memory_s, 6),
                "compute_s": round(s.compute_s, 6),
                "overhead_s": round(s.overhead_s, 6),
                "allreduce_s": round(s.allreduce_s, 6),
                "bytes_per_gpu": int(s.bytes),
                "flops_per_gpu": int(s.flops),
                "bound": s.bound,
            },
            "binding": self.binding,
            "efficiency": self.efficiency.to_dict(),
            "basis": list(self.basis),
            "not_modelled": list(self.not_modelled),
            "warnings": list(self.warnings),
        }


NOT_MODELLED = (
    "speculative decoding",
    "chunked prefill overlapping decode (prefill and decode times add)",
    "pipeline, expert and attention-data parallelism",
    "queueing of an arrival process (kvbudget simulate)",
    "CPU-side tokenization and detokenization",
)


def read_concurrency(text: str) -> int | None:
    """``max`` (None) or a count of requests in flight."""
    from kvbudget.requests.values import read_count

    if text.strip().lower() == "max":
        return None
    try:
        return read_count(text, "--concurrency")
    except InputError as error:
        raise InputError(f"{error}; give a count of requests in flight (64) or max") from None


def compute_precision(spec: ModelSpec, weights: str | None, gpu: Gpu, group: int) -> tuple[str, str, str]:
    """The precision the engine multiplies in, the weights' product format, and why: fp8 / fp4 weights on tensor
    cores that have the format multiply at it; on a GPU without them (A100, A30, A40: vLLM runs fp8 checkpoints
    through Marlin's weight-only W8A16 kernels) at bf16, weight-only, at the share ``Roofline.prefill_efficiency``
    gives such products: the GPU gains from their fewer bytes, never from the format's compute. Anything else is a
    bf16 product (weight-only int quantization widened before the product)."""
    from kvbudget.weights.checkpoint import checkpoint_precision
    from kvbudget.weights.precision import weight_precision

    if weights:
        name = weight_precision(weights, group_size=group, what="--weights").name
    else:
        shipped = checkpoint_precision(spec)
        name = shipped.precision.name if shipped else spec.dtype
    wanted = "fp8" if "fp8" in name else "fp4" if "fp4" in name else "bf16"
    if gpu.peak_flops(wanted) is not None:
        return wanted, wanted, f"{name} weights multiplied at {wanted} on {gpu.id}"
    return (
        "bf16",
        wanted,
        f"{name} weights: {gpu.id} has no {wanted} tensor cores, multiplied at bf16 (weight-only), no faster than a "
        f"bf16 product nor than a GPU with {wanted} tensor cores",
    )


def roofline_of(request: Deployment, plan: Plan, gpu: Gpu, efficiency: Efficiency) -> tuple[Roofline, str, str]:
    """The roofline of one replica of ``plan`` on ``gpu``, its compute precision and why."""
    from kvbudget import hardware
    from kvbudget.speed.roofline import Machine, Roofline
    from kvbudget.speed.work import model_work
    from kvbudget.weights.params import count_params

    spec = plan.inputs.spec
    precision, products, why = compute_precision(spec, request.weights, gpu, request.group_size)
    link = hardware.link(gpu.interconnect or request.link)
    count = count_params(spec)
    machine = Machine(
        linear_flops=gpu.peak_flops(precision) or 0.0,
        attention_flops=gpu.peak_flops("bf16") or 0.0,
        bandwidth=float(gpu.bandwidth_bytes_per_s or 0),
        link=float(link.bytes_per_s),
        tp=request.tp,
        products=products,
        native=products == precision,
        gpu=gpu.id,
    )
    roof = Roofline(
        work=model_work(spec, count),
        machine=machine,
        efficiency=efficiency,
        weights_per_gpu=plan.weights_per_gpu,
        total_params=count.total,
        kv_bytes=plan.layout.total_bytes,
    )
    return roof, precision, f"{why}; tensor-parallel link {link.id} {link.bytes_per_s / 1e9:g} GB/s per direction"


def speed_gpu(request: Deployment) -> Gpu:
    """The catalog GPU of ``request``, with the datasheet figures the roofline needs (else an InputError)."""
    from kvbudget import hardware

    if not request.gpu:
        raise InputError("--gpu: the speed model needs a catalog GPU (peak FLOPs, bandwidth); see kvbudget gpus")
    gpu = hardware.gpu(request.gpu)
    if not gpu.dense_tflops or not gpu.bandwidth_bytes_per_s:
        raise InputError(
            f"--gpu {request.gpu}: the catalog has no datasheet compute figures for {gpu.id} yet; "
            "give one that `kvbudget gpus` lists with dense_tflops"
        )
    return gpu


def estimate_speed(request: SpeedRequest) -> Speed:
    """Throughput, latency and the binding resource of one request shape (``kvbudget speed``)."""
    from kvbudget.plan.build import plan_deployment
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.plan import PlanRequest
    from kvbudget.speed.efficiency import efficiency_for

    if request.pp != 1:
        raise InputError("--pp: the speed model covers tensor parallelism only (no pipeline bubbles); give --pp 1")
    asked = read_concurrency(request.concurrency)
    gpu = speed_gpu(request)
    if request.prefix and request.prefix >= request.isl:
        raise InputError(f"--prefix {request.prefix:,}: give fewer than --isl {request.isl:,} (one token is computed)")
    plan = plan_deployment(narrowed(PlanRequest, request, context=request.isl + request.osl, prefix=None))
    if plan.sessions < 1:
        raise InputError(
            f"{request.model} on {gpu.id}: no sequence of {request.isl + request.osl:,} tokens fits the KV pool "
            "(see kvbudget plan); give more --tp or GPUs, or shorter --isl/--osl"
        )
    engine = plan.inputs.engine
    efficiency = efficiency_for(engine.name)
    roof, precision, why = roofline_of(request, plan, gpu, efficiency)
    return _answer(request, plan, gpu, roof, precision, why, asked)


def _answer(
    request: SpeedRequest, plan: Plan, gpu: Gpu, roof: Roofline, precision: str, why: str, asked: int | None
) -> Speed:
    replicas, warnings = plan.replicas, list(plan.warnings)
    held, limit_why = running_limit(plan)
    if held < plan.sessions:
        warnings.append(f"the engine runs at most {held:,} sequences at once ({limit_why}); the KV pool holds more")
    if asked is None:
        batch = held
        concurrency, queued = batch * replicas, 0
    else:
        per_replica = math.ceil(asked / replicas)
        batch = min(per_replica, held)
        concurrency, queued = asked, max(0, asked - held * replicas)
        if queued:
            warnings.append(
                f"{asked:,} in flight asked, the engine holds {held * replicas:,} sequences of "
                f"{request.isl + request.osl:,} tokens: {queued:,} wait (their wait is not in the TTFT)"
            )
    figures = run_shape(roof, request.isl, request.osl, request.prefix or 0, batch)
    prefill_s, step, cycle = figures
    new = request.isl - (request.prefix or 0)
    # a closed loop that the engine does not queue (every asked request running) leaves its slot idle for the
    # request's fixed cost between one answer and the next prompt; a queued or offline run refills it at once
    idle = roof.efficiency.request_s if asked is not None and not queued else 0.0
    total = replicas * batch * request.osl / (cycle + idle)
    itl = cycle / request.osl
    own = roof.prefill_seconds(new, request.prefix or 0, 1)
    wait = prefill_wait(own, prefill_s / cycle, batch, roof.efficiency.prefill_queue)
    ttft = roof.efficiency.request_s + own + step.seconds + wait
    decode_s = request.osl * step.seconds
    binding = (
        f"prefill compute ({prefill_s / cycle:.0%} of the cycle)"
        if prefill_s >= decode_s
        else f"decode {step.bound} ({decode_s / cycle:.0%} of the cycle)"
    )
    engine = plan.inputs.engine
    return Speed(
        model=plan.inputs.spec.name,
        engine={"name": engine.name, "version": engine.version},
        gpu=gpu.id,
        gpus=plan.inputs.gpus,
        tp=request.tp,
        replicas=replicas,
        isl=request.isl,
        osl=request.osl,
        prefix=request.prefix or 0,
        concurrency=concurrency,
        batch=batch,
        queued=queued,
        compute_precision=precision,
        compute_basis=why,
        output_tokens_per_s=total,
        output_tokens_per_s_per_gpu=total / plan.inputs.gpus,
        decode_tokens_per_s_per_request=1 / itl,
        prefill_tokens_per_s=replicas * batch * new / prefill_s if prefill_s else 0.0,
        ttft_s=ttft,
        ttft_wait_s=wait,
        itl_s=itl,
        cycle_s=cycle,
        prefill_s=prefill_s,
        step=step,
        binding=binding,
        efficiency=roof.efficiency,
        basis=(
            f"peaks: {gpu.compute_source}",
            f"bandwidth: {gpu.bandwidth_bytes_per_s / 1e12:g} TB/s ({gpu.source})" if gpu.bandwidth_bytes_per_s else "",
            f"batch: {'the KV pool at isl + osl (kvbudget plan)' if asked is None else 'the asked concurrency'}",
            f"efficiencies: {roof.efficiency.basis}",
        ),
        not_modelled=NOT_MODELLED,
        warnings=tuple(warnings),
    )


def running_limit(plan: Plan) -> tuple[int, str]:
    """The most sequences one replica runs at once: what its KV pool holds, capped by the engine's own limit on
    running requests (``Plan.running_limit``: vLLM's max_num_seqs as set or its default, SGLang's
    max_running_requests, TensorRT-LLM's max_batch_size), the limit the simulator admits by too."""
    limit = plan.running_limit()
    if limit is None or limit.requests >= plan.sessions:
        return plan.sessions, "the KV pool"
    return limit.requests, limit.basis


def prefill_wait(own_s: float, busy: float, batch: int, factor: float) -> float:
    """Mean seconds a request's prompt waits for the other requests' prefills in steady state.

    Each of the ``batch`` requests prefills once a cycle, so prefill takes ``busy`` of the cycle, ``busy x (batch -
    1) / batch`` of it the others'. A prompt that finds one running waits for it: the M/M/1 mean wait is
    others' share x own prefill / (1 - busy); ``factor`` (fitted, ``Efficiency.prefill_queue``) scales it (0.5
    would be a deterministic service, M/D/1). Heuristic: fitted to NIM's TTFT at concurrency 1 and 25 (docs/speed.md).
    """
    if batch <= 1 or busy <= 0 or factor <= 0:
        return 0.0
    others = busy * (batch - 1) / batch
    return factor * others * own_s / max(1.0 - busy, 0.05)


def run_shape(roof: Roofline, isl: int, osl: int, prefix: int, batch: int) -> tuple[float, Step, float]:
    """Prefill seconds of ``batch`` prompts, the mean decode iteration and the cycle seconds (module doc)."""
    new = isl - prefix
    prefill_s = roof.prefill_seconds(new, prefix, batch)
    step = roof.decode_step(batch, isl + osl // 2)
    return prefill_s, step, prefill_s + osl * step.seconds
