"""Tiny GGUF files of other architectures, with a real model's cache geometry, that llama-server loads.

The cache-shaping metadata is the registry's own sample (``kvbudget.model.architectures``:
``gguf_example``, a real model's layers, KV heads, head dims, windows and state sizes). Around it each
writer adds what llama.cpp's loader requires of that architecture and nothing more: its other keys
(norm epsilons, expert counts, ...) and every tensor ``load_arch_tensors`` creates (src/models/<arch>.cpp),
at the shapes it asks for. Widths that do not shape the cache (hidden size where the attention is
independent of it, MLP and expert sizes, vocabulary) are tiny.

The weights are zeros in a sparse file: the header, metadata and tensor table are written, and the
file is then extended to its full size without writing data, so a GGUF of a 64-layer model costs
neither time nor disk. llama-server maps it, allocates its caches and logs their sizes at start-up
(``--no-warmup``: nothing is computed), which is all the tests read.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import gguf
import numpy as np

from kvbudget.model.architectures import by_gguf_arch
from tests.live.tiny_gguf import VOCAB, _vocab

EMBED = 64
FFN = 64
# Kept f32 as convert_hf_to_gguf keeps them: ggml's CPU ssm_conv reads its conv weight as f32.
F32_TENSORS = (
    "ssm_conv1d.weight",
    "ssm_conv1d_q.weight",
    "ssm_conv1d_k.weight",
    "ssm_conv1d_v.weight",
    "shortconv.conv.weight",
    ".ssm_a",
    ".ssm_d",
    "ssm_norm.weight",
)
Shapes = dict[str, tuple[int, ...]]  # tensor name -> ggml shape (ne0 first, as llama.cpp writes it)


def _add_key(w: gguf.GGUFWriter, key: str, value: object) -> None:
    """Each value in the type llama.cpp's loader reads it as (convert_hf_to_gguf's types)."""
    if isinstance(value, bool):
        w.add_bool(key, value)
    elif isinstance(value, int):
        w.add_uint32(key, value)
    elif isinstance(value, float):
        w.add_float32(key, value)
    elif isinstance(value, str):
        w.add_string(key, value)
    elif isinstance(value, list):
        w.add_array(key, value)
    else:
        raise TypeError(f"{key}: cannot write {value!r}")


def write_sparse(path: Path, arch: str, name: str, keys: dict[str, object], tensors: Shapes) -> Path:
    """A GGUF with ``keys`` (suffixes after ``{arch}.``) and zero-filled ``tensors``: 1-D and state-space tensors
    in f32, the others f16."""
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    for suffix, value in keys.items():
        _add_key(w, f"{arch}.{suffix}", value)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    _vocab(w)
    data = 0
    for tensor, shape in tensors.items():
        dtype = np.float32 if len(shape) == 1 or tensor.endswith(F32_TENSORS) else np.float16
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        w.add_tensor_info(tensor, tuple(reversed(shape)), np.dtype(dtype), nbytes)
        data += gguf.GGUFWriter.ggml_pad(nbytes, w.data_alignment)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    assert w.fout is not None
    start = gguf.GGUFWriter.ggml_pad(w.fout[0].tell(), w.data_alignment)
    w.close()
    with path.open("r+b") as out:
        out.truncate(start + data)  # the tensor data: zeros, never written (a sparse file)
    return path


# ---- tensor groups (names from gguf.TENSOR_NAMES, which mirror src/llama-arch.cpp) ----


def _embeddings(embd: int, norm: str = "output_norm.weight") -> Shapes:
    return {"token_embd.weight": (embd, VOCAB), norm: (embd,)}


def _attention(i: int, embd: int, q: int, k: int, v: int, *, norm: bool = True) -> Shapes:
    out: Shapes = {f"blk.{i}.attn_norm.weight": (embd,)} if norm else {}
    out.update(
        {
            f"blk.{i}.attn_q.weight": (embd, q),
            f"blk.{i}.attn_k.weight": (embd, k),
            f"blk.{i}.attn_v.weight": (embd, v),
            f"blk.{i}.attn_output.weight": (q, embd),
        }
    )
    return out


def _mlp(i: int, embd: int, ff: int = FFN, *, gate: bool = True, norm: str | None = "ffn_norm.weight") -> Shapes:
    out: Shapes = {f"blk.{i}.{norm}": (embd,)} if norm else {}
    if gate:
        out[f"blk.{i}.ffn_gate.weight"] = (embd, ff)
    out.update({f"blk.{i}.ffn_up.weight": (embd, ff), f"blk.{i}.ffn_down.weight": (ff, embd)})
    return out


def _moe(i: int, embd: int, experts: int, ff: int = FFN, *, shared: bool = True, probs_bias: bool = False) -> Shapes:
    out: Shapes = {
        f"blk.{i}.ffn_gate_inp.weight": (embd, experts),
        f"blk.{i}.ffn_gate_exps.weight": (embd, ff, experts),
        f"blk.{i}.ffn_down_exps.weight": (ff, embd, experts),
        f"blk.{i}.ffn_up_exps.weight": (embd, ff, experts),
    }
    if probs_bias:
        out[f"blk.{i}.exp_probs_b.bias"] = (experts,)
    if shared:
        out.update(
            {
                f"blk.{i}.ffn_gate_shexp.weight": (embd, ff),
                f"blk.{i}.ffn_up_shexp.weight": (embd, ff),
                f"blk.{i}.ffn_down_shexp.weight": (ff, embd),
            }
        )
    return out


def _mamba2(i: int, embd: int, inner: int, state: int, groups: int, heads: int, conv: int, *, norm: bool) -> Shapes:
    conv_dim = inner + 2 * groups * state
    out: Shapes = {
        f"blk.{i}.ssm_in.weight": (embd, inner + conv_dim + heads),
        f"blk.{i}.ssm_conv1d.weight": (conv, conv_dim),
        f"blk.{i}.ssm_conv1d.bias": (conv_dim,),  # optional to the loader, but build_mamba2_layer adds it
        f"blk.{i}.ssm_dt.bias": (heads,),
        f"blk.{i}.ssm_a": (1, heads),
        f"blk.{i}.ssm_d": (1, heads),
        f"blk.{i}.ssm_out.weight": (inner, embd),
    }
    if norm:
        out[f"blk.{i}.ssm_norm.weight"] = (inner // groups, groups)
    return out


def _example(arch: str) -> dict[str, object]:
    return dict(by_gguf_arch()[arch].gguf_example)


def _layers(keys: dict[str, object]) -> int:
    value = keys["block_count"]
    assert isinstance(value, int)
    return value


def _per_layer(keys: dict[str, object], key: str) -> list[int]:
    value = keys[key]
    n = _layers(keys)
    if isinstance(value, list):
        return [int(x) for x in value]
    assert isinstance(value, int)
    return [value] * n


def _dims(keys: dict[str, object]) -> tuple[int, int]:
    k, v = keys["attention.key_length"], keys["attention.value_length"]
    assert isinstance(k, int) and isinstance(v, int)
    return k, v


# ---- one writer per architecture ----

RMS = 1e-5


def write_llama4(path: Path) -> Path:
    """src/models/llama4.cpp: experts required (n_expert > 0), interleave_moe_layer_step, rms eps."""
    keys = _example("llama4") | {
        "embedding_length": EMBED,
        "feed_forward_length": FFN,
        "expert_feed_forward_length": FFN,
        "expert_count": 2,
        "expert_used_count": 1,
        "interleave_moe_layer_step": 1,
        "attention.layer_norm_rms_epsilon": RMS,
    }
    heads, kv = _per_layer(keys, "attention.head_count"), _per_layer(keys, "attention.head_count_kv")
    k, v = _dims(keys)
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys)):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v)
        tensors |= {f"blk.{i}.ffn_norm.weight": (EMBED,)} | _moe(i, EMBED, 2)
    return write_sparse(path, "llama4", "llama-4-scout-tiny", keys, tensors)


def write_smollm3(path: Path) -> Path:
    keys = _example("smollm3") | {
        "embedding_length": EMBED,
        "feed_forward_length": FFN,
        "attention.layer_norm_rms_epsilon": RMS,
    }
    heads, kv = _per_layer(keys, "attention.head_count"), _per_layer(keys, "attention.head_count_kv")
    k, v = _dims(keys)
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys)):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v) | _mlp(i, EMBED)
    return write_sparse(path, "smollm3", "smollm3-3b-tiny", keys, tensors)


def write_glm4moe(path: Path) -> Path:
    """src/models/glm4-moe.cpp: layer 0 dense (leading_dense_block_count), MoE with a shared expert and expert
    bias after it; the MTP layer's tensors are left out, as a trunk-only GGUF."""
    keys = _example("glm4moe") | {
        "embedding_length": EMBED,
        "feed_forward_length": FFN,
        "expert_feed_forward_length": FFN,
        "expert_count": 2,
        "expert_used_count": 1,
        "expert_shared_count": 1,
        "leading_dense_block_count": 1,
        "attention.layer_norm_rms_epsilon": RMS,
    }
    nextn = keys["nextn_predict_layers"]
    assert isinstance(nextn, int)
    heads, kv = _per_layer(keys, "attention.head_count"), _per_layer(keys, "attention.head_count_kv")
    k, v = _dims(keys)
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys) - nextn):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v)
        tensors[f"blk.{i}.post_attention_norm.weight"] = (EMBED,)
        tensors |= _mlp(i, EMBED, norm=None) if i == 0 else _moe(i, EMBED, 2, probs_bias=True)
    return write_sparse(path, "glm4moe", "glm-4.5-air-tiny", keys, tensors)


