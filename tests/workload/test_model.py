"""Workload files: the shipped examples, validation (one line naming file and field), TOML/YAML
equivalence, the missing-extra hint, and the distributions' exact means."""

from __future__ import annotations

import math
import random
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from kvbudget.errors import InputError, MissingExtraError
from kvbudget.workload.distributions import (
    Z99,
    Constant,
    Empirical,
    Exponential,
    Geometric,
    LogNormal,
    Poisson,
    Uniform,
)
from kvbudget.workload.fit import dump_toml
from kvbudget.workload.loader import load_workload
from kvbudget.workload.model import CapPolicy, Workload
from tests.helpers import run_cli

EXAMPLES = Path(__file__).parents[2] / "examples"

BASE = """\
name = "t"
[arrival]
rate_per_s = 0.5
[prefix]
system_prompt_tokens = 1000
[steps]
dist = "geometric"
mean = 4
[first_prompt_tokens]
dist = "constant"
value = 300
[append_tokens]
dist = "uniform"
low = 100
high = 200
[output_tokens]
dist = "poisson"
mean = 50
"""


def _write(tmp_path: Path, text: str, name: str = "workload.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_examples_load_with_their_documented_values() -> None:
    coding = load_workload(EXAMPLES / "coding-agent.toml")
    assert coding.name == "coding-agent"
    assert coding.arrival.rate_per_s == 0.01
    assert coding.prefix_tokens == 2765 + 11899
    assert coding.steps == Geometric(30)
    assert coding.think_time_s == Constant(0)
    assert coding.cap == CapPolicy(action="summarize", target_fraction=0.25, summary_tokens=2000)
    assert coding.cap.target_for(131072) == 32768
    assert coding.retries is not None and not coding.retries.server_cancels
    assert math.isclose(coding.append_tokens.mean(), 2000, rel_tol=1e-12)
    chat = load_workload(EXAMPLES / "chat.toml")
    assert chat.cap.action == "refuse" and chat.retries is not None and chat.retries.server_cancels
    assert chat.tool_latency_s == Constant(0)  # absent: no tool time


def test_base_file_defaults(tmp_path: Path) -> None:
    w = load_workload(_write(tmp_path, BASE))
    assert w.append_tokens == Uniform(100, 200) and w.output_tokens == Poisson(50)
    assert w.cap == CapPolicy() and w.retries is None and w.prefix_tokens == 1000
    assert w.source.endswith("workload.toml")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("mean = 4", "mean = -3"), "[steps].mean must be at least 1 (counts start at 1), got -3"),
        (("mean = 4", "meen = 4"), "unknown key [steps].meen (known: dist, mean); check the spelling"),
        (('dist = "geometric"', 'dist = "normal"'), "[steps].dist must be one of constant, uniform"),
        (('dist = "geometric"\nmean = 4', 'dist = "exponential"\nmean = 4'), "[steps] can draw 0 steps"),
        (("rate_per_s = 0.5", "rate_per_s = -1"), "[arrival].rate_per_s must be positive, got -1"),
        (("rate_per_s = 0.5", 'rate_per_s = 0.5\nreplay = "t.jsonl"'), "[arrival] needs exactly one of"),
        (("rate_per_s = 0.5", 'rate_per_s = "fast"'), "[arrival].rate_per_s must be a number, got 'fast'"),
        (("rate_per_s = 0.5", 'rate_per_s = 0.5\nformat = "weka"'), "[arrival].format only applies with replay"),
        (("low = 100\nhigh = 200", "low = 300\nhigh = 200"), "[append_tokens].high must be at least low (300)"),
        (("value = 300", "value = true"), "[first_prompt_tokens].value must be a finite number, got True"),
        (
            ("system_prompt_tokens = 1000", "system_prompt_tokens = 1.5"),
            "[prefix].system_prompt_tokens must be a whole",
        ),
        (('name = "t"', 'name = "t"\n[retry]\ntimeout_s = 3'), "unknown key retry (known: name, description"),
        (("[arrival]\nrate_per_s = 0.5\n", ""), "[arrival] is missing; it is required"),
        (("[output_tokens]", "[output_tokens]\ndist = 'lognormal'\np99 = 10"), "[output_tokens].mean is required"),
    ],
)
def test_validation_errors_name_file_and_field(tmp_path: Path, edit: tuple[str, str], message: str) -> None:
    text = BASE.replace(*edit, 1)
    if edit[0] == "[output_tokens]":  # replace the whole table
        text = BASE.split("[output_tokens]", maxsplit=1)[0] + edit[1] + "\n"
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as info:
        load_workload(path)
    text_of = str(info.value)
    assert "\n" not in text_of
    assert text_of.startswith(f"{path}: ")
    assert message in text_of


