"""The engine contract: every engine's rules live in its own module, the planner names no engine, and a new
engine is one new module (tested by adding one from a temporary folder)."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from kvbudget import engines
from kvbudget.engines import engine_names, parse_engine, rules_class
from kvbudget.engines.contract import EngineRules
from kvbudget.errors import InputError
from kvbudget.model.sources import resolve
from kvbudget.plan.flags import all_engine_flags
from kvbudget.plan.plan import PlanInputs, make_plan
from kvbudget.precision import parse_cache_dtype
from kvbudget.weights.sources import WeightSize

SRC = Path(engines.__file__).parent.parent
GiB = 2**30


def _imports(package: str) -> Iterator[tuple[Path, str]]:
    for path in (SRC / package).rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                yield path, node.module


@pytest.mark.parametrize("package", ["engines", "workload", "model", "weights"])
def test_lower_layers_do_not_import_the_planner(package: str) -> None:
    assert [(p.name, m) for p, m in _imports(package) if m.startswith("kvbudget.plan")] == []


def test_the_planner_names_no_engine() -> None:
    names = set(engine_names()) | {"llama.cpp"}
    found = []
    for path in (SRC / "plan").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.append((path.name, node.lineno, node.value))
    assert found == []


def test_every_engine_module_follows_the_contract() -> None:
    names = engine_names()
    assert names[0] == "ideal" and names[-1] == "transformers"
    assert {"vllm", "sglang", "llamacpp", "ollama"} <= set(names)
    for name in names:
        cls = rules_class(name)
        assert cls is not None and issubclass(cls, EngineRules) and cls.name == name
        assert cls.layout is not EngineRules.layout, f"{name} must implement layout"
        assert parse_engine(name).rules.version == cls.default_version
    assert set(engine_names(servers_only=True)) >= {"vllm", "sglang", "llamacpp"}


@pytest.mark.parametrize(
    ("alias", "name"), [("llama.cpp", "llamacpp"), ("LLAMA-CPP", "llamacpp"), ("hf", "transformers")]
)
def test_aliases(alias: str, name: str) -> None:
    assert parse_engine(alias).name == name


@pytest.mark.parametrize(
    ("given", "release"),
    [
        ("vllm@v0.11.0", "0.11.0"),  # a tag
        ("vllm@0.6.3.post1", "0.6.3"),  # pip's post release (vLLM published 0.6.3.post1, 0.8.5.post1)
        ("vllm@0.11.0rc1", "0.11.0"),  # a release candidate takes its release's rules
        ("vllm==0.10.2+cu128", "0.10.2"),  # a local build label
        ("vllm@0.9.2.dev12+g1a2b3c4", "0.9.2"),  # a source build as vLLM's collect_env prints it
        ("trtllm@1.1.0rc3", "1.1.0"),
        ("sglang@0.5.5.post1", "0.5.5"),
        ("llamacpp@b7900", "b7900"),
    ],
)
def test_a_version_as_pip_or_a_log_prints_it_plans_its_release(given: str, release: str) -> None:
    assert parse_engine(given).version == release


@pytest.mark.parametrize("version", ["latest", "abc", "0.11.0-nightly-x", "0..1", "rc1"])
def test_a_version_that_is_no_release_is_refused(version: str) -> None:
    with pytest.raises(InputError, match=rf"--engine vllm@{re.escape(version)}: a version is a release number"):
        parse_engine(f"vllm@{version}")


def test_unknown_engine_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match=r"unknown engine 'base'.*ideal, vllm, sglang"):
        parse_engine("base")  # a helper module of the package is not an engine


TOY = """
from kvbudget.engines import ideal
from kvbudget.engines.contract import EngineRules
from kvbudget.engines.records import Share


class Rules(EngineRules):
    name = "toyengine"
    title = "Toy"
    default_version = "1.0"
    order = 99
    server = True
    memory_fraction = "toy_fraction"

    def layout(self, spec, k, v, tp, options):
        return ideal.layout(spec, k, v, tp, options)

    def usable_share(self, m):
        fraction = m.utilization or 0.5
        return Share(int(m.total_bytes * fraction), f"toy_fraction {fraction}", fraction)

    def serve_command(self, s):
        return ("toy-serve", s.model, "--ctx", str(s.context), "--slots", str(s.sessions))
"""


@pytest.fixture
def toy_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    (tmp_path / "toyengine.py").write_text(TOY)
    monkeypatch.setattr(engines, "__path__", [*engines.__path__, str(tmp_path)])
    engines._module_names.cache_clear()
    yield
    engines._module_names.cache_clear()
    sys.modules.pop("kvbudget.engines.toyengine", None)


def test_a_new_engine_is_one_new_module(toy_engine: None) -> None:
    bf16 = parse_cache_dtype("bf16")
    inputs = PlanInputs(
        resolve("llama-3.1-8b"),
        parse_engine("toy-engine"),
        bf16,
        bf16,
        80 * GiB,
        "given",
        WeightSize(16 * GiB, "measured", "given"),
        32768,
        overhead=2 * GiB,
    )
    plan = make_plan(inputs)
    assert plan.share.fraction == 0.5
    pool = 40 * GiB - 18 * GiB
    assert plan.kv_pool_bytes == pool
    assert plan.sessions == pool // (32768 * 131_072)  # the ideal layout: 128 KiB per token
    flags = all_engine_flags(plan)
    assert flags["toyengine"] == f"toy-serve meta-llama/Llama-3.1-8B --ctx 32768 --slots {plan.sessions}"
    assert "vllm" in flags  # the other serving engines still plan the same deployment
    ignored = make_plan(replace(inputs, engine=parse_engine("ideal"), utilization=0.9)).warnings
    assert any("Toy toy_fraction" in w for w in ignored)  # the new engine's setting is named too