def _square_attention(arch: str, heads_for_embd: int) -> tuple[dict[str, object], int, int, int, int]:
    """Architectures whose output projection is n_embd x n_embd: n_embd = heads x head_dim. The query heads are
    set to the KV heads (the KV geometry stays the model's)."""
    keys = _example(arch)
    k, v = _dims(keys)
    embd = heads_for_embd * k
    keys |= {"embedding_length": embd, "attention.head_count": heads_for_embd, "feed_forward_length": FFN}
    return keys, embd, k, v, heads_for_embd


def write_exaone4(path: Path) -> Path:
    """src/models/exaone4.cpp: post-norms only, q/k norms, o {n_embd, n_embd}; no window keys, so a 64-layer
    model slides with llama.cpp's hard-coded 4096 on three of every four layers."""
    kv_heads = _per_layer(_example("exaone4"), "attention.head_count_kv")[0]
    keys, embd, k, v, heads = _square_attention("exaone4", kv_heads)
    keys["attention.layer_norm_rms_epsilon"] = RMS
    tensors = _embeddings(embd)
    for i in range(_layers(keys)):
        tensors |= _attention(i, embd, heads * k, kv_heads * k, kv_heads * v, norm=False)
        tensors |= {
            f"blk.{i}.post_attention_norm.weight": (embd,),
            f"blk.{i}.attn_q_norm.weight": (k,),
            f"blk.{i}.attn_k_norm.weight": (k,),
            f"blk.{i}.post_ffw_norm.weight": (embd,),
        }
        tensors |= _mlp(i, embd, norm=None)
    return write_sparse(path, "exaone4", "exaone-4-32b-tiny", keys, tensors)