HEAD = BASE.split("[output_tokens]", maxsplit=1)[0]
OUT3 = "[output_tokens]\ndist = 'constant'\nvalue = 3\n"


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        ("[output_tokens]\ndist = 'lognormal'\nmean = 100\np99 = 50", "[output_tokens].p99 must exceed mean (100)"),
        ("[output_tokens]\ndist = 'lognormal'\nmean = 100\np99 = 2000", "a lognormal allows at most 14.97x"),
        ("[output_tokens]\ndist = 'lognormal'\nmean = 100\nsigma = 1", "[output_tokens].sigma cannot be combined"),
        ("[output_tokens]\ndist = 'empirical'\nvalues = []", "[output_tokens].values must list at least one value"),
        ("[output_tokens]\ndist = 'empirical'\nvalues = [1, 2]\nweights = [1]", "[output_tokens].weights must have"),
        ("[output_tokens]\ndist = 'exponential'\nmean = 0", "[output_tokens].mean must be positive, got 0"),
        ("[output_tokens]\nvalue = 3", "[output_tokens].dist must be one of"),
        ("[output_tokens]\ndist = 'constant'\nvalue = -2", "[output_tokens].value must not be negative, got -2"),
        (OUT3 + "[cap]\nat_cap = 'compact'", "[cap] at_cap = 'compact' needs exactly one of"),
        (
            OUT3 + "[cap]\nat_cap = 'compact'\ntarget_tokens = 900",
            "[cap].target_tokens (900) must exceed the shared prefix (1000 tokens)",
        ),
        (OUT3 + "[cap]\nat_cap = 'drop'", "[cap].at_cap must be one of refuse, compact"),
        (OUT3 + "[cap]\ntarget_tokens = 5000", "[cap].target_tokens only applies when"),
        (OUT3 + "[cap]\nat_cap = 'compact'\ntarget_fraction = 1.5", "[cap].target_fraction must be below 1"),
        (OUT3 + "[cap]\nat_cap = 'summarize'\ntarget_fraction = 0.5", "[cap].summary_tokens is required"),
        (
            OUT3 + "[cap]\nat_cap = 'compact'\ntokens = 4000\ntarget_tokens = 5000",
            "[cap].target_tokens must be below the cap",
        ),
        (
            OUT3 + "[cap]\nat_cap = 'summarize'\ntarget_tokens = 2000\nsummary_tokens = 1500",
            "[cap].summary_tokens (1500) must fit in the target after the prefix (1000)",
        ),
        (OUT3 + "[retries]\nmax_retries = 2", "[retries].timeout_s is required"),
        (OUT3 + "[retries]\ntimeout_s = 5\nserver_cancels = 1", "[retries].server_cancels must be true or false"),
        (OUT3 + "[retries]\ntimeout_s = 5\nbackoff_multiplier = 0.5", "[retries].backoff_multiplier must be at"),
        (OUT3 + "[retries]\ntimeout_s = 5\nmax_retries = -1", "[retries].max_retries must be at least 0, got -1"),
    ],
)
def test_more_validation_errors(tmp_path: Path, tail: str, message: str) -> None:
    path = _write(tmp_path, HEAD + tail + "\n")
    with pytest.raises(InputError) as info:
        load_workload(path)
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value), str(info.value)


def test_a_distribution_must_be_a_number_or_a_table(tmp_path: Path) -> None:
    path = _write(tmp_path, "output_tokens = 'many'\n" + HEAD)
    with pytest.raises(InputError, match=r"\[output_tokens\] must be a number or a table"):
        load_workload(path)


def test_file_level_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"must end in \.toml, \.yaml or \.yml"):
        load_workload(_write(tmp_path, BASE, "w.json"))
    with pytest.raises(InputError, match=r"no such file \(workload file\)"):
        load_workload(tmp_path / "missing.toml")
    with pytest.raises(InputError, match="not valid TOML"):
        load_workload(_write(tmp_path, "[steps\n"))


def test_cli_error_is_one_line_with_exit_code_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, BASE.replace("mean = 4", "mean = -3"))
    code, out, err = run_cli(capsys, "workload", "check", str(path))
    assert code == 1 and out == ""
    assert err.count("\n") == 1
    assert err.startswith(f"Error: {path}: [steps].mean must be at least 1")


