"""llama.cpp's compute buffer: the peak of the worst-case graph it reserves at start-up.

llama_context reserves one graph of ``n_ubatch`` tokens with every token an output and the whole cache in
view (src/llama-context.cpp ``graph_reserve``), and ggml-alloc reuses memory between tensors that are not
alive at once (ggml/src/ggml-alloc.c), so the buffer is the largest set of f32 tensors alive at one point:

* **the output head**: the logits of every ubatch token (``n_ubatch x n_vocab`` f32) beside the final
  hidden state (``n_ubatch x n_embd`` f32);
* **attention without flash attention**: the scores ``kq`` (``n_kv x n_ubatch x n_head`` f32, src/llama-graph.cpp
  ``build_attn_mha``: ``ggml_mul_mat(k, q)`` then an in-place soft_max) and the f32 mask ``kq_mask``
  (``n_kv x n_ubatch``), beside four ``n_ubatch x n_embd`` f32 activations (the layer input, Q, the attention
  output and the residual); with flash attention the scores are never materialised;
* **the feed-forward**: gate and up (``2 x n_ubatch x n_ff`` f32) beside the hidden state.

``n_kv`` is one stream's cells: with one stream per sequence, the ubatch's tokens are split across the
streams, so the scores total ``n_ctx_seq x n_ubatch x n_head`` whatever the stream count. The shapes are
read from the graph code; the figure is checked against the CUDA0 compute buffers that llama.cpp logged
(tests/data/memory/llamacpp_logs.csv: 300.75, 300.75, 164.00 and 2144.00 MiB, each matched to the MiB).
"""

from __future__ import annotations

from kvbudget.engines.overhead import Overhead, dims
from kvbudget.model.spec import ModelSpec

F32 = 4
ACTIVATIONS = 4  # n_ubatch x n_embd f32 tensors alive beside the scores: input, Q, attention output, residual


def _heads(spec: ModelSpec) -> int:
    value = spec.config.get("num_attention_heads", 32)
    return value if isinstance(value, int) and value > 0 else 32


def compute_buffer_terms(spec: ModelSpec, *, ubatch: int, n_kv: int, flash_attn: bool) -> dict[str, int]:
    """The bytes of each candidate peak (the buffer is the largest)."""
    hidden, inter, vocab = dims(spec)
    terms = {
        "output head": ubatch * (vocab + hidden) * F32,
        "feed-forward": ubatch * (2 * inter + hidden) * F32,
    }
    if not flash_attn and n_kv > 0:
        terms["attention scores"] = ubatch * n_kv * (_heads(spec) + 1) * F32 + ACTIVATIONS * ubatch * hidden * F32
    return terms


def compute_buffer(spec: ModelSpec, *, ubatch: int, n_kv: int, flash_attn: bool, what: str) -> Overhead:
    """The CUDA0 compute buffer of a fully offloaded model (one GPU), as a heuristic with its range."""
    terms = compute_buffer_terms(spec, ubatch=ubatch, n_kv=n_kv, flash_attn=flash_attn)
    name, peak = max(terms.items(), key=lambda item: item[1])
    # the range: the shapes leave out small tensors (norm weights' broadcasts, rope caches); the logged buffers
    # sat 0-1% above the largest term, so the plan reserves 5% over it
    high = peak + peak // 20
    basis = (
        f"heuristic: {what} compute buffer, the peak of its reserved graph for a ubatch of {ubatch:,} tokens: "
        f"{name} ({', '.join(f'{k} {v / 2**20:,.1f} MiB' for k, v in terms.items())})"
        + ("" if flash_attn else f"; flash attention off: scores over {n_kv:,} cells")
        + "; measure it (calibrate, plan --from-log) or pass --overhead"
    )
    return Overhead(high, peak, high, "heuristic", basis)