def write_cohere2(path: Path) -> Path:
    """src/models/cohere2.cpp: q and o are n_embd wide (head_dim = n_embd / n_head), logit scale and a layer
    norm epsilon required, no pattern key: llama.cpp makes every 4th layer global."""
    kv_heads = _per_layer(_example("cohere2"), "attention.head_count_kv")[0]
    keys, embd, k, v, heads = _square_attention("cohere2", kv_heads)
    keys |= {"logit_scale": 0.0625, "attention.layer_norm_epsilon": RMS}
    tensors = _embeddings(embd)
    for i in range(_layers(keys)):
        tensors |= _attention(i, embd, heads * k, kv_heads * k, kv_heads * v) | _mlp(i, embd, norm=None)
    return write_sparse(path, "cohere2", "command-r7b-tiny", keys, tensors)


def write_gemma3n(path: Path) -> Path:
    """src/models/gemma3n.cpp: AltUp (4 inputs), Laurel (rank 64) and per-layer inputs of 256 (the llama_hparams
    defaults), q/k norms and post norms on every layer."""
    keys = _example("gemma3n") | {
        "embedding_length": EMBED,
        "feed_forward_length": FFN,
        "attention.layer_norm_rms_epsilon": 1e-6,
    }
    n, altup, laurel, per_layer = _layers(keys), 4, 64, 256
    heads, kv = _per_layer(keys, "attention.head_count"), _per_layer(keys, "attention.head_count_kv")
    k, v = _dims(keys)
    tensors = _embeddings(EMBED) | {
        "altup_proj.weight": (EMBED, EMBED, altup - 1),
        "altup_unembd_proj.weight": (EMBED, EMBED, altup - 1),
        "per_layer_token_embd.weight": (per_layer * n, VOCAB),
        "per_layer_model_proj.weight": (EMBED, per_layer * n),
        "per_layer_proj_norm.weight": (per_layer,),
    }
    for i in range(n):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v)
        tensors |= {
            f"blk.{i}.attn_q_norm.weight": (k,),
            f"blk.{i}.attn_k_norm.weight": (k,),
            f"blk.{i}.post_attention_norm.weight": (EMBED,),
            f"blk.{i}.post_ffw_norm.weight": (EMBED,),
            f"blk.{i}.inp_gate.weight": (EMBED, per_layer),
            f"blk.{i}.proj.weight": (per_layer, EMBED),
            f"blk.{i}.post_norm.weight": (EMBED,),
            f"blk.{i}.altup_correct_coef.weight": (altup, altup),
            f"blk.{i}.altup_correct_scale.weight": (EMBED,),
            f"blk.{i}.altup_predict_coef.weight": (altup, altup * altup),
            f"blk.{i}.altup_router.weight": (EMBED, altup),
            f"blk.{i}.altup_router_norm.weight": (EMBED,),
            f"blk.{i}.laurel_l.weight": (EMBED, laurel),
            f"blk.{i}.laurel_r.weight": (laurel, EMBED),
            f"blk.{i}.laurel_post_norm.weight": (EMBED,),
        }
        tensors |= _mlp(i, EMBED)
    return write_sparse(path, "gemma3n", "gemma-3n-e4b-tiny", keys, tensors)


def write_lfm2(path: Path) -> Path:
    """src/models/lfm2.cpp: the short-conv state spans the hidden size, so it stays the model's (1,024);
    head_count_kv 0 marks a conv layer; the output norm is named token_embd_norm."""
    keys = _example("lfm2") | {"feed_forward_length": FFN, "attention.layer_norm_rms_epsilon": RMS}
    embd = keys["embedding_length"]
    assert isinstance(embd, int)
    heads, kv = _per_layer(keys, "attention.head_count"), _per_layer(keys, "attention.head_count_kv")
    l_cache = keys["shortconv.l_cache"]
    assert isinstance(l_cache, int)
    dim = embd // heads[0]
    tensors = _embeddings(embd, "token_embd_norm.weight")
    for i in range(_layers(keys)):
        tensors |= _mlp(i, embd) | {f"blk.{i}.attn_norm.weight": (embd,)}
        if kv[i]:
            tensors |= _attention(i, embd, embd, kv[i] * dim, kv[i] * dim, norm=False)
            tensors |= {f"blk.{i}.attn_q_norm.weight": (dim,), f"blk.{i}.attn_k_norm.weight": (dim,)}
        else:
            tensors |= {
                f"blk.{i}.shortconv.conv.weight": (l_cache, embd),
                f"blk.{i}.shortconv.in_proj.weight": (embd, 3 * embd),
                f"blk.{i}.shortconv.out_proj.weight": (embd, embd),
            }
    return write_sparse(path, "lfm2", "lfm2-350m-tiny", keys, tensors)


def _int(keys: dict[str, object], key: str) -> int:
    value = keys[key]
    assert isinstance(value, int), key
    return value


def _ssm(keys: dict[str, object]) -> tuple[int, int, int, int, int]:
    """(inner, state, groups, heads, conv kernel) of a Mamba-2 GGUF."""
    names = ("inner_size", "state_size", "group_count", "time_step_rank", "conv_kernel")
    inner, state, groups, heads, conv = (_int(keys, f"ssm.{name}") for name in names)
    return inner, state, groups, heads, conv


