"""Fitting a workload from trace records: estimates by hand, the TOML round trip, the lognormal
and binned-empirical fits keeping the mean, generation from a fit, and the CLI on shipped traces."""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from kvbudget.errors import InputError
from kvbudget.workload.distributions import Constant, Empirical, LogNormal
from kvbudget.workload.fit import dump_toml, empirical_of, fit_workload, lognormal_of
from kvbudget.workload.generate import generate_sessions
from kvbudget.workload.little import arrival_rate
from kvbudget.workload.loader import load_workload
from kvbudget.workload.model import CapPolicy
from kvbudget.workload.record import StepRecord
from tests.helpers import run_cli

TRACES = Path(__file__).parents[1] / "data" / "traces"
WEKA = sorted(str(p) for p in (TRACES / "weka_kv_cache_tester").glob("*.json"))


def _rec(session: str, step: int, start: float, prompt: int, out: int, **kw: object) -> StepRecord:
    return StepRecord(session=session, step=step, start_s=start, prompt_tokens=prompt, output_tokens=out, **kw)  # type: ignore[arg-type]


def _records() -> list[StepRecord]:
    """Three sessions starting at 0, 40 and 100 s; one compaction; one sub-agent."""
    return [
        _rec("a", 0, 0.0, 1200, 100, pause_s=5.0),
        _rec("a", 1, 10.0, 1500, 100, pause_s=7.0),  # appends 1500 - 1300 = 200
        _rec("a", 2, 20.0, 1900, 50),  # appends 300
        _rec("b", 0, 40.0, 1100, 80, pause_s=5.0),
        _rec("b", 1, 50.0, 6000, 100, pause_s=3.0),  # appends 4820
        _rec("b", 2, 60.0, 2500, 100),  # compaction: keeps 2500 of 6100
        _rec("c", 0, 100.0, 1300, 120),
        _rec("c.sub", 0, 101.0, 400, 20, parent="c", pause_s=1.0),
        _rec("c.sub", 1, 102.0, 600, 20),  # appends 180
    ]


def test_fit_by_hand() -> None:
    w = fit_workload(_records(), prefix_tokens=1000, name="hand")
    # 3 top-level sessions over 100 s: (3 - 1) / 100 = 0.02/s, x 4/3 for the one sub-agent
    assert w.arrival.rate_per_s == 0.0266667  # 0.02 x 4/3 to 6 significant digits
    assert w.steps == Empirical((1, 2, 3), (1, 1, 2))
    # first prompts less the 1,000-token prefix: 200, 100, 300; the sub-agent's 400 is below it -> 0
    assert w.first_prompt_tokens == Empirical((0, 100, 200, 300))
    assert w.append_tokens == Empirical((180, 200, 300, 4820))  # the compaction step left out
    assert w.output_tokens.mean() == pytest.approx((100 + 100 + 50 + 80 + 100 + 100 + 120 + 20 + 20) / 9)
    assert w.tool_latency_s == Empirical((1.0, 3.0, 5.0, 7.0), (1, 1, 2, 1))
    assert w.think_time_s == Constant(0)
    assert w.prefix_tokens == 1000 and w.name == "hand"
    # the compaction: context 6,100 before it, 2,500 kept
    assert w.cap == CapPolicy(action="compact", tokens=6100, target_tokens=2500)
    assert "1 first prompts shorter than their session's shared prefix counted as 0" in w.description
    assert "shared prefix 1000 tokens (given)" in w.description


def test_fit_rate_and_errors() -> None:
    w = fit_workload(_records(), rate_per_s=0.5)
    assert w.arrival.rate_per_s == 0.666667  # 0.5 x 4/3, 6 significant digits
    assert "shared prefix 0: the trace declares none (give --prefix)" in w.description
    same_start = [_rec("x", 0, 0.0, 10, 1), _rec("y", 0, 0.0, 10, 1)]
    with pytest.raises(InputError, match=r"pass a rate \(--rate\)"):
        fit_workload(same_start)
    with pytest.raises(InputError, match="no usable steps"):
        fit_workload([])
    with pytest.raises(InputError, match="empirical or lognormal"):
        fit_workload(_records(), method="normal")  # type: ignore[arg-type]
    with pytest.raises(InputError):
        fit_workload(_records(), rate_per_s=-1.0)


