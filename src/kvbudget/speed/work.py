"""What one request shape costs a GPU, in FLOPs and bytes: the exact part of the speed model.

Counted from the model's own parameter counter (kvbudget.weights.params) and the engine's cache layout
(kvbudget.engines, per GPU, so sliding layers hold only their window and latent attention its latent):

* Linear FLOPs per token: 2 x the parameters a token multiplies (routed experts top-k of n plus shared ones; the
  embedding table is a gather, not a product). The lm_head runs once per sequence in a prefill (logits of the
  last prompt token only, as vLLM, SGLang and TensorRT-LLM compute them) and once per decoded token.
* Attention FLOPs: per layer, per query token and attended key, 2 x query heads x (qk dim + v dim) (QK^T and PV);
  a sliding layer attends at most its window, a chunked-local layer its chunk; recurrent layers have none.
* Decode bytes per iteration: the weights a batch touches once (a MoE batch of B touches each routed expert with
  probability 1 - (1 - k/n)^B, uniform routing assumed) plus every running sequence's cache at its length.

Everything here is per GPU after tensor parallelism (weights, FLOPs and cache split ``tp`` ways).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import ChunkedLocal, FullAttention, LatentAttention, ModelSpec, SlidingWindow
from kvbudget.weights import blocks
from kvbudget.weights.families import is_moe_layer
from kvbudget.weights.params import ParamCount


@dataclass(frozen=True)
class AttentionLayer:
    """One attention layer's cost per attended key: ``flops_per_key`` = 2 x heads x (qk + v); ``reach`` the most
    keys it attends (None: the whole context)."""

    flops_per_key: int
    reach: int | None


@dataclass(frozen=True)
class ModelWork:
    """A model's compute and weight traffic, whole-model figures (not yet split over GPUs)."""

    name: str
    linear_params: int  # multiplied per token: active minus embeddings minus lm_head
    lm_head_params: int  # vocab x hidden (tied or not, the product is computed)
    dense_read_params: int  # read every iteration: everything but the embedding gather and the routed experts
    routed_params: int  # every routed expert (all resident)
    routed_share: float  # k / n: the share of routed experts one token runs
    attention: tuple[AttentionLayer, ...]
    hidden: int
    layers: int
    moe_layers: int = 0  # the layers with routed experts (kvbudget.weights.families.is_moe_layer)

    def linear_flops(self, tokens: int, sequences: int) -> int:
        """FLOPs of the matrix products for ``tokens`` new tokens of ``sequences`` prefilled sequences."""
        return 2 * self.linear_params * tokens + 2 * self.lm_head_params * sequences

    def decode_flops(self, batch: int) -> int:
        """Matrix-product FLOPs of one decode iteration of ``batch`` sequences (one new token each)."""
        return 2 * (self.linear_params + self.lm_head_params) * batch

    def attention_flops(self, cached: int, new: int) -> int:
        """Attention FLOPs of ``new`` tokens appended after ``cached`` ones (causal: token i sees cached + i keys)."""
        return sum(flops * attended_keys(cached, new, reach) for reach, flops in self.attention_by_reach)

    @cached_property
    def attention_by_reach(self) -> tuple[tuple[int | None, int], ...]:
        """The layers' FLOPs per attended key summed by reach (the simulator asks this once per prefill)."""
        by: dict[int | None, int] = {}
        for layer in self.attention:
            by[layer.reach] = by.get(layer.reach, 0) + layer.flops_per_key
        return tuple(by.items())

    def read_params(self, batch: int) -> float:
        """Parameters one decode iteration of ``batch`` sequences reads (expected, for routed experts)."""
        touched = 1.0 - (1.0 - self.routed_share) ** batch if self.routed_params else 0.0
        return self.dense_read_params + self.routed_params * touched


def attended_keys(cached: int, new: int, reach: int | None) -> int:
    """Sum over the ``new`` query tokens of the keys each attends: min(cached + i, reach) for i = 1..new."""
    if new <= 0:
        return 0
    top = cached + new
    if reach is None or top <= reach:
        return new * cached + new * (new + 1) // 2
    if cached >= reach:
        return new * reach
    below = reach - cached  # tokens i = 1..below attend cached + i <= reach
    return below * cached + below * (below + 1) // 2 + (new - below) * reach


def model_work(spec: ModelSpec, count: ParamCount) -> ModelWork:
    """The FLOP and byte counts of ``spec``, from its parameter count and its layers."""
    f = Fields(spec.config, spec.source or spec.name)
    hidden, vocab = f.positive("hidden_size"), f.positive("vocab_size")
    given = spec.config.get("num_attention_heads")
    heads = given if isinstance(given, int) and not isinstance(given, bool) else 0
    by = {c.name: c for c in count.components()}
    embed = by[blocks.EMBEDDINGS].params if blocks.EMBEDDINGS in by else 0
    head = by[blocks.LM_HEAD].params if blocks.LM_HEAD in by else 0
    lm_head = vocab * hidden  # tied or not, the logits are one vocab x hidden product
    routed = by.get(blocks.ROUTED)
    routed_total = routed.params if routed else 0
    routed_share = routed.active / routed.params if routed and routed.params else 0.0
    linear = count.active - embed - head
    dense_read = count.total - embed - head - routed_total + lm_head
    return ModelWork(
        name=spec.name,
        linear_params=linear,
        lm_head_params=lm_head,
        dense_read_params=dense_read,
        routed_params=routed_total,
        routed_share=routed_share,
        attention=tuple(_attention(spec, heads)),
        hidden=hidden,
        layers=len(spec.layers),
        moe_layers=sum(is_moe_layer(f, spec.model_type, i, len(spec.layers)) for i in range(len(spec.layers)))
        if routed
        else 0,
    )


def _attention(spec: ModelSpec, heads: int) -> list[AttentionLayer]:
    out: list[AttentionLayer] = []
    for layer in spec.layers:
        for state in layer.states:
            if isinstance(state, (FullAttention, SlidingWindow, ChunkedLocal)):
                q_heads = heads or state.kv_heads
                reach = (
                    state.window
                    if isinstance(state, SlidingWindow)
                    else state.chunk
                    if isinstance(state, ChunkedLocal)
                    else None
                )
                out.append(AttentionLayer(2 * q_heads * (state.k_dim + state.v_dim), reach))
            elif isinstance(state, LatentAttention):
                # prefill form (keys expanded from the latent): qk = nope + rope, v = v_head_dim
                qk = state.qk_nope_dim + state.rope_dim
                out.append(AttentionLayer(2 * state.num_heads * (qk + state.v_head_dim), None))
    return out
