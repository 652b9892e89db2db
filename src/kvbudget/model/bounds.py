"""How large a model's declared geometry may be, checked where a config or GGUF header is read, before any list
per layer, head or expert is built (issue 22: a config declaring 10^12 layers must be one error, not 9.5 GB).

Each limit is far above any published model (the largest have ~200 layers, 128 heads, 512 experts, a few
hundred thousand hidden units, a vocabulary of a few hundred thousand and context windows of 10^7) and low
enough that a list per layer and the arithmetic on the bytes stay small and exact.
"""

from __future__ import annotations

from kvbudget.units import a_or_an

MAX_LAYERS = 10_000
MAX_HEADS = 65_536
MAX_EXPERTS = 65_536
MAX_SIZE = 2**40  # any other dimension, vocabulary or position count
MAX_LIST = MAX_LAYERS  # items in a per-layer list of a config (layer indices, layer types)

# (words in a key, its limit), first match wins: "num_hidden_layers" is a layer count, "num_key_value_heads" a
# head count, "num_local_experts" an expert count; "layer_types" is a list (bounded by MAX_LIST), not a count.
_KINDS = (
    (("layer", "block_count", "n_layer", "depth"), MAX_LAYERS, "layers"),
    (("head",), MAX_HEADS, "heads"),
    (("expert",), MAX_EXPERTS, "experts"),
)


def limit(key: str) -> tuple[int, str]:
    """The largest plausible value of the count named ``key``, and what it counts."""
    lowered = key.lower()
    if "dim" in lowered or "size" in lowered or "length" in lowered:
        return MAX_SIZE, "units"  # head_dim, expert_intermediate_size, ...: dimensions, not counts
    for words, high, noun in _KINDS:
        if any(word in lowered for word in words):
            return high, noun
    return MAX_SIZE, "units"


def too_large(key: str, value: int) -> str | None:
    """Why ``value`` cannot be the ``key`` of a real model, or None."""
    high, noun = limit(key)
    if value <= high:
        return None
    shown = f"{value:,}" if value < 10**30 else f"{a_or_an(f'{len(str(value)):,}')}-digit number"
    return f"{key} is {shown}, past any real model (at most {high:,} {noun})"


def brief(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut for a one-line error: a 10^6-item list is not printed whole."""
    if isinstance(value, list | tuple | dict) and len(value) > 16:
        return f"a {type(value).__name__} of {len(value):,} items"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"