def test_fit_round_trips_through_toml(tmp_path: Path) -> None:
    for method in ("empirical", "lognormal"):
        w = fit_workload(_records(), prefix_tokens=1000, method=method)
        path = tmp_path / f"{method}.toml"
        path.write_text(dump_toml(w), encoding="utf-8")
        again = load_workload(path)
        assert replace(again, source="") == replace(w, source="")
    text = dump_toml(w)
    assert "# lognormal mean = " in text and text.startswith("# kvbudget workload file")


def test_binned_empirical_and_lognormal_keep_the_mean() -> None:
    values = [float(x * x % 9973) for x in range(5000)]
    mean = math.fsum(values) / len(values)
    binned = empirical_of(values, max_points=64)
    assert isinstance(binned, Empirical) and len(binned.values) == 64
    assert math.isclose(binned.mean(), mean, rel_tol=1e-12)
    assert max(binned.values) <= max(values) and min(binned.values) >= min(values)
    ln = lognormal_of(values)
    assert isinstance(ln, LogNormal) and math.isclose(ln.mean(), mean, rel_tol=1e-12)
    # method of moments: the variance matches too, Var = (e^(s^2) - 1) mean^2
    var = math.fsum((v - mean) ** 2 for v in values) / len(values)
    assert math.isclose((math.exp(ln.sigma**2) - 1) * ln.mean() ** 2, var, rel_tol=1e-9)
    assert lognormal_of([5.0, 5.0]) == Constant(5.0) and empirical_of([]) == Constant(0)


def test_generating_from_a_fit_reproduces_the_trace_means() -> None:
    """5,000 sessions from the hand fit: step and token means within 5 standard errors."""
    w = fit_workload(_records(), prefix_tokens=1000)
    steps, appends = [], []
    for plan in generate_sessions(w, seed=4, count=5000):
        rows = list(plan.steps)
        steps.append(len(rows))
        appends += [r.append_tokens for r in rows[1:]]
    for values, mean in ((steps, w.steps.mean()), (appends, w.append_tokens.mean())):
        m = sum(values) / len(values)
        sd = math.sqrt(sum((x - m) ** 2 for x in values) / (len(values) - 1))
        assert abs(m - mean) <= 5 * sd / math.sqrt(len(values))