def write_falcon_h1(path: Path) -> Path:
    """src/models/falcon-h1.cpp: every layer has a Mamba-2 mixer and attention; ffn_norm has no .weight suffix."""
    keys = _example("falcon-h1") | {"feed_forward_length": FFN, "attention.layer_norm_rms_epsilon": RMS}
    embd = keys["embedding_length"]
    assert isinstance(embd, int)
    inner, state, groups, ssm_heads, conv = _ssm(keys)
    heads, kv = _per_layer(keys, "attention.head_count"), _per_layer(keys, "attention.head_count_kv")
    k, v = _dims(keys)
    tensors = _embeddings(embd)
    for i in range(_layers(keys)):
        tensors |= _mamba2(i, embd, inner, state, groups, ssm_heads, conv, norm=True)
        tensors |= _attention(i, embd, heads[i] * k, kv[i] * k, kv[i] * v)
        tensors |= _mlp(i, embd, norm=None) | {f"blk.{i}.ffn_norm": (embd,)}
    return write_sparse(path, "falcon-h1", "falcon-h1-0.5b-tiny", keys, tensors)


def write_nemotron_h_moe(path: Path) -> Path:
    """src/models/nemotron-h.cpp: head_count_kv and feed_forward_length per layer tell Mamba-2 (both 0),
    attention (KV heads) and MLP layers apart; expert_count 0 keeps the MLP layers dense."""
    keys = _example("nemotron_h_moe") | {"embedding_length": EMBED, "attention.layer_norm_epsilon": RMS}
    inner, state, groups, ssm_heads, conv = _ssm(keys)
    heads, kv = _per_layer(keys, "attention.head_count"), _per_layer(keys, "attention.head_count_kv")
    ff = _per_layer(keys, "feed_forward_length")
    k, v = _dims(keys)
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys)):
        tensors[f"blk.{i}.attn_norm.weight"] = (EMBED,)
        if kv[i] == 0 and ff[i] == 0:
            tensors |= _mamba2(i, EMBED, inner, state, groups, ssm_heads, conv, norm=True)
        elif ff[i] == 0:
            tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v, norm=False)
        else:
            tensors |= _mlp(i, EMBED, ff[i], gate=False, norm=None)
    return write_sparse(path, "nemotron_h_moe", "nemotron-3-nano-tiny", keys, tensors)


def _mla_layer(i: int, embd: int, heads: int, q_lora: int, k_mla: int, v_mla: int, rope: int, rank: int) -> Shapes:
    """DeepSeek-style MLA with split k_b / v_b (an MLA GGUF, llama.cpp PR #12801)."""
    return {
        f"blk.{i}.attn_norm.weight": (embd,),
        f"blk.{i}.attn_q_a_norm.weight": (q_lora,),
        f"blk.{i}.attn_kv_a_norm.weight": (rank,),
        f"blk.{i}.attn_q_a.weight": (embd, q_lora),
        f"blk.{i}.attn_q_b.weight": (q_lora, heads * k_mla),
        f"blk.{i}.attn_kv_a_mqa.weight": (embd, rank + rope),
        f"blk.{i}.attn_k_b.weight": (k_mla - rope, rank, heads),
        f"blk.{i}.attn_v_b.weight": (rank, v_mla, heads),
        f"blk.{i}.attn_output.weight": (heads * v_mla, embd),
        f"blk.{i}.ffn_norm.weight": (embd,),
    }


def _indexer(i: int, embd: int, q_lora: int, heads: int, dim: int) -> Shapes:
    return {
        f"blk.{i}.indexer.k_norm.weight": (dim,),
        f"blk.{i}.indexer.k_norm.bias": (dim,),
        f"blk.{i}.indexer.proj.weight": (embd, heads),
        f"blk.{i}.indexer.attn_k.weight": (embd, dim),
        f"blk.{i}.indexer.attn_q_b.weight": (q_lora, heads * dim),
    }


def _write_sparse_mla(path: Path, arch: str, name: str, full: Callable[[int], bool], **changes: object) -> Path:
    """src/models/deepseek32.cpp and glm-dsa.cpp: MLA with q compression, the DSA indexer (on the layers that
    run one), one leading dense layer, MoE with a shared expert after it; MTP layer tensors left out. The
    attention and indexer head counts do not shape either cache (one latent, one key per token), so the
    tiny model runs 8 and 4 of them."""
    q_lora = 32
    keys = _example(arch) | {
        "attention.head_count": 8,
        "attention.indexer.head_count": 4,
        "embedding_length": EMBED,
        "feed_forward_length": FFN,
        "expert_feed_forward_length": FFN,
        "expert_count": 2,
        "expert_used_count": 1,
        "expert_shared_count": 1,
        "expert_gating_func": 2,  # sigmoid
        "leading_dense_block_count": 1,
        "attention.q_lora_rank": q_lora,
        "attention.layer_norm_rms_epsilon": RMS,
        **changes,
    }
    heads = _int(keys, "attention.head_count")
    k_mla, v_mla = _int(keys, "attention.key_length_mla"), _int(keys, "attention.value_length_mla")
    rope, rank = _int(keys, "rope.dimension_count"), _int(keys, "attention.kv_lora_rank")
    idx_heads, idx_dim = _int(keys, "attention.indexer.head_count"), _int(keys, "attention.indexer.key_length")
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys) - _int(keys, "nextn_predict_layers")):
        tensors |= _mla_layer(i, EMBED, heads, q_lora, k_mla, v_mla, rope, rank)
        if full(i):
            tensors |= _indexer(i, EMBED, q_lora, idx_heads, idx_dim)
        tensors |= _mlp(i, EMBED, norm=None) if i == 0 else _moe(i, EMBED, 2, probs_bias=True)
    return write_sparse(path, arch, name, keys, tensors)


def write_deepseek32(path: Path) -> Path:
    return _write_sparse_mla(path, "deepseek32", "deepseek-v3.2-tiny", lambda i: True)


def write_glm_dsa(path: Path) -> Path:
    return _write_sparse_mla(path, "glm-dsa", "glm-5-tiny", lambda i: True)


