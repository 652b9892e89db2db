"""Start-up: a core command loads none of the command-group modules (cli.EXTENSIONS), while the full
help and every group's own commands still see them all."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvbudget import cli


def _modules_after(argv: list[str]) -> list[str]:
    probe = (
        "import contextlib, io, json, sys\n"
        "from kvbudget.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main({argv!r})\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kvbudget') or m in ('shutil', 'socket'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True).stdout
    loaded: list[str] = json.loads(out)
    return loaded


def test_a_core_command_loads_no_command_group() -> None:
    loaded = _modules_after(["cost", "llama-3.1-70b", "--json"])
    assert "kvbudget.cost" in loaded and "kvbudget.model.sources" in loaded
    assert not set(cli.EXTENSIONS) & set(loaded)
    assert not {"kvbudget.hub", "kvbudget.workload.traces", "shutil", "socket"} & set(loaded)
    # the architecture registry names its GGUF readers; they load only when a GGUF file is read
    assert "kvbudget.model.architectures" in loaded and "kvbudget.model.gguf_readers" not in loaded
    # an engine's layout needs the contract, not the planning records or the overhead model
    assert "kvbudget.engines.contract" in loaded
    assert not {"kvbudget.engines.records", "kvbudget.engines.overhead"} & set(loaded)


def test_a_group_command_loads_the_groups() -> None:
    loaded = _modules_after(["trace", "stats", "--help"])
    assert set(cli.EXTENSIONS) <= set(loaded)


def test_the_full_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    listed = capsys.readouterr().out
    for command in (*cli.CORE, "plan", "compare", "trace", "simulate"):
        assert command in listed, command
    assert cli.main(["cost", "--help"]) == 0
    assert "--sequences" in capsys.readouterr().out


def test_the_help_width_is_the_terminals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "50")
    assert cli._columns() == 50
    monkeypatch.setenv("COLUMNS", "not a number")
    assert cli._columns() >= 1
    help_text = cli.build_parser(command="cost").format_help()
    assert help_text.startswith("usage: kvbudget")


def test_the_engine_listing_is_pkgutils() -> None:
    import pkgutil

    from kvbudget import engines

    assert engines._module_names() == frozenset(m.name for m in pkgutil.iter_modules(engines.__path__))
    assert {"ideal", "vllm", "sglang", "llamacpp"} <= engines._module_names()