def test_toml_and_yaml_read_the_same(tmp_path: Path) -> None:
    yaml = pytest.importorskip("yaml")
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    for example in ("coding-agent.toml", "chat.toml"):
        data = tomllib.loads((EXAMPLES / example).read_text(encoding="utf-8"))
        yaml_path = _write(tmp_path, yaml.safe_dump(data), example.replace(".toml", ".yaml"))
        from_toml = load_workload(EXAMPLES / example)
        from_yaml = load_workload(yaml_path)
        assert replace(from_yaml, source="") == replace(from_toml, source="")
    bad = _write(tmp_path, "arrival: [1, 2\n", "bad.yml")
    with pytest.raises(InputError, match=r"bad\.yml: not valid YAML"):
        load_workload(bad)


def test_yaml_without_pyyaml_gives_the_extra_hint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "yaml", None)  # import yaml now raises ImportError
    with pytest.raises(MissingExtraError, match=r"pip install 'kvbudget\[yaml\]'"):
        load_workload(_write(tmp_path, "name: x\n", "w.yaml"))


def test_replay_path_is_relative_to_the_file(tmp_path: Path) -> None:
    text = BASE.replace("rate_per_s = 0.5", 'replay = "traces/day.jsonl"\nformat = "kvbudget"')
    w = load_workload(_write(tmp_path, text))
    assert w.arrival.replay == str(tmp_path / "traces" / "day.jsonl") and w.arrival.format == "kvbudget"


@pytest.mark.parametrize("example", ["coding-agent.toml", "chat.toml"])
def test_dump_toml_round_trips(tmp_path: Path, example: str) -> None:
    w = load_workload(EXAMPLES / example)
    again = load_workload(_write(tmp_path, dump_toml(w)))
    assert replace(again, source="") == replace(w, source="")


def test_workload_api_validates_too() -> None:
    with pytest.raises(InputError, match="can draw 0 steps"):
        Workload(
            arrival=load_workload(EXAMPLES / "chat.toml").arrival,
            steps=Poisson(3),
            first_prompt_tokens=Constant(1),
            append_tokens=Constant(1),
            output_tokens=Constant(1),
        )


def test_lognormal_from_mean_and_p99_is_exact() -> None:
    d = LogNormal.from_mean_p99(2000, 20000)
    assert math.isclose(d.mean(), 2000, rel_tol=1e-12) and math.isclose(d.p99(), 20000, rel_tol=1e-12)
    # the smaller root: sigma below z (the larger root is above it)
    assert 0 < d.sigma < Z99
    assert math.isclose(LogNormal(0.0, 1.0).mean(), math.exp(0.5))


@pytest.mark.parametrize(
    ("dist", "mean"),
    [
        (Constant(7.5), 7.5),
        (Uniform(100, 300), 200.0),
        (Exponential(4.0), 4.0),
        (LogNormal.from_mean_p99(500, 4000), 500.0),
        (Geometric(20), 20.0),
        (Poisson(3), 3.0),
        (Poisson(2000), 2000.0),
        (Empirical((1, 2, 3), (1, 1, 2)), 2.25),
        (Empirical((1.5, 2.5)), 2.0),
    ],
)
def test_sample_means_converge_to_analytic_means(dist: object, mean: float) -> None:
    """Whole-number draws (stochastic rounding) keep the exact mean: the sample mean of 100,000
    draws lies within 5 standard errors (sample standard deviation / sqrt(n)) of the analytic one;
    a false failure has probability below 1e-6, and the seed fixes the draws anyway."""
    from kvbudget.workload.distributions import Distribution

    assert isinstance(dist, Distribution)
    assert math.isclose(dist.mean(), mean, rel_tol=1e-12)
    rng = random.Random(7)
    n = 100_000
    draws = [dist.sample_int(rng) for _ in range(n)]
    assert all(isinstance(x, int) and x >= 0 for x in draws[:100])
    m = sum(draws) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in draws) / (n - 1))
    assert abs(m - mean) <= 5 * sd / math.sqrt(n) + 1e-12


def test_poisson_variance_equals_its_mean() -> None:
    """PTRS (mean >= 10) and Knuth (below) both give Var = mean (within 5%, n = 50,000)."""
    for lam in (4.0, 12.0, 300.0):
        rng = random.Random(3)
        draws = [Poisson(lam).sample_int(rng) for _ in range(50_000)]
        m = sum(draws) / len(draws)
        var = sum((x - m) ** 2 for x in draws) / (len(draws) - 1)
        assert abs(var / lam - 1) < 0.05
