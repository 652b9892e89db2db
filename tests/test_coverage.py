"""docs/coverage.md is the coverage matrix the code generates today (kvbudget coverage)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.cli.main import main
from kvbudget.coverage import matrix, render
from kvbudget.engines import engine_names
from kvbudget.model.architectures import ARCHITECTURES

DOC = Path(__file__).resolve().parents[1] / "docs" / "coverage.md"


def test_the_checked_in_matrix_is_the_generated_one() -> None:
    assert DOC.read_text(encoding="utf-8") == render(matrix()), (
        "docs/coverage.md is out of date: run kvbudget coverage --out docs/coverage.md"
    )


def test_every_architecture_has_a_row_and_a_config_sample() -> None:
    rows = matrix()
    assert [row.architecture for row in rows] == list(ARCHITECTURES)
    for row in rows:
        assert len(row.config) == len(row.gguf) == len(engine_names())
        assert row.config_sample != "-", row.architecture.name
        assert any(cell.exact for cell in row.config), row.architecture.name  # read and costed somewhere
        if row.architecture.gguf_reader is not None:
            assert any(cell.exact for cell in row.gguf), row.architecture.name


def test_refusals_carry_the_reason() -> None:
    text = render(matrix())
    assert "refused [" in text and "## Reasons" in text
    assert "sglang: LFM2's short-convolution state" in text
    assert "no GGUF reader" in text


def test_check_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stale = tmp_path / "coverage.md"
    stale.write_text("old\n", encoding="utf-8")
    assert main(["coverage", "--check", str(stale)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["coverage", "--out", str(stale)]) == 0
    assert main(["coverage", "--check", str(stale)]) == 0


def _architectures(names: list[str]) -> set[str]:
    from kvbudget.model import catalog
    from kvbudget.model.architectures import architecture_of
    from kvbudget.model.families import read_spec

    out = set()
    for name in names:
        entry = catalog.lookup(name)
        if entry is not None:
            arch = architecture_of(read_spec(entry.config, name=entry.name, source="catalog").model_type)
            out.add(arch.name if arch else entry.name)
    return out


def test_exact_cells_are_exactly_the_architectures_a_test_holds_to_the_engine() -> None:
    # "exact" in the matrix and the ledger may only name what an oracle test runs: vLLM's and SGLang's own planning
    # code on these catalog models, transformers' real cache tensors measured (the catalog names quoted there)
    import re
    from pathlib import Path

    from kvbudget.engines.evidence import HELD_TO_ENGINE_CODE
    from tests.oracle import test_sglang_oracle, test_vllm_oracle

    assert HELD_TO_ENGINE_CODE["vllm"] == _architectures(list(test_vllm_oracle.MODELS))
    assert HELD_TO_ENGINE_CODE["sglang"] == _architectures(list(test_sglang_oracle.MODELS))
    oracle = Path(__file__).parent / "oracle"
    quoted = [
        name
        for test in ("test_transformers_measured.py", "test_new_architectures_measured.py")
        for name in re.findall(r'"([A-Za-z0-9][\w.\-]+)"', (oracle / test).read_text())
    ]
    assert HELD_TO_ENGINE_CODE["transformers"] == _architectures(quoted)


def test_a_layout_no_test_ran_against_the_engine_is_computed_not_exact() -> None:
    from kvbudget.engines.evidence import layout_label

    assert layout_label("vllm", "Llama") == "exact"
    assert layout_label("vllm", "Qwen2") == "computed"  # read from vLLM's source, never run against it here
    assert layout_label("trtllm", "Llama") == "computed"
    assert layout_label("ideal", "Qwen2") == "exact"  # kvbudget's own arithmetic: the definition


def test_the_oracle_declaration_names_only_its_own_cells() -> None:
    from kvbudget import coverage_oracle as o

    keys = {g.key for g in o.GPUS}
    for key, model in [*o.VLLM_READ_NOT_RUN, *o.VLLM_NOT_AS_SERVED]:
        assert key in keys and model in o.VLLM_MODELS, (key, model)
    assert set(o.VLLM_PP_MODELS) <= set(o.VLLM_MODELS) and set(o.SGLANG_PP_MODELS) <= set(o.SGLANG_MODELS)
    assert set(o.SGLANG_PP_GPUS) <= keys
    # a cell read rather than run is not counted exact: B200's vLLM cells run 4 of the 6 models whole
    assert o.run_models("vllm", "b200", 1) == ("Llama-3.1-8B", "Qwen3-30B-A3B", "gpt-oss-20b", "gemma-2-9b")
    assert o.run_models("trtllm", "h100", 1) == () and o.run_models("vllm", "h100", 16) == ()
    text = render(matrix())
    assert "| vllm | B200 (Blackwell) | 4 run, 1 read [" in text
    assert "| vllm | RTX 5090 (Blackwell, consumer) | 6 run | 6 run | 6 run | 6 run | 4 run |" in text
