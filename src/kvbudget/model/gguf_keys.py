"""The GGUF metadata keys (after ``{arch}.``) each family of readers consumes: the registry
(model/architectures.py) names them without importing the readers themselves (model/gguf_readers.py), which
load only when a GGUF file is read."""

from __future__ import annotations

ATTN = frozenset({"attention.head_count_kv", "attention.key_length", "attention.value_length"})
SSM = frozenset({"ssm.conv_kernel", "ssm.inner_size", "ssm.state_size", "ssm.time_step_rank", "ssm.group_count"})
SWA = frozenset({"attention.sliding_window", "attention.sliding_window_pattern"})
SWA_DIMS = frozenset({"attention.key_length_swa", "attention.value_length_swa"})
NEXTN = frozenset({"nextn_predict_layers"})

INDEXER = frozenset(
    {
        "attention.indexer.head_count",
        "attention.indexer.key_length",
        "attention.indexer.top_k",
        "attention.indexer.types",
    }
)
