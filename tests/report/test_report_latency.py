"""The report's Latency and Sizing sections, through the real entry point: the latency at the planned sessions is
``kvbudget speed --json`` for the same deployment with the plan's sessions in flight, the simulated one is
``kvbudget simulate --json``'s, the sizing answer is ``kvbudget size --json``'s, and the HTML page and the
Markdown show those figures (escaped)."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

import jsonschema
import pytest

from kvbudget.report.latency import PLANNED_FIELDS
from kvbudget.report.markdown import md
from kvbudget.report.sections import per_second, seconds
from kvbudget.schemas import schema
from kvbudget.units import latency_text, money
from tests.report.cli_runs import CHAT, QUICK_SIM, chat_report_and_simulation, document, html, run

LLAMA = ("llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k")
DEPLOYMENT = ("llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm")
SIZE = ("--sessions", "60", "--ttft", "2s", "--itl", "50ms", "--price", "h100-sxm=2.49/h,h200=3.59/h")


def panel_rows(page: str, panel: str) -> list[list[str]]:
    """The cells of each body row of the table in the report's panel ``panel`` (as text, entities kept)."""
    body = re.search(rf'<section class="panel[^"]*" id="{panel}">(.*?)</section>', page, re.S)
    assert body is not None, panel
    rows = re.findall(r"<tbody>(.*?)</tbody>", body.group(1), re.S)
    return [re.findall(r"<td[^>]*>([^<]*)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", rows[0])] if rows else []


def test_latency_at_the_planned_sessions_is_speed_at_that_concurrency() -> None:
    report = document("report", *LLAMA)
    planned = report["sessions"]["planned_total"]
    assert planned == document("plan", *LLAMA)["total_sessions"] == 13  # 4 GiB per session in the H100's pool
    speed = document("speed", *DEPLOYMENT, "--concurrency", str(planned))
    latency = report["latency"]
    assert latency["planned"] == {key: speed[key] for key in PLANNED_FIELDS}
    assert latency["planned"]["batch_per_replica"] == 13 and latency["planned"]["provenance"] == "computed"
    assert latency["planned_unavailable"] is None and latency["simulated"] is None
    assert "1,000-token prompts" in latency["shape"]  # speed's default request shape
    # the page and the Markdown write the same figures
    row = [
        "at the planned sessions",
        "13",
        seconds(speed["ttft_s"]),
        seconds(speed["itl_s"]),
        per_second(speed["decode_tokens_per_s_per_request"]),
        speed["binding"],
        "computed: kvbudget speed",
    ]
    assert panel_rows(html(*LLAMA), "latency") == [row]
    code, out, err = run("report", *LLAMA, "--format", "md")
    assert code == 0, err
    assert "| " + " | ".join(md(c) for c in row) + " |" in out
    jsonschema.validate(report, schema("report"))


def test_isl_and_osl_set_the_request_shape() -> None:
    report = document("report", *LLAMA, "--isl", "4000", "--osl", "200")
    speed = document("speed", *DEPLOYMENT, "--concurrency", "13", "--isl", "4000", "--osl", "200")
    assert report["latency"]["planned"]["ttft_s"] == speed["ttft_s"] > document("speed", *DEPLOYMENT)["ttft_s"] * 0
    assert report["latency"]["planned"] == {key: speed[key] for key in PLANNED_FIELDS}


def test_a_deployment_the_speed_model_does_not_cover_says_why() -> None:
    report = document("report", "llama-3.1-8b", "--gpu-memory", "80GB", "--engine", "vllm", "--context", "32k")
    latency = report["latency"]
    assert latency["planned"] is None
    assert latency["planned_unavailable"].startswith("--gpu: the speed model needs a catalog GPU")
    page = html("llama-3.1-8b", "--gpu-memory", "80GB", "--engine", "vllm", "--context", "32k")
    assert "No latency at the planned sessions: --gpu: the speed model needs a catalog GPU" in page