def test_fit_from_a_kvbudget_jsonl_file_read_here(tmp_path: Path) -> None:
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in _records()), encoding="utf-8")
    read = [StepRecord(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines()]
    assert fit_workload(read, prefix_tokens=1000) == fit_workload(_records(), prefix_tokens=1000)


def _raw_weka_sessions() -> list[list[dict[str, object]]]:
    """Every session of the shipped WEKA files, sub-agents included, read from the raw JSON."""

    def walk(requests: list[dict[str, object]]) -> list[list[dict[str, object]]]:
        top = [r for r in requests if r.get("type") != "subagent"]
        out = [top] if top else []
        for r in requests:
            if r.get("type") == "subagent":
                out += walk(r["requests"])  # type: ignore[arg-type]
        return out

    sessions: list[list[dict[str, object]]] = []
    for path in WEKA:
        sessions += walk(json.loads(Path(path).read_text(encoding="utf-8"))["requests"])
    return sessions


def test_cli_fit_on_the_shipped_weka_traces(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("kvbudget.workload.traces")
    raw = _raw_weka_sessions()
    out = tmp_path / "weka.toml"
    code, text, err = run_cli(capsys, "workload", "fit", *WEKA, "--rate", "0.01", "--out", str(out), "--json")
    assert code == 0, err
    data = json.loads(text)
    assert data["schema_version"] == 1 and data["bad_rows"] == 0
    assert data["records"] == sum(len(s) for s in raw)  # 481 steps
    w = load_workload(out)
    steps = sorted(len(s) for s in raw)
    assert math.isclose(w.steps.mean(), sum(steps) / len(steps), rel_tol=1e-12)
    assert w.steps.min_value() == steps[0] == 3 and max(w.steps.values) == steps[-1] == 153  # type: ignore[attr-defined]
    outputs = [int(r["out"]) for s in raw for r in s]  # type: ignore[call-overload]
    # bins are whole tokens: each bin's mean moves by at most half a token, so the mean does too
    assert abs(w.output_tokens.mean() - sum(outputs) / len(outputs)) <= 0.5
    firsts = [int(s[0]["in"]) for s in raw]  # type: ignore[call-overload]
    # the shared prefix each session declares is taken off its own first prompt; the mean context is kept
    assert math.isclose(w.prefix_tokens + w.first_prompt_tokens.mean(), sum(firsts) / len(firsts), rel_tol=1e-12)
    # one top-level session per file; sub-agents arrive with their parents (6 significant digits)
    assert arrival_rate(w)[0] == 0.0146154 == round(0.01 * len(raw) / len(WEKA), 7)
    # only history rewrites (a prompt shorter than the one before) are compactions: 4 in these files
    assert "4 compactions seen" in w.description
    # without --rate the WEKA files cannot give an arrival rate (every file starts at t = 0)
    code, _, err = run_cli(capsys, "workload", "fit", *WEKA)
    assert code == 1 and "--rate" in err and err.count("\n") == 1
    # without --out the output is itself a workload file
    code, text, err = run_cli(capsys, "workload", "fit", WEKA[0], "--rate", "0.1", "--method", "lognormal")
    assert code == 0, err
    piped = tmp_path / "piped.toml"
    piped.write_text(text, encoding="utf-8")
    assert load_workload(piped).arrival.rate_per_s == 0.1
    code, _, err = run_cli(capsys, "workload", "fit", WEKA[0], "--rate", "0.1", "--out", str(tmp_path / "w.yaml"))
    assert code == 1 and "must end in .toml" in err


def test_cli_fit_reports_bad_rows_and_strict_stops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("kvbudget.workload.traces")
    trace = tmp_path / "steps.jsonl"
    good = [_rec("a", 0, 0.0, 100, 10), _rec("b", 0, 5.0, 100, 10)]
    trace.write_text(
        json.dumps(good[0].to_json()) + "\noops\n" + json.dumps(good[1].to_json()) + "\n", encoding="utf-8"
    )
    code, text, err = run_cli(capsys, "workload", "fit", str(trace), "--json")
    assert code == 0, err
    data = json.loads(text)
    assert data["records"] == 2 and data["bad_rows"] == 1
    assert data["bad_row_details"][0].startswith(f"{trace}:2: ")
    assert data["workload"]["arrival"] == {"rate_per_s": 0.2}  # (2 - 1) / 5 s
    code, text, err = run_cli(capsys, "workload", "fit", str(trace))
    assert code == 0 and "# bad row: " in text
    code, _, err = run_cli(capsys, "workload", "fit", str(trace), "--strict")
    assert code == 1 and err.startswith(f"Error: {trace}:2: ")


def _declared_prefixes() -> list[tuple[int, int]]:
    """(system_tokens, tool_tokens) of every session of the shipped WEKA files, sub-agents included (raw JSON)."""

    def walk(entry: dict[str, object]) -> list[tuple[int, int]]:
        out = [(int(entry["system_tokens"]), int(entry["tool_tokens"]))]  # type: ignore[call-overload]
        for r in entry["requests"]:  # type: ignore[attr-defined]
            if r.get("type") == "subagent":
                out += walk(r)
        return out

    return [d for path in WEKA for d in walk(json.loads(Path(path).read_text(encoding="utf-8")))]


def test_fit_of_the_weka_traces_keeps_prefix_pauses_and_clean_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped WEKA traces declare each session's system prompt and tool catalogue (735-3,318 and
    7,401-13,136 tokens); `workload fit` keeps their mean as the shared prefix, the 95.0% block reuse and the
    pauses in its notes, writes whole tokens and short decimals, and `workload check` reads the file back."""
    declared = _declared_prefixes()
    assert len(declared) == 19
    system = round(sum(d[0] for d in declared) / 19)
    tool = round(sum(d[1] for d in declared) / 19)
    assert (system, tool) == (1688, 9494)
    out = tmp_path / "weka.toml"
    code, _, err = run_cli(capsys, "workload", "fit", *WEKA, "--rate", "0.01", "--out", str(out))
    assert code == 0, err
    text = out.read_text(encoding="utf-8")
    w = load_workload(out)
    assert (w.prefix.system_prompt_tokens, w.prefix.tool_catalog_tokens) == (1688, 9494)
    assert "shared prefix 11182 tokens = mean of what 19 of 19 sessions declare" in w.description
    assert "8423 to 15771 per session" in w.description
    assert "prefix reuse between a session's steps in the trace: 95.0% of blocks" in w.description
    # the pauses: the 462 of trace stats (median 9 s, p99 1,590.49 s, 92.9% of session time), kept as the
    # empirical tool latency, whose mean is the pauses' mean to the 4 significant digits each value keeps
    assert "462 pauses: median 9 s, p99 1590.49 s, 92.9% of session time" in w.description
    pauses = [
        max(0.0, float(b["t"]) - float(a["t"]) - float(a.get("api_time") or 0.0))  # type: ignore[arg-type]
        for s in _raw_weka_sessions()
        for a, b in itertools.pairwise(s)
    ]
    assert len(pauses) == 462
    assert math.isclose(w.tool_latency_s.mean(), sum(pauses) / 462, rel_tol=5e-4)
    # growth per step: appends are whole tokens, with the trace's largest (58,766) kept
    assert all(float(v).is_integer() for v in w.append_tokens.values)  # type: ignore[attr-defined]
    assert max(w.append_tokens.values) == 58766  # type: ignore[attr-defined]
    # no float noise: every number in the file has at most 6 significant digits
    numbers = re.findall(r"(?<![\w.])\d+\.\d+(?![\w.])", text.split("\n[arrival]", 1)[1])
    assert numbers and all(len(n.replace(".", "").lstrip("0")) <= 6 for n in numbers), numbers
    assert "2.89," in text and "2.8899999999999997" not in text
    for dist in ("first_prompt_tokens", "append_tokens", "output_tokens", "steps"):
        values = getattr(w, dist).values
        assert all(isinstance(v, int) for v in values), dist
    code, report, err = run_cli(capsys, "workload", "check", str(out), "--json")
    assert code == 0, err
    check = json.loads(report)
    assert check["prefix_tokens"] == 11182


def test_the_shipped_fitted_example_is_what_fit_writes_today(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """examples/coding-agent-weka.toml is the fit of the shipped WEKA traces (its header says so, with the command):
    below the header it is byte for byte what that command writes now."""
    shipped = (Path(__file__).parents[2] / "examples" / "coding-agent-weka.toml").read_text(encoding="utf-8")
    out = tmp_path / "w.toml"
    argv = ("workload", "fit", *WEKA, "--rate", "0.01", "--name", "coding-agent-weka", "--out", str(out))
    code, _, err = run_cli(capsys, *argv)
    assert code == 0, err
    header, body = shipped.split("# kvbudget workload file", 1)
    assert "# kvbudget workload file" + body == out.read_text(encoding="utf-8")
    assert "kvbudget workload fit tests/data/traces/weka_kv_cache_tester/*.json --rate 0.01" in header
    hand = (Path(__file__).parents[2] / "examples" / "coding-agent.toml").read_text(encoding="utf-8")
    assert "HAND-WRITTEN" in hand and "mean 71.9 s" in hand  # the hand-written one says how far it is from the traces
    fitted = load_workload(out)
    assert round(fitted.tool_latency_s.mean(), 1) == 71.9 and load_workload(
        Path(__file__).parents[2] / "examples" / "coding-agent.toml"
    ).tool_latency_s.mean() == pytest.approx(6)
