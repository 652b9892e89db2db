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
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

from kvbudget.model.spec import ModelSpec
from kvbudget.units import a_or_an
from kvbudget.weights.params import count_params
from kvbudget.weights.precision import GGUF_BLOCKS
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


def computed_on_gpu(spec: ModelSpec, precision: str) -> tuple[int, int] | None:
    """(bytes on the GPU, bytes of the token embedding in host memory) of a single-type GGUF at ``precision``
    (None when ``precision`` is not a llama.cpp storage type)."""
    bits = _bits(precision)
    if bits is None:
        return None
    out_bits = bits if precision == "q8_0" or precision in FLOAT_BITS else Q6_K_BITS
    on_gpu = embedding = 0
    tied = True
    for part in count_params(spec).parts:
        if part.kind == "embedding":
            embedding += _bytes(part.params, bits)
            continue
        if part.kind == "lm_head":
            tied = False
            on_gpu += _bytes(part.params, out_bits)
        elif part.kind in ("norm", "vector", "router"):
            on_gpu += _bytes(part.params, F32_BITS)
        else:
            on_gpu += _bytes(part.params, bits)
    if tied:  # output = token_embd duplicated (TENSOR_DUPLICATED): a copy on the GPU
        on_gpu += embedding
    return on_gpu, embedding


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