def test_simulated_latency_is_simulate_json() -> None:
    argv = CHAT
    doc, sim = chat_report_and_simulation()
    assert doc["latency"]["simulated"] == {**sim["latency"], "speeds": sim["speeds"]}
    # the planned figures are for the workload's mean step, the shape kvbudget size starts from (size then holds
    # its targets at the p99 step, which its basis adds)
    size = document(
        "size",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--engine",
        "vllm",
        "--context",
        "32k",
        "--sessions",
        "13",
        "--workload",
        "examples/chat.toml",
    )
    shape = size["shape"]
    planned = doc["latency"]["planned"]
    assert (planned["isl"], planned["prefix"], planned["osl"]) == (shape["isl"], shape["cached"], shape["osl"])
    assert shape["basis"].startswith(doc["latency"]["shape"] + "; --ttft/--itl held at the p99 step")
    # p50 and p99 rows with the speeds' provenance, on the page and in the Markdown
    page = html(*argv, "--workload", "examples/chat.toml", *QUICK_SIM)
    lat = sim["latency"]
    rows = panel_rows(page, "latency")
    assert len(rows) == 3 and rows[0][0] == "at the planned sessions"
    for row_shown, (q, out) in zip(rows[1:], (("p50", "p50"), ("p99", "slowest_1pct")), strict=True):
        assert row_shown == [
            f"simulated {q}",
            f"{doc['sessions']['simulated']['mean_concurrency']:,.1f} mean in flight",
            seconds(lat["ttft_s"][q]),
            seconds(lat["itl_s"][q]),
            per_second(lat["output_tokens_per_s_per_session"][out]),
            "-",
            "simulated; speeds: prefill computed, decode computed",
        ]
    assert f"Speeds: prefill {sim['speeds']['prefill']['tokens_per_s']:,.0f} tokens/s (computed" in page


def test_given_rates_are_labelled_given() -> None:
    argv = (*LLAMA, "--workload", "examples/chat.toml", *QUICK_SIM, "--decode-rate", "40")
    doc = document("report", *argv)
    speeds = doc["latency"]["simulated"]["speeds"]
    assert speeds["decode"]["provenance"] == "given"
    assert doc["latency"]["simulated"]["itl_s"]["p50"] == pytest.approx(1 / 40, rel=0.05)
    assert "--decode-rate 40 tokens/s per session at any batch" in html(*argv)


def test_size_is_size_json_for_the_reports_deployment() -> None:
    report = document("report", *LLAMA, "--size", "--size-gpu", "h100-sxm,h200", *SIZE)
    size = document("size", *DEPLOYMENT, "--gpu", "h100-sxm,h200", "--context", "32k", *SIZE)
    assert report["sizing"] == size
    jsonschema.validate(report, schema("report"))
    jsonschema.validate(report["sizing"], schema("size"))
    # the 60 sessions: 3 H200s ($10.77/h) beat 5 H100s ($12.45/h), memory binding both
    best = size["deployments"][0]
    assert (best["gpu"], best["gpus"], best["binding"], best["cost_per_hour"]) == ("h200", 3, "memory", 10.77)
    page = html(*LLAMA, "--size", "--size-gpu", "h100-sxm,h200", *SIZE)
    panel = page.split('<section class="panel wide" id="sizing">', 1)[1].split("</section>", 1)[0]
    rows = panel_rows(page, "sizing")
    assert [r[1:4] + r[-2:] for r in rows] == [
        [
            f"{d['gpu']} x {d['gpus']}",
            str(d["replicas"]),
            d["replicas_basis"],
            money(d["cost_per_hour"]),
            money(d["cost_per_session_hour"]),
        ]
        for d in size["deployments"]
    ]
    assert f'<p class="recommendation">{escape(size["recommendation"])}</p>' in panel
    code, out, err = run("report", *LLAMA, "--size", "--size-gpu", "h100-sxm,h200", *SIZE, "--format", "md")
    assert code == 0, err
    assert "### Sizing" in out and md(size["recommendation"]) in out


