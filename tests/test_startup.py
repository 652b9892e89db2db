"""Start-up: a core command loads none of the command-group modules (cli.EXTENSIONS), while the full
help and every group's own commands still see them all; a one-answer command imports no ``typing``."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvbudget.cli import main as cli


def _modules_after(argv: list[str]) -> list[str]:
    probe = (
        "import contextlib, io, json, sys\n"
        "from kvbudget.cli.main import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    main({argv!r})\n"
        "watched = ('shutil', 'socket', 'typing')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kvbudget') or m in watched)))\n"
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
    # the registry names each config reader: a Llama config loads the attention family's module only
    families = {m for m in loaded if m.startswith("kvbudget.model.families.")}
    assert families == {"kvbudget.model.families.attention", "kvbudget.model.families.fields"}
    # an engine's layout needs the contract, not the planning records or the overhead model
    assert "kvbudget.engines.contract" in loaded
    assert not {"kvbudget.engines.records", "kvbudget.engines.overhead"} & set(loaded)


@pytest.mark.parametrize(
    "argv",
    [
        ["cost", "llama-3.1-70b", "--json"],
        ["cost", "deepseek-v3", "--tokens", "128k"],
        ["table", "qwen3-next-80b-a3b"],
        ["table", "gemma-3-27b-it", "--json"],
    ],
)
def test_a_one_answer_command_imports_no_typing(argv: list[str]) -> None:
    # typing is about 3 ms of a start: the Literal aliases (CacheKind, UnitSystem, MlaStorage, ...) exist for the
    # type checker only, and the modules on this path test TYPE_CHECKING without importing it
    loaded = _modules_after(argv)
    assert "typing" not in loaded
    assert "kvbudget.cost" in loaded


def test_the_type_checker_aliases_agree_with_their_runtime_tuples() -> None:
    # model/spec.py's CacheKind (a TYPE_CHECKING-only Literal) and CACHE_KINDS (its values at runtime) are one list
    from kvbudget.model import spec

    assert spec.__file__ is not None
    tree = ast.parse(Path(spec.__file__).read_text(encoding="utf-8"))
    aliases = {
        node.targets[0].id: node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
    }
    literal = aliases["CacheKind"]
    assert isinstance(literal, ast.Subscript)
    assert ast.literal_eval(literal.slice) == spec.CACHE_KINDS
    assert not hasattr(spec, "CacheKind")


def test_every_dataclass_on_the_cost_path_has_a_docstring() -> None:
    # without one, dataclasses writes the signature as __doc__ through inspect.signature at every import
    import dataclasses
    import importlib

    loaded = _modules_after(["cost", "llama-3.1-70b", "--json"])
    undocumented = [
        f"{name}.{cls.__qualname__}"
        for name in loaded
        if name.startswith("kvbudget")
        for cls in vars(importlib.import_module(name)).values()
        if dataclasses.is_dataclass(cls)
        and isinstance(cls, type)
        and cls.__module__ == name
        and (cls.__doc__ or "").startswith(cls.__name__ + "(")
    ]
    assert not undocumented


def test_every_config_reader_the_registry_names_is_a_function() -> None:
    from kvbudget.model.architectures import ARCHITECTURES

    named = [arch for arch in ARCHITECTURES if arch.config_reader_name is not None]
    assert len(named) == len(ARCHITECTURES)
    assert all(callable(arch.config_reader) for arch in named)


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


def _gc_during(
    monkeypatch: pytest.MonkeyPatch, command: str, argv: list[str], raises: BaseException | None = None
) -> bool:
    import gc

    seen: list[bool] = []

    def handler(args: object) -> str:
        seen.append(gc.isenabled())
        if raises is not None:
            raise raises
        return ""

    monkeypatch.setitem(cli.COMMANDS, command, handler)
    assert gc.isenabled()
    cli.main(argv)
    assert gc.isenabled(), "main must leave the collector as it found it"
    return seen[0]


def test_a_one_answer_command_runs_with_the_cyclic_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _gc_during(monkeypatch, "cost", ["cost", "llama-3.1-8b"]) is False
    # an error, or a usage error argparse reports, leaves it on again
    assert _gc_during(monkeypatch, "table", ["table", "llama-3.1-8b"], raises=cli.InputError("bad")) is False
    assert cli.main(["cost"]) == 1
    import gc

    assert gc.isenabled()


def test_a_long_command_keeps_the_collector(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _gc_during(monkeypatch, "measure", ["measure", "llama-3.1-8b"]) is True


def test_one_answer_names_real_commands_and_none_that_runs_long() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) >= cli.ONE_ANSWER  # type: ignore[arg-type]
    assert not {"simulate", "trace", "loadtest", "serve", "measure", "compare", "calibrate", "report"} & cli.ONE_ANSWER
