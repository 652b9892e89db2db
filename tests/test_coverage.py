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