def test_size_defaults_to_the_reports_own_gpu() -> None:
    report = document("report", *LLAMA, "--size", "--sessions", "60")
    size = document("size", *DEPLOYMENT, "--context", "32k", "--sessions", "60")
    assert report["sizing"] == size and [d["gpu"] for d in size["deployments"]] == ["h100-sxm"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("--ttft", "2s"),
            "Error: --ttft: a sizing option; add --size (with --sessions N or --rate R) to size the load, or --work",
        ),
        (
            ("--size",),
            "Error: --sessions: give the load as --sessions N (peak concurrent, whole deployment) or --rate R (new",
        ),
        (("--size", "--sessions", "6", "--itl", "5x"), "Error: --itl"),
    ],
)
def test_sizing_options_are_refused_with_their_fix(argv: tuple[str, ...], message: str) -> None:
    code, out, err = run("report", *LLAMA, *argv)
    assert code == 1 and out == ""
    assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err


def test_the_sizing_panel_escapes_what_it_did_not_write(tmp_path: Path) -> None:
    model = tmp_path / "<script>alert(1)<_script>"
    model.mkdir()
    config = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    config |= {"hidden_size": 256, "torch_dtype": "bfloat16", "vocab_size": 1000, "intermediate_size": 512}
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    argv = (str(model), "--gpu", "h100-sxm", "--engine", "vllm", "--context", "4k", "--size", "--sessions", "8")
    page = html(*argv)
    body = re.sub(r'<script type="application/json" id="kvbudget-report">.*?</script>', "", page, flags=re.S)
    assert "<script>" not in body and "&lt;script&gt;alert(1)&lt;_script&gt;" in body
    code, out, err = run("report", *argv, "--format", "md")
    assert code == 0, err
    prose = re.sub(r"(?ms)^(`{3,})sh\n.*?^\1$", "", out)
    assert "<script" not in prose and "### Sizing" in prose


def test_sessions_at_latency_targets_are_simulate_json() -> None:
    """With --ttft / --itl the report's simulation says what memory allows, what the targets hold and which binds:
    simulate's own sentence for the same deployment, workload and targets, in the JSON, the page and Markdown."""
    targets = ("--ttft", "2s", "--itl", "12ms")
    doc = document("report", *CHAT, "--workload", "examples/chat.toml", *QUICK_SIM, *targets)
    sessions = ("--sessions", "200", "--search-sessions", "200")
    sim = document("simulate", "--model", *CHAT, "--workload", "examples/chat.toml", *sessions, *targets)
    said = sim["at_targets"]["text"]
    assert said.startswith("memory allows ") and "binds" in said
    assert doc["sessions"]["simulated"]["at_targets"] == said
    assert f"latency targets: {escape(said)}" in html(*CHAT, "--workload", "examples/chat.toml", *QUICK_SIM, *targets)
    _, markdown, _ = run("report", *CHAT, "--workload", "examples/chat.toml", *QUICK_SIM, *targets, "--format", "md")
    assert f"Latency targets: {md(said)}." in markdown
    # without targets there is no such figure
    assert chat_report_and_simulation()[0]["sessions"]["simulated"]["at_targets"] is None


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.15735, "157.4 ms"), (0.15745, "157.5 ms"), (0.15725, "157.3 ms"), (2.675, "2.68 s"), (1234.55, "1,234.55 s")],
)
def test_latency_text_rounds_ties_as_the_page_does(seconds: float, text: str) -> None:
    # the page's toLocaleString rounds the float's shortest decimal, ties away from zero (Node: 0.15735 s ->
    # "157.4 ms"); Python's f"{157.35:.1f}" rounds the binary value just below the tie ("157.3")
    assert latency_text(seconds) == text