def write_glm52_dsa(path: Path) -> Path:
    """GLM-5.2's 1,048,576-token context without an indexer.types key: llama.cpp applies its hard-coded
    GLM-5.2 pattern (layers 0, 1, then every 4th from 2 run an indexer); the others carry no indexer tensors."""
    return _write_sparse_mla(
        path, "glm-dsa", "glm-5.2-tiny", lambda i: i < 2 or (i - 2) % 4 == 0, context_length=1_048_576
    )


def write_minicpm3(path: Path) -> Path:
    """src/models/minicpm3.cpp: MLA weights (q compression, unsplit kv_b) over a plain per-head KV cache. The
    hidden size stays the model's: the V head dim is embedding_length / head_count (no value_length key)."""
    q_lora = 32
    keys = _example("minicpm3") | {
        "feed_forward_length": FFN,
        "attention.q_lora_rank": q_lora,
        "attention.layer_norm_rms_epsilon": RMS,
    }
    embd, heads = _int(keys, "embedding_length"), _int(keys, "attention.head_count")
    k_dim, rope, rank = (
        _int(keys, "attention.key_length"),
        _int(keys, "rope.dimension_count"),
        _int(keys, "attention.kv_lora_rank"),
    )
    v_dim = embd // heads
    tensors = _embeddings(embd)
    for i in range(_layers(keys)):
        tensors |= {
            f"blk.{i}.attn_norm.weight": (embd,),
            f"blk.{i}.attn_q_a_norm.weight": (q_lora,),
            f"blk.{i}.attn_kv_a_norm.weight": (rank,),
            f"blk.{i}.attn_q_a.weight": (embd, q_lora),
            f"blk.{i}.attn_q_b.weight": (q_lora, heads * k_dim),
            f"blk.{i}.attn_kv_a_mqa.weight": (embd, rank + rope),
            f"blk.{i}.attn_kv_b.weight": (rank, heads * (k_dim - rope + v_dim)),
            f"blk.{i}.attn_output.weight": (heads * v_dim, embd),
        }
        tensors |= _mlp(i, embd)
    return write_sparse(path, "minicpm3", "minicpm3-4b-tiny", keys, tensors)


