"""Read a model's cache geometry from a GGUF file's metadata: the model as llama.cpp itself sees it.

Only the key/value header is read (``model/gguf_file.py``, bounded by the file size; the tokenizer's
arrays are stepped over and no tensor data is loaded). The
per-architecture readers live in ``model.gguf_readers`` and are found through the one model-type
registry (``model.architectures``), which also names the cache-shaping keys each reader consumes.

Anything else fails closed: an unknown architecture, or a known one carrying a key that changes the
cache which its reader does not place (e.g. MTP layers, ``nextn_predict_layers`` > 0, for an
architecture whose reader does not place them).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

from kvbudget.errors import ConfigError, UnknownArchitectureError
from kvbudget.model.gguf_file import read_gguf_file
from kvbudget.model.gguf_readers import SHAPING, Meta
from kvbudget.model.spec import LayerSpec, ModelSpec

_ERROR_KEYS = re.compile(r"(attention|ssm|window|head|kv|lora|layer|interval|wkv|conv|block_count|nextn)")


def read_metadata(path: Path) -> dict[str, object]:
    """Every metadata value except the tokenizer's, as Python values (model/gguf_file.py: bounded, no gguf
    package); a truncated or damaged file is a ConfigError."""
    return dict(read_gguf_file(path).metadata)


def read_gguf_spec(path: Path) -> ModelSpec:
    """A ModelSpec from a GGUF file's metadata; fails closed on architectures it cannot place."""
    header = read_gguf_file(path)
    spec = spec_from_metadata(dict(header.metadata), str(path), path.stem)
    if "vocab_size" not in spec.config:  # {arch}.vocab_size is optional: token_embd is (n_embd, n_vocab)
        embd = next((t for t in header.tensors if t.name == "token_embd.weight" and len(t.dims) == 2), None)
        if embd is not None and embd.dims[1] > 0:
            spec = replace(spec, config={**spec.config, "vocab_size": embd.dims[1]})
    return spec


def spec_from_metadata(values: dict[str, object], where: str, stem: str) -> ModelSpec:
    """A ModelSpec from GGUF metadata values (``{arch}.`` keys); ``where`` names the file in errors."""
    arch = values.get("general.architecture")
    if not isinstance(arch, str) or not arch:
        raise ConfigError(f"{where}: GGUF key 'general.architecture' is missing; not a model file kvbudget can read")
    arch_keys = sorted(k for k in values if k.startswith(f"{arch}."))
    from kvbudget.model.architectures import by_gguf_arch

    known = by_gguf_arch()
    entry = known.get(arch)
    if entry is None or entry.gguf_reader is None:
        shaping = [k for k in arch_keys if _ERROR_KEYS.search(k.removeprefix(f"{arch}."))]
        raise UnknownArchitectureError(
            f"{where}: GGUF architecture {arch!r} is not one kvbudget can read (known: {', '.join(sorted(known))}); "
            f"keys it could not place: {', '.join(shaping) or '(no attention or state keys)'}"
        )
    reader, consumed = entry.gguf_reader, entry.gguf_keys
    meta = Meta(where, arch, values)
    stray = [f"{arch}.{s}" for s in SHAPING if s not in consumed and meta.raw(s) not in (None, 0, [], False)]
    stray = [f"{k} (multi-token-prediction layers)" if k.endswith(".nextn_predict_layers") else k for k in stray]
    if stray:
        raise UnknownArchitectureError(
            f"{where}: GGUF architecture {arch!r} carries keys that change the cache which kvbudget cannot "
            f"place for it: {', '.join(stray)}; refusing to guess"
        )
    n_layer = meta.count("block_count")
    states, notes = reader(meta, n_layer)
    name = values.get("general.name")
    context = values.get(f"{arch}.context_length")
    return ModelSpec(
        name=name if isinstance(name, str) and name else stem,
        model_type=arch,
        layers=tuple(LayerSpec(i, s) for i, s in enumerate(states)),
        dtype="float16",  # llama.cpp's default -ctk/-ctv is f16, so --kv-dtype auto means f16 for a GGUF
        max_position_embeddings=context if isinstance(context, int) and context > 0 else None,
        source=where,
        notes=("read from GGUF metadata (the model as llama.cpp loads it)", *notes),
        config={**{k: values[k] for k in arch_keys}, **_transformers_names(values, arch)},
    )


def _transformers_names(values: dict[str, object], arch: str) -> dict[str, object]:
    """The config.json names of the sizes runtime estimates read (hidden, MLP width), from llama.cpp's keys."""
    out: dict[str, object] = {}
    for key, name in (
        ("embedding_length", "hidden_size"),
        ("feed_forward_length", "intermediate_size"),
        ("vocab_size", "vocab_size"),
    ):
        value = values.get(f"{arch}.{key}")
        if isinstance(value, list) and value and all(isinstance(x, int) for x in value):
            value = max(value)  # per-layer widths (e.g. OpenELM, Gemma-3n): the widest layer
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            out[name] = value
    return out
