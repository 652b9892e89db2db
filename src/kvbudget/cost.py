"""The cost answer: per-token growing bytes, bytes for S sequences of N tokens, fixed state, and a
per-group breakdown that carries its own arithmetic. Bytes are integers, per GPU."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.engines import EngineRef, build_layout, parse_engine, served_spec
from kvbudget.engines.base import EngineOptions, Group, Layout
from kvbudget.errors import InputError
from kvbudget.frozen import FrozenRecord
from kvbudget.model.spec import ModelSpec
from kvbudget.precision import CacheDType, parse_cache_dtype

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.model.spec import CacheKind
    from kvbudget.requests.cost import CostRequest, EngineSettings

SCHEMA_VERSION = 1


@dataclass(frozen=True, repr=False, eq=False)
class GroupCost(FrozenRecord):
    """One group of identical layers in a cost answer, with the numbers and rules its arithmetic shows."""

    kind: CacheKind
    label: str
    layers: int
    allocated_layers: int
    per_token_bytes: int
    bytes_at_tokens: int
    slot_bytes: int
    slot_formula: str
    slots_rule: str
    slots_at_tokens: int
    state_bytes: int
    state_formula: str
    layer_indices: tuple[int, ...]

    def explain(self) -> str:
        """The group's arithmetic in words and numbers."""
        parts = []
        layers = f"{self.layers} layers" + (
            f" (+{self.allocated_layers - self.layers} padding)" if self.allocated_layers != self.layers else ""
        )
        if self.slot_bytes:
            parts.append(
                f"{layers} x {self.slot_bytes:,} B/token [{self.slot_formula}] x {self.slots_at_tokens:,} token slots "
                f"[{self.slots_rule}]"
            )
        if self.state_bytes:
            parts.append(f"{layers} x {self.state_bytes:,} B/sequence [{self.state_formula}]")
        if not parts:
            parts.append(f"{layers}: {self.slot_formula or 'no per-sequence state'}")
        return " + ".join(parts)


