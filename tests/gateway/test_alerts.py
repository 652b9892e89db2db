"""``kvbudget plan --alerts``: the rules file is Prometheus's structure (promtool is not installable here), its
thresholds are the plan's numbers, and every metric an expression reads is one a real gateway exports (scraped
from a gateway started from the same plan) or one the engine's cited source names."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from kvbudget.measure.loadtest.metrics import NAMES as ENGINE_NAMES
from kvbudget.plan.build import plan_deployment
from kvbudget.requests.plan import PlanRequest
from tests.helpers import run_cli

yaml = pytest.importorskip("yaml")
Cap = pytest.CaptureFixture[str]
DATA = Path(__file__).resolve().parents[1] / "data"
PLANS = {
    "vllm": ("llama-3.1-8b", "h100-sxm", "32k"),
    "sglang": ("qwen3-32b", "h200", "64k"),
    "llamacpp": ("llama-3.1-8b", "rtx-4090", "16k"),
    "ollama": ("gemma-3-27b", "h100-sxm", "8k"),
}
DURATION = re.compile(r"^[0-9]+[smh]$")
PROMQL_WORDS = {"max", "sum", "by", "increase", "rate", "and", "or", "unless", "on", "upstream", "instance",
                "behaviour", "reason", "__name__"}  # fmt: skip


def _rules_file(engine: str, tmp_path: Path, capsys: Cap) -> tuple[dict[str, Any], dict[str, Any]]:
    model, gpu, context = PLANS[engine]
    out = tmp_path / f"{engine}.rules.yml"
    argv = [model, "--gpu", gpu, "--engine", engine, "--context", context]
    code, text, err = run_cli(capsys, "plan", *argv, "--alerts", str(out), "--json")
    assert code == 0, err
    return json.loads(text), yaml.safe_load(out.read_text())


def _metrics_in(expr: str) -> set[str]:
    names = set(re.findall(r'__name__=~"([^"]+)"', expr))
    expanded = set()
    for pattern in names:  # vllm:(kv|gpu)_cache_usage_perc: each alternative
        head, alts, tail = re.fullmatch(r"(.*)\(([^)]*)\)(.*)", pattern).groups()  # type: ignore[union-attr]
        expanded |= {f"{head}{alt}{tail}" for alt in alts.split("|")}
    bare = re.sub(r'\{[^}]*\}|"[^"]*"|\[[^]]*\]', " ", expr)
    words = set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", bare)) - PROMQL_WORDS
    return expanded | words


@pytest.mark.parametrize("engine", sorted(PLANS))
def test_the_rules_file_is_prometheus_rules_with_the_plans_numbers(engine: str, tmp_path: Path, capsys: Cap) -> None:
    doc, rules_file = _rules_file(engine, tmp_path, capsys)
    alerts = doc["alerts"]
    assert rules_file == {"groups": alerts["groups"]}  # the file and the JSON are the same rules
    (group,) = rules_file["groups"]
    assert group["name"] == "kvbudget-plan" and group["rules"]
    names = [rule["alert"] for rule in group["rules"]]
    assert len(names) == len(set(names))
    for rule in group["rules"]:
        assert set(rule) == {"alert", "expr", "for", "labels", "annotations"}
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", rule["alert"]) and DURATION.match(rule["for"])
        assert rule["labels"]["severity"] in ("critical", "warning", "info")
        assert set(rule["annotations"]) == {"summary", "description"}
        assert rule["expr"].count("(") == rule["expr"].count(")")
    n, cap = doc["sessions"], doc["context"]
    assert (alerts["sessions_per_replica"], alerts["cap"], alerts["engine"]) == (n, cap, engine)
    by_name = {rule["alert"]: rule for rule in group["rules"]}
    assert by_name["KvbudgetSessionsOverPlan"]["expr"].endswith(f"> {n}")
    assert by_name["KvbudgetSessionsNearPlan"]["expr"].endswith(f">= {math.ceil(0.9 * n)}")
    assert by_name["KvbudgetGatewayCapNotPlanned"]["expr"].endswith(f"!= {cap}")
    usage = math.ceil(min(1.0, n * doc["per_session_bytes"] / doc["kv_pool_bytes"]) * 1000) / 1000
    assert alerts["kv_usage_planned"] == usage and 0 < usage <= 1
    if engine in ("vllm", "sglang", "llamacpp"):
        assert by_name["KvbudgetEngineKvOverPlan"]["expr"].endswith(f"> {usage:.3f}")
        assert "KvbudgetEngineQueueing" in by_name
    else:
        assert not any(name.startswith("KvbudgetEngine") for name in names) and alerts["notes"]
    assert ("KvbudgetEnginePreempting" in by_name) == (engine in ("vllm", "sglang"))  # llama.cpp never preempts


def test_every_metric_an_expression_reads_is_exported_by_a_real_gateway_or_cited_for_the_engine(
    tmp_path: Path, capsys: Cap
) -> None:
    pytest.importorskip("starlette")
    from tests.live.gateway import gateway

    doc, _ = _rules_file("vllm", tmp_path, capsys)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    with gateway("http://127.0.0.1:9", "--from-plan", str(plan)) as running:  # /metrics needs no live upstream
        status, _, text = running.call(None, path="/metrics", method="GET")
        assert status == 200
        assert running.metric("kvbudget_gateway_cap_tokens") == doc["context"]
        assert running.metric("kvbudget_gateway_sessions_planned") == doc["sessions"]
    exported = set()
    for kind_line in re.findall(r"^# TYPE (\S+) (\S+)$", str(text), re.M):
        name, kind = kind_line
        suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}.get(kind, ("",))
        exported |= {name.removesuffix("_total") + suffix for suffix in suffixes}  # TYPE names a counter either way
    engines = {name for metrics in ENGINE_NAMES.values() for names in metrics.values() for name in names}
    vllm_families = (DATA / "metrics" / "vllm-0.26.0-inference-perf-families.txt").read_text()
    read = set()
    for engine in PLANS:
        _, rules = _rules_file(engine, tmp_path, capsys)
        for rule in rules["groups"][0]["rules"]:
            read |= _metrics_in(rule["expr"])
    gateway_read = {name for name in read if name.startswith("kvbudget_gateway_")}
    assert gateway_read and gateway_read <= exported, gateway_read - exported
    engine_read = read - gateway_read
    assert engine_read and engine_read <= engines, engine_read - engines  # the loadtest's cited names
    assert {"vllm:kv_cache_usage_perc", "vllm:num_preemptions_total", "vllm:num_requests_waiting"} <= {
        line.split()[0] for line in vllm_families.splitlines() if line.strip()
    }  # a real vLLM 0.26 server's families
    assert "llamacpp:requests_deferred" in (DATA / "loadtest" / "llamacpp-metrics-deferred.txt").read_text()


def test_alerts_are_asked_for_and_a_plan_that_fits_nothing_says_so() -> None:
    request = PlanRequest(model="llama-3.1-8b", gpu="h100-sxm", context=32_768, engine="vllm")
    assert plan_deployment(request).alerts is None and "alerts" not in plan_deployment(request).to_dict()
    none = plan_deployment(
        PlanRequest(model="llama-3.1-8b", gpu="rtx-4090", context=131_072, engine="vllm", alerts=True)
    )
    assert none.sessions == 0 and none.alerts is not None
    assert "fits no session" in none.alerts.notes[0]


def test_alerts_alone_print_the_rules_file(capsys: Cap) -> None:
    code, text, _ = run_cli(
        capsys, "plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k", "--alerts"
    )
    assert code == 0 and yaml.safe_load(text)["groups"][0]["rules"]
    bad = ("--alerts", "/nonexistent/x.yml")
    code, _, err = run_cli(capsys, "plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", *bad)
    assert code == 1 and "--alerts /nonexistent/x.yml: the folder" in err and "Traceback" not in err