def write_gemma4(path: Path, **changes: object) -> Path:
    """src/models/gemma4.cpp: q/k norms and post norms on every layer, rope_freqs on full layers (loaded once),
    no per-layer inputs (embedding_length_per_layer_input 0, as the 26B) and no experts (they are optional)."""
    keys = _example("gemma4") | {
        "embedding_length": EMBED,
        "feed_forward_length": FFN,
        "embedding_length_per_layer_input": 0,
        "rope.dimension_count": 512,  # the RoPE span of each layer type: its head dim
        "rope.dimension_count_swa": 256,
        "attention.layer_norm_rms_epsilon": 1e-6,
        **changes,
    }
    heads, kv = _per_layer(keys, "attention.head_count"), _per_layer(keys, "attention.head_count_kv")
    swa = keys["attention.sliding_window_pattern"]
    assert isinstance(swa, list)
    full_dim, swa_dim = _int(keys, "attention.key_length"), _int(keys, "attention.key_length_swa")
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys)):
        dim = swa_dim if swa[i] else full_dim
        tensors |= _attention(i, EMBED, heads[i] * dim, kv[i] * dim, kv[i] * dim)
        tensors |= {
            f"blk.{i}.attn_q_norm.weight": (dim,),
            f"blk.{i}.attn_k_norm.weight": (dim,),
            f"blk.{i}.post_attention_norm.weight": (EMBED,),
            f"blk.{i}.post_ffw_norm.weight": (EMBED,),
        }
        if not swa[i]:
            tensors["rope_freqs.weight"] = (full_dim // 2,)
        tensors |= _mlp(i, EMBED)
    return write_sparse(path, "gemma4", "gemma-4-26b-a4b-tiny", keys, tensors)


def write_gemma4_shared(path: Path) -> Path:
    """The layer structure of Gemma 4's small models (35 layers, every 5th full, the last 20 reusing KV: llama.cpp
    needs layers 13 and 14 to be sliding and full) with the 26B's heads; not a released model."""
    full = [(i + 1) % 5 == 0 for i in range(35)]
    return write_gemma4(
        path,
        block_count=35,
        **{
            "attention.head_count_kv": [2 if f else 8 for f in full],
            "attention.sliding_window_pattern": [not f for f in full],
            "attention.shared_kv_layers": 20,
        },
    )


def write_kimi_linear(path: Path) -> Path:
    """src/models/kimi-linear.cpp: KDA layers (separate q/k/v short convs, forget and output gates) where
    head_count_kv is 0, MLA without q compression elsewhere; layer 0 dense, MoE after it."""
    keys = _example("kimi-linear") | {
        "embedding_length": EMBED,
        "feed_forward_length": FFN,
        "expert_feed_forward_length": FFN,
        "expert_count": 2,
        "expert_used_count": 1,
        "expert_shared_count": 1,
        "expert_gating_func": 2,
        "leading_dense_block_count": 1,
        "attention.layer_norm_rms_epsilon": RMS,
    }
    heads, kv = _per_layer(keys, "attention.head_count"), _per_layer(keys, "attention.head_count_kv")
    dim, conv = _int(keys, "kda.head_dim"), _int(keys, "ssm.conv_kernel")
    k_mla, v_mla = _int(keys, "attention.key_length_mla"), _int(keys, "attention.value_length_mla")
    rope, rank = _int(keys, "rope.dimension_count"), _int(keys, "attention.kv_lora_rank")
    tensors = _embeddings(EMBED) | {"output.weight": (EMBED, VOCAB)}
    for i in range(_layers(keys)):
        proj = dim * heads[0]
        tensors[f"blk.{i}.attn_norm.weight"] = (EMBED,)
        if kv[i] == 0:
            tensors |= {f"blk.{i}.ssm_conv1d_{x}.weight": (conv, 1, proj) for x in "qkv"}
            tensors |= _attention(i, EMBED, proj, proj, proj, norm=False)
            tensors |= {
                f"blk.{i}.ssm_f_a.weight": (EMBED, dim),
                f"blk.{i}.ssm_f_b.weight": (dim, proj),
                f"blk.{i}.ssm_beta.weight": (EMBED, heads[0]),
                f"blk.{i}.ssm_a": (1, heads[0]),
                f"blk.{i}.ssm_dt.bias": (proj,),
                f"blk.{i}.ssm_g_a.weight": (EMBED, dim),
                f"blk.{i}.ssm_g_b.weight": (dim, proj),
                f"blk.{i}.ssm_norm.weight": (dim,),
            }
        else:
            tensors |= {
                f"blk.{i}.attn_kv_a_norm.weight": (rank,),
                f"blk.{i}.attn_q.weight": (EMBED, heads[i] * k_mla),
                f"blk.{i}.attn_kv_a_mqa.weight": (EMBED, rank + rope),
                f"blk.{i}.attn_k_b.weight": (k_mla - rope, rank, heads[i]),
                f"blk.{i}.attn_v_b.weight": (rank, v_mla, heads[i]),
                f"blk.{i}.attn_output.weight": (heads[i] * v_mla, EMBED),
            }
        tensors[f"blk.{i}.ffn_norm.weight"] = (EMBED,)
        tensors |= _mlp(i, EMBED, norm=None) if i == 0 else _moe(i, EMBED, 2, probs_bias=True)
    return write_sparse(path, "kimi-linear", "kimi-linear-48b-tiny", keys, tensors)


def _full_heads(arch: str, **changes: object) -> tuple[dict[str, object], list[int], list[int], int, int]:
    """Architectures whose q and output projections are head_count x head_dim wide: the hidden size is tiny and
    the heads stay the model's."""
    keys = _example(arch) | {"embedding_length": EMBED, "feed_forward_length": FFN, **changes}
    heads, kv = _per_layer(keys, "attention.head_count"), _per_layer(keys, "attention.head_count_kv")
    k, v = _dims(keys)
    return keys, heads, kv, k, v


def write_phi3(path: Path) -> Path:
    """src/models/phi3.cpp: o {n_embd, n_embd}, fused gate+up (ffn_up 2 x n_ff); the GGUF's sliding_window 2047
    is read and then disabled (swa_type none): one cache over every layer. The name avoids "phi-3", which makes
    llama.cpp's vocabulary loader look up Phi-3's "<|endoftext|>" token."""
    kv_heads = _per_layer(_example("phi3"), "attention.head_count_kv")[0]
    keys, embd, k, v, heads = _square_attention("phi3", kv_heads)
    keys["attention.layer_norm_rms_epsilon"] = RMS
    tensors = _embeddings(embd)
    for i in range(_layers(keys)):
        tensors |= _attention(i, embd, heads * k, kv_heads * k, kv_heads * v)
        tensors |= {
            f"blk.{i}.ffn_norm.weight": (embd,),
            f"blk.{i}.ffn_up.weight": (embd, 2 * FFN),
            f"blk.{i}.ffn_down.weight": (FFN, embd),
        }
    return write_sparse(path, "phi3", "tiny-phi-mini-4k", keys, tensors)


def write_command_r(path: Path) -> Path:
    """src/models/command-r.cpp: q and o n_embd wide, parallel attention and MLP (no ffn_norm), tied output; q/k
    norms only from 64 layers (Command R+), a layer norm epsilon required."""
    kv_heads = _per_layer(_example("command-r"), "attention.head_count_kv")[0]
    keys, embd, k, v, heads = _square_attention("command-r", kv_heads)
    keys |= {"logit_scale": 0.0625, "attention.layer_norm_epsilon": RMS}
    tensors = _embeddings(embd)
    for i in range(_layers(keys)):
        tensors |= _attention(i, embd, heads * k, kv_heads * k, kv_heads * v) | _mlp(i, embd, norm=None)
    return write_sparse(path, "command-r", "command-r-08-2024-tiny", keys, tensors)


def write_glm4(path: Path, **changes: object) -> Path:
    """src/models/glm4.cpp: post-attention and post-FFN norms, fused gate+up (ffn_up 2 x n_ff). The loader
    skips (but still requires) an MTP layer's norms, output, MLP and nextn projection (q/k/v optional)."""
    keys, heads, kv, k, v = _full_heads("glm4", **{"attention.layer_norm_rms_epsilon": RMS, **changes})
    nextn = keys.get("nextn_predict_layers", 0)
    assert isinstance(nextn, int)
    n = _layers(keys)
    tensors = _embeddings(EMBED)
    for i in range(n):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v)
        tensors |= {
            f"blk.{i}.post_attention_norm.weight": (EMBED,),
            f"blk.{i}.ffn_norm.weight": (EMBED,),
            f"blk.{i}.ffn_up.weight": (EMBED, 2 * FFN),
            f"blk.{i}.ffn_down.weight": (FFN, EMBED),
            f"blk.{i}.post_ffw_norm.weight": (EMBED,),
        }
        if i >= n - nextn:
            tensors |= {
                f"blk.{i}.nextn.eh_proj.weight": (2 * EMBED, EMBED),
                f"blk.{i}.nextn.enorm.weight": (EMBED,),
                f"blk.{i}.nextn.hnorm.weight": (EMBED,),
            }
    return write_sparse(path, "glm4", "glm-4-9b-0414-tiny", keys, tensors)


