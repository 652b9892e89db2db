"""Parameter count of a model from its config: total, active per token, and a per-component breakdown.

Memory is driven by the *total* (every expert is resident); ``active`` (routed experts counted
top-k of n, everything else in full, embeddings and lm_head included) is what one token computes
with. This is the convention of the built-in catalog's ``params_total`` notes, which these counts
reproduce exactly for every entry computed from its config (tests/weights/test_params.py).

Counted: token embeddings, lm_head unless tied, every decoder layer (attention or latent attention,
MLP or MoE with shared experts and router, a DSA indexer, Mamba-1/Mamba-2/Gated-DeltaNet/Kimi-delta mixers,
LFM2 short convolutions, norms) and the
final norm, and a VLM's vision tower where its ``vision_config`` has a rule (weights/vision.py). Not counted:
multi-token-prediction layers, other vision towers (said in the notes), and non-persistent buffers (rotary
tables). An architecture without a rule fails closed with the model_type in the error.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from kvbudget.errors import UnknownArchitectureError
from kvbudget.model.architectures import architecture_of
from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import ModelSpec
from kvbudget.units import counted
from kvbudget.weights import blocks
from kvbudget.weights.blocks import Part, TensorKind
from kvbudget.weights.families import TIED_BY_DEFAULT
from kvbudget.weights.rules import LAYER_RULES
from kvbudget.weights.vision import VISION, vision_parts

COMPONENT_ORDER = (
    blocks.EMBEDDINGS,
    blocks.ATTENTION,
    blocks.LINEAR_ATTENTION,
    blocks.MAMBA,
    blocks.MLP,
    blocks.ROUTED,
    blocks.SHARED,
    blocks.LATENT,
    blocks.ROUTER,
    blocks.NORMS,
    blocks.LM_HEAD,
    VISION,
)


@dataclass(frozen=True)
class Component:
    """One functional block summed over all layers; ``kinds`` splits it by tensor kind."""

    name: str
    params: int
    active: int
    kinds: tuple[tuple[TensorKind, int], ...]


@dataclass(frozen=True)
class ParamCount:
    """Parameters of one model. ``parts`` holds one entry per (component, tensor kind)."""

    model: str
    model_type: str
    total: int
    active: int
    tied_embeddings: bool
    parts: tuple[Part, ...]
    notes: tuple[str, ...] = ()

    def components(self) -> list[Component]:
        """Per-component totals, in a fixed reading order (embeddings first, lm_head last)."""
        grouped: dict[str, list[Part]] = defaultdict(list)
        for p in self.parts:
            grouped[p.component].append(p)
        order = [c for c in COMPONENT_ORDER if c in grouped] + sorted(set(grouped) - set(COMPONENT_ORDER))
        return [
            Component(
                name,
                sum(p.params for p in grouped[name]),
                sum(p.active for p in grouped[name]),
                tuple((p.kind, p.params) for p in grouped[name]),
            )
            for name in order
        ]


def supported_model_types() -> list[str]:
    """config.json model types with a parameter-count rule (each is a registered architecture's model type)."""
    return sorted(LAYER_RULES)


def _merge(parts: list[Part]) -> tuple[Part, ...]:
    totals: dict[tuple[str, TensorKind], list[int]] = {}
    for p in parts:
        acc = totals.setdefault((p.component, p.kind), [0, 0])
        acc[0] += p.params
        acc[1] += p.active
    return tuple(Part(comp, kind, params, active) for (comp, kind), (params, active) in totals.items())


def count_params(spec: ModelSpec) -> ParamCount:
    """Count the parameters of ``spec`` from ``spec.config`` (the decoder config)."""
    rule = LAYER_RULES.get(spec.model_type)
    arch = architecture_of(spec.model_type)
    if arch is None:
        raise UnknownArchitectureError(
            f"{spec.name}: model_type {spec.model_type!r} is not an architecture kvbudget can read "
            "(kvbudget.model.architectures), so it has no parameter count either"
        )
    if rule is None:
        # Starts with the model and the model_type (the source address can be long; it is not what needs fixing).
        raise UnknownArchitectureError(
            f"{spec.name}: model_type {spec.model_type!r} ({arch.name}) has no parameter-count rule; give the "
            "checkpoint (model directory, .gguf or Hub id) or a measured --weights-size"
        )
    f = Fields(spec.config, spec.name)  # errors start with the model, not its (long) source address
    hidden, vocab = f.positive("hidden_size"), f.positive("vocab_size")
    tied = f.flag("tie_word_embeddings", default=spec.model_type in TIED_BY_DEFAULT)
    # MllamaTextModel.embed_tokens has vocab_size + 8 rows (image special tokens); lm_head has vocab_size.
    embed_rows = vocab + 8 if spec.model_type == "mllama_text_model" else vocab
    parts = [blocks.part(blocks.EMBEDDINGS, "embedding", embed_rows * hidden)]
    for i in range(len(spec.layers)):
        parts += rule(f, spec, i)
    parts += blocks.norms(1, hidden)  # final norm (norm / norm_f / final_layernorm)
    notes = ["lm_head tied to the embeddings (one tensor)" if tied else "lm_head separate from the embeddings"]
    if not tied:
        parts.append(blocks.part(blocks.LM_HEAD, "lm_head", vocab * hidden))
    tower, tower_note = vision_parts(spec.config, hidden, spec.model_type)
    parts += tower
    if tower_note:
        notes.append(tower_note)
    # DeepSeek/GLM num_nextn_predict_layers, Nemotron num_mtp_modules, Qwen3.5 mtp_num_hidden_layers
    mtp = f.cfg.get("num_nextn_predict_layers") or f.cfg.get("num_mtp_modules") or f.cfg.get("mtp_num_hidden_layers")
    if isinstance(mtp, int) and mtp > 0:
        notes.append(f"{counted(mtp, 'multi-token-prediction module')} excluded (loaded only for speculative decoding)")
    merged = _merge(parts)
    return ParamCount(
        model=spec.name,
        model_type=spec.model_type,
        total=sum(p.params for p in merged),
        active=sum(p.active for p in merged),
        tied_embeddings=tied,
        parts=merged,
        notes=tuple(notes),
    )
