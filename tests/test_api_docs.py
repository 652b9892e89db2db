"""Every Python example in docs/api.md runs, and the API stays lazy: importing kvbudget imports nothing heavy."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"
BLOCKS = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


def test_the_doc_has_examples() -> None:
    assert len(BLOCKS) >= 5


@pytest.mark.parametrize("code", BLOCKS, ids=[f"block{i}" for i in range(len(BLOCKS))])
def test_example_runs(code: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DOC.parents[1])  # examples name files relative to the repository
    exec(compile(code, str(DOC), "exec"), {})


def test_import_kvbudget_is_light() -> None:
    code = "import sys, kvbudget; print(sorted(m for m in sys.modules if m.startswith('kvbudget')))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "['kvbudget']"
