"""Tiny GGUF models with a real model's KV geometry that llama-server loads and runs.

Only what shapes the KV cache is kept at full size (layers, KV heads, head_dim through
``key_length``/``value_length``); the hidden size is 64, the feed-forward width 64 and the
vocabulary is a 259-token SentencePiece byte vocabulary (``<unk> <s> </s>`` + 256 byte tokens),
so one byte of prompt text is one token. Weights are small seeded random numbers in f16: the
model generates meaningless tokens, at full KV cost.

``vocab="bpe"``: a byte-level BPE vocabulary instead (``tokenizer.ggml.model = "gpt2"``, GPT-2's pre-tokenizer):
the 256 byte symbols of GPT-2's byte encoding, a few merges of common pairs (spaces, ``the``, ``in``, digits),
and ChatML's control tokens, so llama-server reports ``vocab_type`` 2 and tokenises as llama.cpp does a GPT-2-style
vocabulary (``llm_tokenizer_bpe_session``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

EMBED = 64
FFN = 64
VOCAB = 259


@dataclass(frozen=True)
class Geometry:
    """The KV-shaping fields of a real model."""

    name: str
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    context_length: int = 131_072


# Llama-3.1-8B's KV geometry (meta-llama/Llama-3.1-8B config.json): 32 layers x 8 KV heads x 128.
LLAMA_31_8B = Geometry("llama-3.1-8b-tiny", layers=32, heads=32, kv_heads=8, head_dim=128)
# Llama-3.2-1B's (meta-llama/Llama-3.2-1B config.json): 16 layers x 8 KV heads x 64 (2048 / 32 heads); a
# sixteenth of the 8B's attention work per token, so a CPU server completes enough requests to measure speeds.
LLAMA_32_1B = Geometry("llama-3.2-1b-tiny", layers=16, heads=32, kv_heads=8, head_dim=64)


def _vocab(w: gguf.GGUFWriter) -> None:
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.BYTE] * 256
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * VOCAB)
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(True)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)


def gpt2_bytes() -> list[str]:
    """GPT-2's byte encoding: each byte as one printable character (openai/gpt-2 src/encoder.py bytes_to_unicode)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte] = chr(256 + extra)
            extra += 1
    return [chars[byte] for byte in range(256)]


# merges of a GPT-2-style vocabulary (Ġ is a space): runs of spaces, a word, digits; each result is a token
BPE_MERGES = [("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("1", "2"), ("Ċ", "Ċ")]
BPE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
BPE_VOCAB = 256 + len(BPE_MERGES) + len(BPE_SPECIALS)


def _bpe_vocab(w: gguf.GGUFWriter) -> None:
    tokens = gpt2_bytes() + [a + b for a, b in BPE_MERGES] + BPE_SPECIALS
    types = [gguf.TokenType.NORMAL] * (256 + len(BPE_MERGES)) + [gguf.TokenType.CONTROL] * len(BPE_SPECIALS)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([f"{a} {b}" for a, b in BPE_MERGES])
    eot = tokens.index("<|endoftext|>")
    w.add_bos_token_id(eot)
    w.add_eos_token_id(eot)
    w.add_add_bos_token(True)  # a BOS on every prompt: the bound's + 2 covers it
    w.add_add_eos_token(False)


def write_llama(
    path: Path, g: Geometry = LLAMA_31_8B, seed: int = 0, letter: str | None = None, vocab: str = "spm"
) -> Path:
    """Write a loadable ``llama``-architecture GGUF with ``g``'s KV geometry; returns ``path``.

    ``letter``: the model generates only that ASCII letter (one byte token), so its output, sent back as text,
    is the same tokens again and the server's prompt cache keeps them: every embedding carries a constant in its
    first dimension that the small random layers never outweigh, the output norm keeps only that dimension, and
    the output row of the letter alone reads it."""
    rng = np.random.default_rng(seed)

    def weight(rows: int, cols: int) -> np.ndarray:  # GGUF shape (cols, rows) = numpy (rows, cols)
        return (rng.standard_normal((rows, cols)) * 0.02).astype(np.float16)

    size = BPE_VOCAB if vocab == "bpe" else VOCAB
    embed, out, out_norm = weight(size, EMBED), weight(size, EMBED), np.ones(EMBED, dtype=np.float32)
    if letter is not None:
        assert vocab == "spm", "a letter of the byte vocabulary"
        assert len(letter) == 1 and letter.isascii() and letter.isalpha(), "one ASCII letter"
        embed[:, 0] = 1.0
        out_norm[:] = 0.0
        out_norm[0] = 1.0
        out[:, 0] = 0.0
        out[3 + ord(letter), 0] = 10.0  # byte tokens follow <unk> <s> </s>

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(g.name)
    w.add_block_count(g.layers)
    w.add_context_length(g.context_length)
    w.add_embedding_length(EMBED)
    w.add_feed_forward_length(FFN)
    w.add_head_count(g.heads)
    w.add_head_count_kv(g.kv_heads)
    w.add_key_length(g.head_dim)
    w.add_value_length(g.head_dim)
    w.add_rope_dimension_count(g.head_dim)
    w.add_rope_freq_base(500_000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    _bpe_vocab(w) if vocab == "bpe" else _vocab(w)
    w.add_tensor("token_embd.weight", embed)
    w.add_tensor("output_norm.weight", out_norm)
    w.add_tensor("output.weight", out)
    q, kv = g.heads * g.head_dim, g.kv_heads * g.head_dim
    for i in range(g.layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(EMBED, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", weight(q, EMBED))
        w.add_tensor(f"blk.{i}.attn_k.weight", weight(kv, EMBED))
        w.add_tensor(f"blk.{i}.attn_v.weight", weight(kv, EMBED))
        w.add_tensor(f"blk.{i}.attn_output.weight", weight(EMBED, q))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(EMBED, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weight(FFN, EMBED))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weight(FFN, EMBED))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weight(EMBED, FFN))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