def write_glm4_mtp(path: Path) -> Path:
    """GLM-4 geometry with one MTP layer appended (block_count 41, as convert_hf_to_gguf writes GLM-OCR)."""
    return write_glm4(path, block_count=41, nextn_predict_layers=1)


def write_olmo(path: Path) -> Path:
    """src/models/olmo.cpp: non-parametric layer norms (no norm tensors at all), q and o n_embd wide."""
    kv_heads = _per_layer(_example("olmo"), "attention.head_count_kv")[0]
    keys, embd, k, v, heads = _square_attention("olmo", kv_heads)
    keys["attention.layer_norm_epsilon"] = RMS
    tensors: Shapes = {"token_embd.weight": (embd, VOCAB)}
    for i in range(_layers(keys)):
        tensors |= _attention(i, embd, heads * k, kv_heads * k, kv_heads * v, norm=False) | _mlp(i, embd, norm=None)
    return write_sparse(path, "olmo", "olmo-1.7-7b-tiny", keys, tensors)


def write_olmo2(path: Path, **changes: object) -> Path:
    """src/models/olmo2.cpp: q and o n_embd wide, q/k norms over all heads, post norms only, an untied output."""
    kv_heads = _per_layer(_example("olmo2"), "attention.head_count_kv")[0]
    keys, embd, k, v, heads = _square_attention("olmo2", kv_heads)
    keys |= {"attention.layer_norm_rms_epsilon": RMS, **changes}
    tensors = _embeddings(embd) | {"output.weight": (embd, VOCAB)}
    for i in range(_layers(keys)):
        tensors |= _attention(i, embd, heads * k, kv_heads * k, kv_heads * v, norm=False)
        tensors |= {
            f"blk.{i}.attn_q_norm.weight": (heads * k,),
            f"blk.{i}.attn_k_norm.weight": (kv_heads * k,),
            f"blk.{i}.post_attention_norm.weight": (embd,),
            f"blk.{i}.post_ffw_norm.weight": (embd,),
        }
        tensors |= _mlp(i, embd, norm=None)
    return write_sparse(path, "olmo2", "olmo-2-1124-7b-tiny", keys, tensors)


def write_olmo3(path: Path) -> Path:
    """OLMo 3 7B as convert_hf_to_gguf writes it (architecture olmo2): window 4096 and the layer_types pattern
    (three sliding layers, then a full one) as a bool array."""
    n = _layers(_example("olmo2"))
    pattern = [(i + 1) % 4 != 0 for i in range(n)]
    return write_olmo2(path, **{"attention.sliding_window": 4096, "attention.sliding_window_pattern": pattern})


def _write_granite(path: Path, arch: str, name: str, experts: int) -> Path:
    """src/models/granite.cpp / granite-moe.cpp: logit_scale required, rope_freqs optional; dense MLP without
    experts, routed experts (no shared expert without expert_shared_feed_forward_length) with them."""
    extra: dict[str, object] = {"attention.layer_norm_rms_epsilon": RMS, "logit_scale": 8.0}
    if experts:
        extra |= {"expert_count": experts, "expert_used_count": 1}
    keys, heads, kv, k, v = _full_heads(arch, **extra)
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys)):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v)
        if experts:
            tensors |= {f"blk.{i}.ffn_norm.weight": (EMBED,)} | _moe(i, EMBED, experts, shared=False)
        else:
            tensors |= _mlp(i, EMBED)
    return write_sparse(path, arch, name, keys, tensors)


def write_granite(path: Path) -> Path:
    return _write_granite(path, "granite", "granite-3.3-8b-tiny", 0)


def write_granitemoe(path: Path) -> Path:
    return _write_granite(path, "granitemoe", "granite-3.1-3b-a800m-tiny", 2)


def write_starcoder2(path: Path) -> Path:
    """src/models/starcoder2.cpp: layer norms with biases, q and o n_embd wide, output bias, non-gated MLP with
    biases."""
    kv_heads = _per_layer(_example("starcoder2"), "attention.head_count_kv")[0]
    keys, embd, k, v, heads = _square_attention("starcoder2", kv_heads)
    keys["attention.layer_norm_epsilon"] = RMS
    tensors = _embeddings(embd) | {"output_norm.bias": (embd,)}
    for i in range(_layers(keys)):
        tensors |= _attention(i, embd, heads * k, kv_heads * k, kv_heads * v)
        tensors |= _mlp(i, embd, gate=False)
        tensors |= {
            f"blk.{i}.attn_norm.bias": (embd,),
            f"blk.{i}.attn_output.bias": (embd,),
            f"blk.{i}.ffn_norm.bias": (embd,),
            f"blk.{i}.ffn_down.bias": (embd,),
            f"blk.{i}.ffn_up.bias": (FFN,),
        }
    return write_sparse(path, "starcoder2", "starcoder2-15b-tiny", keys, tensors)


def write_ernie4_5_moe(path: Path) -> Path:
    """src/models/ernie4-5.cpp (shared by ernie4_5-moe): one leading dense layer, then routed experts on every
    layer (interleave_moe_layer_step 1, required); expert_feed_forward_length required."""
    keys, heads, kv, k, v = _full_heads(
        "ernie4_5-moe",
        **{
            "attention.layer_norm_rms_epsilon": RMS,
            "expert_feed_forward_length": FFN,
            "expert_count": 2,
            "expert_used_count": 1,
            "interleave_moe_layer_step": 1,
            "leading_dense_block_count": 1,
        },
    )
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys)):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v)
        tensors |= (
            _mlp(i, EMBED) if i == 0 else {f"blk.{i}.ffn_norm.weight": (EMBED,)} | _moe(i, EMBED, 2, shared=False)
        )
    return write_sparse(path, "ernie4_5-moe", "ernie-4.5-21b-a3b-tiny", keys, tensors)


