"""What each engine's KV layout rules were held to, per architecture: the line between ``exact`` and ``computed``.

* ``exact``: the layout was checked against the engine's own code, run (the oracle tests run vLLM's and SGLang's
  planning code on these architectures' catalog configs, tests/oracle/test_vllm_oracle.py and
  test_sglang_oracle.py), or against a real allocation (transformers' cache tensors, measured).
* ``computed``: the engine's rule as read from its source and implemented here, never run against the engine.

``ideal`` is kvbudget's own arithmetic (the definition, not an engine), so it is exact by construction.
tests/test_coverage.py derives these sets from the oracle tests' model lists and fails when they differ, so a
label can only say ``exact`` where a test holds it. The memory before the pool (weights as loaded, runtime
overhead) is a separate figure: ``heuristic``, with its error on real logs in docs/measure.md.
"""

from __future__ import annotations

# engine -> architectures (kvbudget.model.architectures names) whose layouts a test holds to the engine's code
HELD_TO_ENGINE_CODE: dict[str, frozenset[str]] = {
    "vllm": frozenset(
        {
            "DeepSeek-V2/V3",
            "Falcon-H1",
            "Gemma 3",
            "gpt-oss",
            "Jamba",
            "Llama",
            "Llama 4",
            "Mamba",
            "Nemotron-H",
            "Qwen3-Next",
        }
    ),
    "sglang": frozenset(
        {"DeepSeek-V2/V3", "Falcon-H1", "Gemma 3", "gpt-oss", "Llama", "Llama 4", "Nemotron-H", "Qwen3-Next"}
    ),
    # the real cache tensors of transformers, measured byte for byte (tests/oracle/test_transformers_measured.py,
    # test_new_architectures_measured.py)
    "transformers": frozenset(
        {
            "Command R",
            "DeepSeek-V2/V3",
            "DeepSeek-V3.2 (sparse MLA)",
            "Falcon-H1",
            "GLM-5 (sparse MLA)",
            "Gemma 2",
            "Gemma 3",
            "Gemma 4",
            "Jamba",
            "Kimi Linear",
            "LFM2",
            "Llama",
            "Llama 3.2 Vision",
            "Llama 4",
            "Mamba",
            "MiniCPM3",
            "Nemotron-H",
            "Qwen3-Next",
            "Qwen3.5",
            "SmolLM3",
            "gpt-oss",
        }
    ),
}
EVIDENCE = {
    "vllm": "checked against vLLM's own planning code (tests/oracle/test_vllm_oracle.py)",
    "sglang": "checked against SGLang's own code (tests/oracle/test_sglang_oracle.py)",
    "transformers": "measured: transformers' real cache tensors (tests/oracle/test_transformers_measured.py)",
}


def layout_label(engine: str, architecture: str | None) -> str:
    """``exact`` where the engine's layout for this architecture was held to the engine's own code, else
    ``computed`` (the rule read from the engine's source, never run against it)."""
    if engine == "ideal":
        return "exact"
    return "exact" if architecture in HELD_TO_ENGINE_CODE.get(engine, frozenset()) else "computed"