@dataclass(frozen=True, repr=False, eq=False)
class CostReport(FrozenRecord):
    """The cost answer (``kvbudget cost``): a model's layout on one engine for S sequences of N tokens."""

    model: ModelSpec
    engine: EngineRef
    layout: Layout
    tokens: int
    sequences: int

    @property
    def warnings(self) -> tuple[str, ...]:
        """The layout's warnings, and a context past the model's native window (the engine refuses it
        unless the model length is overridden, and quality past it is not the model's)."""
        out = list(self.layout.warnings)
        window = self.model.max_position_embeddings
        if window and self.tokens > window:
            out.append(
                f"{self.tokens:,} tokens is beyond {self.model.name}'s max_position_embeddings {window:,}: "
                f"{self.engine.rules.past_window(self.tokens, window)}; past it the model runs outside what it was "
                "trained for"
            )
        return tuple(out)

    @property
    def kv_bytes_per_token(self) -> int:
        return self.layout.kv_bytes_per_token

    @property
    def sequence_bytes(self) -> int:
        return self.layout.sequence_bytes(self.tokens)

    @property
    def state_bytes(self) -> int:
        return self.layout.state_bytes

    @property
    def total_bytes(self) -> int:
        return self.layout.total_bytes(self.tokens, self.sequences)

    def groups(self) -> list[GroupCost]:
        return [self._group(g) for g in self.layout.groups]

    def _group(self, g: Group) -> GroupCost:
        return GroupCost(
            kind=g.kind,
            label=g.label,
            layers=g.layers,
            allocated_layers=g.allocated_layers,
            per_token_bytes=g.per_token_bytes,
            bytes_at_tokens=g.bytes_at(self.tokens, self.sequences),
            slot_bytes=g.slot_bytes,
            slot_formula=g.slot_formula,
            slots_rule=g.slots.text,
            slots_at_tokens=g.slots(self.tokens, self.sequences),
            state_bytes=g.state_bytes,
            state_formula=g.state_formula,
            layer_indices=g.layer_indices,
        )

    @property
    def kv_dtype_label(self) -> str:
        k, v = self.layout.k_dtype, self.layout.v_dtype
        return k.name if k == v else f"{k.name}/{v.name}"

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget cost --json`` document."""
        return self.to_json()

    def to_json(self) -> dict[str, object]:
        """The versioned JSON contract of ``kvbudget cost --json``."""
        return {
            "schema_version": SCHEMA_VERSION,
            "model": self.model.name,
            "model_type": self.model.model_type,
            "source": self.model.source,
            "engine": self.engine.to_json(),
            "kv_dtype": self.kv_dtype_label,
            "k_dtype": self.layout.k_dtype.name,
            "v_dtype": self.layout.v_dtype.name,
            "tokens": self.tokens,
            "sequences": self.sequences,
            "tp": self.layout.tp,
            "block_size": self.layout.block_size,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "sequence_bytes": self.sequence_bytes,
            "state_bytes": self.state_bytes,
            "total_bytes": self.total_bytes,
            "groups": [
                {
                    "kind": g.kind,
                    "label": g.label,
                    "layers": g.layers,
                    "allocated_layers": g.allocated_layers,
                    "layer_indices": list(g.layer_indices),
                    "per_token_bytes": g.per_token_bytes,
                    "bytes_at_tokens": g.bytes_at_tokens,
                    "slot_bytes": g.slot_bytes,
                    "token_slots": g.slots_at_tokens,
                    "state_bytes": g.state_bytes,
                    "arithmetic": g.explain(),
                }
                for g in self.groups()
            ],
            "notes": list(self.model.notes) + list(self.layout.notes),
            "warnings": list(self.warnings),
        }


def resolve_dtypes(
    spec: ModelSpec, kv_dtype: str = "auto", k_dtype: str | None = None, v_dtype: str | None = None
) -> tuple[CacheDType, CacheDType]:
    """K and V cache dtypes; ``q8_0/q4_0`` in --kv-dtype sets K and V apart; --k-dtype/--v-dtype override."""
    k_text, slash, v_text = kv_dtype.partition("/")
    if slash and (not k_text.strip() or not v_text.strip()):
        raise InputError(f"--kv-dtype {kv_dtype!r}: give both sides of K/V, e.g. q8_0/q4_0, or one dtype for both")
    k = parse_cache_dtype(k_dtype or k_text, model_dtype=spec.dtype, what="--k-dtype" if k_dtype else "--kv-dtype")
    v = parse_cache_dtype(
        v_dtype or v_text or k_text, model_dtype=spec.dtype, what="--v-dtype" if v_dtype else "--kv-dtype"
    )
    return k, v


def compute_cost(
    spec: ModelSpec,
    *,
    engine: str | EngineRef = "ideal",
    kv_dtype: str = "auto",
    k_dtype: str | None = None,
    v_dtype: str | None = None,
    tokens: int = 32768,
    sequences: int = 1,
    tp: int = 1,
    options: EngineOptions | None = None,
) -> CostReport:
    """The library entry point: what ``kvbudget cost`` prints, as a CostReport."""
    ref = parse_engine(engine) if isinstance(engine, str) else engine
    spec = served_spec(spec, ref)  # the dtype the engine runs the checkpoint in (the cache with --kv-dtype auto)
    k, v = resolve_dtypes(spec, kv_dtype, k_dtype, v_dtype)
    ref.rules.check_options(options or EngineOptions())
    layout = build_layout(spec, ref, k, v, tp, options or EngineOptions())
    return CostReport(spec, ref, layout, tokens, sequences)


def engine_options(request: EngineSettings) -> EngineOptions:
    """The engine settings of a request, as the engines read them."""
    return EngineOptions(
        block_size=request.block_size,
        max_num_batched_tokens=request.max_num_batched_tokens,
        image_tokens=request.image_tokens,
        mla_storage=request.mla_storage,  # type: ignore[arg-type]  # one of MLA_STORAGE, checked by the request
        swa_full=request.swa_full,
        chunked_hybrid=True if request.chunked_hybrid else None,
        enforce_eager=request.enforce_eager,
        flashinfer_sampler=None if request.flashinfer_sampler is None else request.flashinfer_sampler == "on",
        attn_backend=request.attn_backend,
        n_ubatch=request.ubatch,
        flash_attn=not request.no_flash_attn,
        kv_unified=request.kv_unified,
        prefix_caching=False if request.no_prefix_caching else None,
        max_batch_size=request.max_batch_size,
        max_running_requests=request.max_running_requests,
        max_num_seqs=request.max_num_seqs,
        dp_attention=request.dp_attention,
        n_gpu_layers=request.n_gpu_layers,
        tensor_split=request.tensor_split or (),
    )


def kv_cost(request: CostRequest) -> CostReport:
    """Bytes of the KV cache per token, per sequence and for the request's sequences (``kvbudget cost``);
    ``.to_dict()`` is the ``cost --json`` document."""
    from kvbudget.model.sources import resolve

    r = request
    return compute_cost(
        resolve(r.model),
        engine=r.engine,
        kv_dtype=r.kv_dtype,
        k_dtype=r.k_dtype,
        v_dtype=r.v_dtype,
        tokens=r.tokens,
        sequences=r.sequences,
        tp=r.tp,
        options=engine_options(r),
    )
