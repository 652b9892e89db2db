"""llama.cpp's compute buffer: the peak of the worst-case graph it reserves at start-up.

llama_context reserves one graph of ``n_ubatch`` tokens with every token an output and the whole cache in
view (src/llama-context.cpp ``graph_reserve``), and ggml-alloc reuses memory between tensors that are not
alive at once (ggml/src/ggml-alloc.c), so the buffer is the largest set of f32 tensors alive at one point:

* **the output head**: the logits of every ubatch token (``n_ubatch x n_vocab`` f32) beside the final
  hidden state (``n_ubatch x n_embd`` f32);
* **attention**: without flash attention the scores ``kq`` (``n_kv x n_ubatch x n_head`` f32,
  src/llama-graph.cpp ``build_attn_mha``: ``ggml_mul_mat(k, q)`` then an in-place soft_max) and the f32 mask
  (``n_kv x n_ubatch``); with flash attention no scores, and the mask cast to f16 (``n_kv x n_ubatch x 2`` B);
  either way beside Q and the attention output (``n_ubatch x n_head x head_dim`` f32 each) and the layer's
  input and residual (``n_ubatch x n_embd`` f32 each);
* **the feed-forward**: gate and up (``2 x n_ubatch x n_ff`` f32) beside the hidden state.

``n_kv`` is one stream's cells: with one stream per sequence, the ubatch's tokens are split across the
streams, so the scores total ``n_ctx_seq x n_ubatch x n_head`` whatever the stream count. The shapes are
read from the graph code; the figure is checked against the CUDA0 compute buffers llama.cpp logged
(tests/data/memory/llamacpp_logs.csv: 300.75, 300.75, 164.00 and 2,144.00 MiB, each matched to the MiB) and
against the live llama-server of the test suite on the CPU backend (tests/live/test_compute_buffer_live.py:
flash attention off and on, 1 and 4 streams, within 2%).
"""

from __future__ import annotations

from kvbudget.engines.overhead import Overhead, dims
from kvbudget.model.spec import ModelSpec

F32 = 4
F16 = 2


def _positive(spec: ModelSpec, *keys: str) -> int:
    for key in keys:
        value = spec.config.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return 0


def _heads(spec: ModelSpec, hidden: int) -> tuple[int, int]:
    """(n_head, n_head x head_dim): the query heads and Q's width (GGUF keys where the spec came from a .gguf)."""
    arch = spec.model_type
    heads = _positive(spec, "num_attention_heads", f"{arch}.attention.head_count") or 32
    head_dim = _positive(spec, "head_dim", f"{arch}.attention.key_length") or max(hidden // heads, 1)
    return heads, heads * head_dim


def compute_buffer_terms(spec: ModelSpec, *, ubatch: int, n_kv: int, flash_attn: bool) -> dict[str, int]:
    """The bytes of each candidate peak (the buffer is the largest)."""
    hidden, inter, vocab = dims(spec)
    heads, q_width = _heads(spec, hidden)
    beside = ubatch * (2 * q_width + 2 * hidden) * F32  # Q, the attention output, the layer input, the residual
    terms = {
        "output head": ubatch * (vocab + hidden) * F32,
        "feed-forward": ubatch * (2 * inter + hidden) * F32,
    }
    if n_kv > 0:
        if flash_attn:  # build_attn_mha: the mask cast to f16 for ggml_flash_attn_ext, no scores
            terms["attention"] = ubatch * n_kv * F16 + beside
        else:  # kq (n_head rows of scores) and the f32 mask
            terms["attention scores"] = ubatch * n_kv * (heads + 1) * F32 + beside
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