def write_ernie4_5(path: Path) -> Path:
    """src/models/ernie4-5.cpp, dense (ERNIE-4.5-0.3B's architecture) with the 21B's attention geometry."""
    keys, heads, kv, k, v = _full_heads("ernie4_5", **{"attention.layer_norm_rms_epsilon": RMS})
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys)):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v) | _mlp(i, EMBED)
    return write_sparse(path, "ernie4_5", "ernie-4.5-dense-tiny", keys, tensors)


def write_seed_oss(path: Path) -> Path:
    """src/models/seed-oss.cpp: q and o head_count x head_dim wide; post_attention_norm is the only pre-MLP norm
    (no ffn_norm)."""
    keys, heads, kv, k, v = _full_heads("seed_oss", **{"attention.layer_norm_rms_epsilon": RMS})
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys)):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v)
        tensors |= {f"blk.{i}.post_attention_norm.weight": (EMBED,)} | _mlp(i, EMBED, norm=None)
    return write_sparse(path, "seed_oss", "seed-oss-36b-tiny", keys, tensors)


def write_hunyuan_dense(path: Path) -> Path:
    """src/models/hunyuan-vl.cpp (which hunyuan-dense reuses): per-head q/k norms, dense MLP."""
    keys, heads, kv, k, v = _full_heads("hunyuan-dense", **{"attention.layer_norm_rms_epsilon": RMS})
    tensors = _embeddings(EMBED)
    for i in range(_layers(keys)):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v) | _mlp(i, EMBED)
        tensors |= {f"blk.{i}.attn_q_norm.weight": (k,), f"blk.{i}.attn_k_norm.weight": (k,)}
    return write_sparse(path, "hunyuan-dense", "hunyuan-7b-tiny", keys, tensors)


def write_chatglm(path: Path) -> Path:
    """src/models/chatglm.cpp: q head_count x head_dim and o n_embd x n_embd wide (so n_embd = heads x head_dim),
    fused gate+up (ffn_up 2 x n_ff)."""
    kv_heads = _per_layer(_example("chatglm"), "attention.head_count_kv")[0]
    keys, embd, k, v, heads = _square_attention("chatglm", kv_heads)
    keys["attention.layer_norm_rms_epsilon"] = RMS
    tensors = _embeddings(embd)
    for i in range(_layers(keys)):
        tensors |= _attention(i, embd, heads * k, kv_heads * k, kv_heads * v)
        tensors |= {
            f"blk.{i}.ffn_norm.weight": (embd,),
            f"blk.{i}.ffn_up.weight": (embd, 2 * FFN),
            f"blk.{i}.ffn_down.weight": (FFN, embd),
        }
    return write_sparse(path, "chatglm", "glm-4-9b-chat-hf-tiny", keys, tensors)


def write_minimax_m2(path: Path) -> Path:
    """src/models/minimax-m2.cpp: q/k norms over all heads, routed experts (sigmoid gating) with a required
    expert bias on every layer, an untied output."""
    keys, heads, kv, k, v = _full_heads(
        "minimax-m2",
        **{
            "attention.layer_norm_rms_epsilon": RMS,
            "expert_feed_forward_length": FFN,
            "expert_count": 2,
            "expert_used_count": 1,
            "expert_gating_func": 2,  # sigmoid
        },
    )
    tensors = _embeddings(EMBED) | {"output.weight": (EMBED, VOCAB)}
    for i in range(_layers(keys)):
        tensors |= _attention(i, EMBED, heads[i] * k, kv[i] * k, kv[i] * v)
        tensors |= {f"blk.{i}.attn_q_norm.weight": (heads[i] * k,), f"blk.{i}.attn_k_norm.weight": (kv[i] * k,)}
        tensors |= {f"blk.{i}.ffn_norm.weight": (EMBED,)} | _moe(i, EMBED, 2, shared=False, probs_bias=True)
    return write_sparse(path, "minimax-m2", "minimax-m2-tiny", keys, tensors)


WRITERS: dict[str, Callable[[Path], Path]] = {
    "llama4": write_llama4,
    "smollm3": write_smollm3,
    "glm4moe": write_glm4moe,
    "exaone4": write_exaone4,
    "cohere2": write_cohere2,
    "gemma3n": write_gemma3n,
    "lfm2": write_lfm2,
    "falcon-h1": write_falcon_h1,
    "nemotron_h_moe": write_nemotron_h_moe,
    "deepseek32": write_deepseek32,
    "glm-dsa": write_glm_dsa,
    "glm-dsa-5.2": write_glm52_dsa,
    "minicpm3": write_minicpm3,
    "kimi-linear": write_kimi_linear,
    "gemma4": write_gemma4,
    "gemma4-shared-kv": write_gemma4_shared,
    "phi3": write_phi3,
    "command-r": write_command_r,
    "glm4": write_glm4,
    "glm4-mtp": write_glm4_mtp,
    "olmo2": write_olmo2,
    "olmo3": write_olmo3,
    "granite": write_granite,
    "granitemoe": write_granitemoe,
    "starcoder2": write_starcoder2,
    "ernie4_5-moe": write_ernie4_5_moe,
    "ernie4_5": write_ernie4_5,
    "seed_oss": write_seed_oss,
    "hunyuan-dense": write_hunyuan_dense,
    "minimax-m2": write_minimax_m2,
    "olmo": write_olmo,
    "chatglm": write_chatglm,
}
