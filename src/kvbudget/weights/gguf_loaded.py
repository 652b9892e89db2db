"""Weights as llama.cpp keeps them on the GPU: the GGUF's tensors of the offloaded layers, less the token embedding.

* **Placement** (src/llama-model.cpp ``load_tensors``): the input layer (``token_embd``) is always created on
  the CPU ("there is very little benefit to offloading the input layer"; it is logged as the ``CPU_Mapped``
  model buffer), every repeating layer and the output layer go to the GPU with ``-ngl`` covering them. A model
  with tied embeddings has no ``output.weight`` in its GGUF, so ``output`` is created from ``token_embd`` with
  ``TENSOR_DUPLICATED``: a second copy, on the GPU. So the GPU holds the file less ``token_embd``, plus that copy
  when tied (= the whole file).
* **Storage of a single-type GGUF** (``--weights q8_0``, ``f16``, ...): 1-D tensors (norms, biases) stay f32
  (convert_hf_to_gguf.py and src/llama-quant.cpp quantize only 2-D tensors), and so do MoE routers
  (``ffn_gate_inp``: forced to F32 by the converter and skipped by llama-quant.cpp); ``token_embd`` takes the file
  type; ``output`` takes Q6_K under the 4-6 bit types (llama-quant.cpp ``llama_tensor_get_type``: ``new_type !=
  Q8_0`` -> Q6_K) and the file type under q8_0 and the float types. Mixed files (Q4_K_M and other ``_S/_M/_L``
  recipes) vary the type per tensor: give the .gguf itself for its exact tensor table.

Held to the log of a Qwen3-Coder-30B-A3B Q8_0 on an A100 40GB (llama.cpp b7342, tests/data/memory/llamacpp_logs.csv):
30,658.10 MiB by this rule, 30,658.12 logged on CUDA0, and the 315.30 MiB ``CPU_Mapped`` buffer is the token
embedding to the MiB.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

from kvbudget.engines.llamacpp_offload import LayerWeights
from kvbudget.model.families.fields import Fields
from kvbudget.model.spec import ModelSpec
from kvbudget.units import a_or_an
from kvbudget.weights.blocks import Part
from kvbudget.weights.params import count_params
from kvbudget.weights.precision import GGUF_BLOCKS
from kvbudget.weights.rules import LAYER_RULES
from kvbudget.weights.sources import WeightSize

F32_BITS = Fraction(32)
FLOAT_BITS = {
    "fp32": Fraction(32),
    "f32": Fraction(32),
    "fp16": Fraction(16),
    "f16": Fraction(16),
    "bf16": Fraction(16),
}
Q6_K_BITS = Fraction(GGUF_BLOCKS["q6_k"][0] * 8, GGUF_BLOCKS["q6_k"][1])


def _bits(name: str) -> Fraction | None:
    if name in FLOAT_BITS:
        return FLOAT_BITS[name]
    if name in GGUF_BLOCKS:
        size, elements, _ = GGUF_BLOCKS[name]
        return Fraction(size * 8, elements)
    return None


def _bytes(params: int, bits: Fraction) -> int:
    return math.ceil(params * bits / 8)


def _storage(precision: str) -> tuple[Fraction, Fraction] | None:
    """(bits of the file type, bits of ``output``) of a single-type GGUF (None: not a llama.cpp storage type)."""
    bits = _bits(precision)
    if bits is None:
        return None
    return bits, bits if precision == "q8_0" or precision in FLOAT_BITS else Q6_K_BITS


def _part_bytes(part: Part, bits: Fraction, out_bits: Fraction) -> int:
    if part.kind == "lm_head":
        return _bytes(part.params, out_bits)
    if part.kind in ("norm", "vector", "router"):  # 1-D tensors and MoE routers stay f32
        return _bytes(part.params, F32_BITS)
    return _bytes(part.params, bits)


def computed_on_gpu(spec: ModelSpec, precision: str) -> tuple[int, int] | None:
    """(bytes on the GPU, bytes of the token embedding in host memory) of a single-type GGUF at ``precision``
    (None when ``precision`` is not a llama.cpp storage type)."""
    storage = _storage(precision)
    if storage is None:
        return None
    bits, out_bits = storage
    on_gpu = embedding = 0
    tied = True
    for part in count_params(spec).parts:
        if part.kind == "vision":  # a GGUF's vision tower is a separate mmproj file, not loaded with the model
            continue
        if part.kind == "embedding":
            embedding += _bytes(part.params, bits)
            continue
        tied = tied and part.kind != "lm_head"
        on_gpu += _part_bytes(part, bits, out_bits)
    if tied:  # output = token_embd duplicated (TENSOR_DUPLICATED): a copy on the GPU
        on_gpu += embedding
    return on_gpu, embedding


def computed_layers(spec: ModelSpec, precision: str) -> LayerWeights | None:
    """The bytes of each layer of a single-type GGUF at ``precision``, as load_tensors places them (the input layer
    on the CPU; ``output``, ``output_norm`` and a tied model's copy of ``token_embd`` in the output layer)."""
    storage = _storage(precision)
    rule = LAYER_RULES.get(spec.model_type)
    if storage is None or rule is None:
        return None
    bits, out_bits = storage
    fields = Fields(spec.config, spec.source or spec.name)
    layers = tuple(
        sum(_part_bytes(p, bits, out_bits) for p in rule(fields, spec, il)) for il in range(len(spec.layers))
    )
    outer = count_params(replace(spec, layers=())).parts  # the input and output layers alone
    embedding = sum(_bytes(p.params, bits) for p in outer if p.kind == "embedding")
    tied = not any(p.kind == "lm_head" for p in outer)
    output = sum(_part_bytes(p, bits, out_bits) for p in outer if p.kind != "embedding") + (embedding if tied else 0)
    basis = (
        f"computed from the config as a {precision} GGUF, per layer as llama.cpp places it (src/llama-model.cpp "
        "load_tensors): token_embd on the CPU, output + output_norm with the output layer"
        + (" (tied: a copy of token_embd)" if tied else "")
    )
    return LayerWeights(embedding, layers, output, "computed", basis)


def file_layers(model_ref: str) -> LayerWeights | None:
    """The bytes of each layer from a GGUF's own tensor table (``blk.N.*``; None without a .gguf to read)."""
    from kvbudget.model.gguf_file import read_gguf_file
    from kvbudget.weights.sources import gguf_files

    path = Path(model_ref).expanduser()
    if not path.exists() or not (path.suffix.lower() == ".gguf" or path.is_dir()):
        return None
    layers: dict[int, int] = {}
    embedding = output = 0
    tied = True
    for file in gguf_files(path):
        for t in read_gguf_file(file).tensors:
            size = t.n_bytes or 0
            block = re.match(r"blk\.(\d+)\.", t.name)
            if block:
                layers[int(block.group(1))] = layers.get(int(block.group(1)), 0) + size
            elif t.name == "token_embd.weight":
                embedding += size
            else:
                output += size  # output, output_norm (and the few other non-repeating tensors)
                tied = tied and t.name != "output.weight"
    if not layers:
        return None
    output += embedding if tied else 0  # TENSOR_DUPLICATED: the output layer holds a copy of token_embd
    per = tuple(layers.get(il, 0) for il in range(max(layers) + 1))
    return LayerWeights(embedding, per, output, "exact", f"{path.name}: the GGUF's tensor table, per layer")


def _file_embedding(model_ref: str) -> tuple[int, bool] | None:
    """(token_embd bytes, whether an output.weight exists) from the GGUF's tensor table, or None."""
    from kvbudget.model.gguf_file import read_gguf_file
    from kvbudget.weights.sources import gguf_files

    path = Path(model_ref).expanduser()
    if not path.exists() or not (path.suffix.lower() == ".gguf" or path.is_dir()):
        return None
    files = gguf_files(path)
    if not files:
        return None
    embedding, output = 0, False
    for file in files:
        for t in read_gguf_file(file).tensors:
            if t.name == "token_embd.weight" and t.n_bytes is not None:
                embedding = t.n_bytes
            output = output or t.name == "output.weight"
    return embedding, output


def llamacpp_on_gpu(spec: ModelSpec, weights: WeightSize, model_ref: str, precision: str | None) -> WeightSize:
    """The weights figure as llama.cpp keeps it on the GPU (all layers offloaded), the rest said in the basis."""
    if weights.provenance == "exact":
        found = _file_embedding(model_ref)
        if found is None or not found[1] or not found[0]:
            return weights  # tied (the copy on the GPU makes up for it) or no table to read
        embedding = found[0]
        basis = (
            f"{weights.basis}; as loaded by llama.cpp: less token_embd ({embedding:,} B), which stays in host "
            "memory (src/llama-model.cpp load_tensors: the input layer is kept on the CPU)"
        )
        return replace(weights, bytes=weights.bytes - embedding, basis=basis)
    if weights.provenance != "computed":
        return weights  # a measured footprint is the user's word
    name = (precision or spec.dtype).lower()
    name = {"float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}.get(name, name)
    found_computed = computed_on_gpu(spec, name)
    if found_computed is None:
        return weights
    on_gpu, embedding = found_computed
    tied = not any(p.kind == "lm_head" for p in count_params(spec).parts)
    output = "a copy of token_embd (tied)" if tied else "output at its GGUF type"
    basis = (
        f"computed from the config: {weights.elements or 0:,} parameters as {a_or_an(name)} GGUF, as llama.cpp loads "
        f"it: {on_gpu:,} B on the GPU (norms and routers f32, {output}), the token embedding ({embedding:,} B) in "
        "host memory (src/llama-model.cpp load_tensors, src/llama-quant.cpp)"
    )
    return replace(weights, bytes=on_gpu, basis=basis)
