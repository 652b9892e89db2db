"""Text of ``kvbudget speed``: the figures a benchmark prints, then how the model got them."""

from __future__ import annotations

import textwrap

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.speed.answer import Speed


def render_speed(s: Speed) -> str:
    step, e = s.step, s.efficiency
    lines = [
        f"{s.model} on {s.gpus:,} x {s.gpu} (tp {s.tp}, {s.replicas:,} replica{'s' if s.replicas != 1 else ''}), "
        f"{s.engine['name']} {s.engine['version']}".rstrip(),
        "computed: roofline with fitted efficiencies",
        f"shape: {s.isl:,} prompt + {s.osl:,} output tokens, {s.concurrency:,} in flight "
        f"({s.batch:,} running per replica{f', {s.queued:,} waiting' if s.queued else ''})",
        *([f"prefix cache: {s.prefix:,} prompt tokens per request not recomputed"] if s.prefix else []),
        "",
        f"  output throughput     {s.output_tokens_per_s:>12,.0f} tokens/s"
        f"  ({s.output_tokens_per_s_per_gpu:,.0f} per GPU)",
        f"  per request decode    {s.decode_tokens_per_s_per_request:>12,.1f} tokens/s",
        f"  prefill               {s.prefill_tokens_per_s:>12,.0f} tokens/s",
        f"  TTFT                  {s.ttft_s * 1000:>12,.1f} ms  (own prefill + one iteration"
        + (f" + wait {s.ttft_wait_s * 1000:,.1f} ms)" if s.ttft_wait_s else ", no wait)"),
        f"  inter-token latency   {s.itl_s * 1000:>12,.2f} ms  (mean, prefills of others included)",
        f"  binding               {s.binding}",
        "",
        f"decode iteration {step.seconds * 1000:,.2f} ms: memory {step.memory_s * 1000:,.2f} ms "
        f"({step.bytes / 1e9:,.2f} GB per GPU), compute {step.compute_s * 1000:,.2f} ms,",
        f"  fixed {step.overhead_s * 1000:,.2f} ms, all-reduce {step.allreduce_s * 1000:,.2f} ms",
        f"cycle {s.cycle_s:,.2f} s = prefill {s.prefill_s:,.2f} s + {s.osl:,} iterations",
        *[f"compute: {part}" if i == 0 else f"  {part}" for i, part in enumerate(s.compute_basis.split("; "))],
        f"efficiencies: prefill {e.prefill:.3f} (bf16 {e.prefill_bf16:.3f}), attention {e.prefill_attention:.3f} "
        f"of bf16, decode compute {e.decode_compute:.3f},",
        f"  bandwidth {e.bandwidth:.3f}, {e.step_overhead_s * 1000:.2f} ms per iteration, "
        f"{e.allreduce_latency_s * 1e6:.1f} us per all-reduce, prefill queue x{e.prefill_queue:.2f} of M/M/1",
        *(
            [f"  {e.sequence_s * 1e6:.0f} us per running sequence per iteration, {e.request_s * 1000:.1f} ms a request"]
            if e.sequence_s or e.request_s
            else []
        ),
        *([f"  {e.moe_layer_overhead_s * 1e6:.0f} us per MoE layer per iteration"] if e.moe_layer_overhead_s else []),
        *([f"  prefill shares x{e.prefill_a100:.2f} on the A100 (and A800)"] if e.prefill_a100 != 1 else []),
        *_sources(s.engine["name"], e.borrowed),
        "not modelled:",
        *[f"  {item}" for item in s.not_modelled],
        *[line for w in s.warnings for line in textwrap.wrap(f"warning: {w}", 100, subsequent_indent="  ")],
    ]
    return "\n".join(lines)


def _sources(engine: str, borrowed: tuple[str, ...]) -> list[str]:
    """Where the efficiencies come from: the engine's own fit (docs/speed.md), and what it borrows."""
    head = "sources: datasheet peaks and bandwidth (kvbudget gpus --json), efficiencies fitted to "
    if engine == "trtllm":
        return [head + "TensorRT-LLM's", "  published throughput and latency and NIM's TTFT / ITL (docs/speed.md)"]
    if engine in ("vllm", "sglang"):
        own = "vLLM's" if engine == "vllm" else "SGLang's"
        return [
            head + own,
            "  published throughput and latency (GPUStack performance lab, docs/speed.md)",
            *textwrap.wrap(
                f"borrowed from TensorRT-LLM's fit: {', '.join(borrowed)}",
                100,
                initial_indent="  ",
                subsequent_indent="    ",
            ),
        ]
    return [
        head + "TensorRT-LLM's",
        f"  published throughput and latency and NIM's TTFT / ITL (docs/speed.md); none fitted to {engine} yet",
    ]
