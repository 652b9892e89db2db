"""Latency and the sizing answer on the calculator page, in a real headless Chromium against a real ``kvbudget
serve``: what it shows next to capacity is ``kvbudget speed`` at the plan's sessions, the sizing panel is
``kvbudget size`` for the GPUs compared, and both are what ``kvbudget report`` puts in its Latency and Sizing
sections for the same inputs (computed here through kvbudget's API)."""

from __future__ import annotations

from typing import Any

import pytest

from kvbudget.api import (
    PlanRequest,
    SizeRequest,
    SpeedRequest,
    estimate_speed,
    plan_deployment,
    size_deployments,
)
from kvbudget.plan.cap_refusals import pct
from kvbudget.report.collect import collect
from kvbudget.report.sections import per_second, seconds
from kvbudget.requests.report import ReportRequest
from kvbudget.units import money
from tests.web.browser import Tab
from tests.web.test_page import WAIT_MS, cli_error, page_errors, shown

DEPLOYMENT: dict[str, object] = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm"}


def latency_line(context: str) -> tuple[str, str]:
    """The page's latency line and shape for the default deployment at ``context``: speed at the plan's sessions,
    which is also what the report's Latency section holds."""
    plan = plan_deployment(PlanRequest.from_options({**DEPLOYMENT, "context": context}))
    speed = estimate_speed(SpeedRequest.from_options({**DEPLOYMENT, "concurrency": str(plan.total_sessions)}))
    report = collect(ReportRequest.from_options({**DEPLOYMENT, "context": context}))
    assert report.latency is not None and report.latency.planned == speed  # the report says the same
    doc = speed.to_dict()  # the page reads the document: its rounded figures
    ttft, itl, rate = (float(str(doc[k])) for k in ("ttft_s", "itl_s", "decode_tokens_per_s_per_request"))
    line = (
        f"TTFT {seconds(ttft)} · inter-token {seconds(itl)} · "
        f"{per_second(rate)} tokens/s per session at {speed.batch:,} sessions per "
        f"replica · binds: {speed.binding}"
    )
    shape = f"{speed.isl:,}-token prompts, {speed.osl:,} tokens out, {speed.concurrency:,} requests in flight"
    return line, shape


def test_latency_next_to_capacity_is_speed_at_the_planned_sessions(calculator: Tab) -> None:
    line, shape = latency_line("32k")
    # vLLM's own fit (docs/speed.md): its 42.6 ms a request and 147 us per running sequence an iteration (89.3 ms,
    # 10.9 ms, 91.3 tokens/s before the A100 ratio's refit: bf16 prefill share 0.417, 215 us a sequence)
    assert line.startswith("TTFT 99.3 ms · inter-token 10.4 ms · 96.5 tokens/s per session at 13 sessions")
    shown(calculator, "#latency-line", line)
    shown(calculator, "#latency-shape", shape)
    basis = calculator.page.text_content("#latency-basis") or ""
    assert basis.startswith("computed (kvbudget speed, the roofline): bfloat16 weights multiplied at bf16")
    assert "efficiencies: fitted to" in basis
    # a shorter cap holds more sessions, each a little slower
    calculator.page.fill("#context", "8k")
    shown(calculator, "#latency-line", latency_line("8k")[0])
    assert page_errors(calculator) == []


def document_rows(doc: dict[str, Any], kv: str = "auto") -> list[list[str]]:
    """The sizing table's rows written here from the deployments' own fields, the report's columns and units (the
    page draws the document's ``table``, built by plan/sizing_table.py: these must be its cells); ``kv``: the cache
    dtype asked for, named in the row when it is not the engine's own."""
    refused = doc["refused_at_cap"] is not None  # the column is there with a workload
    rows = []
    for d in doc["deployments"]:
        latency = d["latency"] or {}
        share = d["refused_at_cap"]["refused_share"] if d["refused_at_cap"] else None
        rows.append(
            [
                f"{d['model']}{' ' + d['weights'] if d['weights'] else ''} {d['engine']}"
                + (f" kv {kv}" if kv != "auto" else ""),
                f"{d['gpu']} x {d['gpus']:,}" + (f" tp{d['tp']}" if d["tp"] > 1 else ""),
                f"{d['replicas']:,}",
                d["replicas_basis"],  # the count column: simulated or computed (plan/sizing_table.py)
                f"{d['sessions_per_replica_memory']:,}/{d['sessions_per_replica_latency']:,}",
                d["binding"],
                f"+{d['headroom_sessions']:,}",
                *([pct(share) if share is not None else "-"] if refused else []),
                seconds(latency.get("ttft_s")),
                seconds(latency.get("itl_s")),
                money(d["cost_per_hour"]),
                money(d["cost_per_session_hour"]),
            ]
        )
    return rows


def size_rows(request: SizeRequest) -> tuple[list[list[str]], str]:
    """The sizing table as the page writes it, and the recommendation, from ``size_deployments``; the same answer
    ``kvbudget report --size`` gives for the same inputs."""
    sizing = size_deployments(request)
    report = collect(
        ReportRequest.from_options(
            {
                **DEPLOYMENT,
                "context": request.context,
                "size": True,
                "size_gpu": request.gpu,
                "sessions": request.sessions,
                "ttft": request.ttft,
                "itl": request.itl,
                "price": request.price,
            }
        )
    )
    assert report.sizing is not None and report.sizing.to_dict() == sizing.to_dict()
    doc = sizing.to_dict()
    rows = document_rows(doc)
    assert doc["table"]["rows"] == rows  # type: ignore[index]  # the table the page draws: these cells
    return rows, sizing.recommendation


def table(calculator: Tab, selector: str) -> list[list[str]]:
    rows: list[list[str]] = calculator.page.eval_on_selector_all(
        f"{selector} tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    return rows


def test_sessions_wanted_size_the_load_on_the_gpus_compared(calculator: Tab) -> None:
    from playwright.sync_api import expect

    page = calculator.page
    assert page.locator("#sizing-section").is_hidden()
    request = SizeRequest.from_options(
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-sxm,h200",
            "engine": "vllm",
            "context": "32k",
            "sessions": 60,
            "ttft": "2s",
            "itl": "50ms",
            "price": "h100-sxm=2.49/h,h200=3.59/h",
        }
    )
    rows, recommendation = size_rows(request)
    # 60 sessions: 3 H200s at $10.77/h before 5 H100s at $12.45/h, memory binding both
    assert [r[1] for r in rows] == ["h200 x 3", "h100-sxm x 5"] and rows[0][9] == "10.77"  # $/h, after count
    page.select_option("#gpu-add", "h200")
    page.fill("#prices li[data-gpu=h100-sxm] input", "2.49/h")
    page.fill("#prices li[data-gpu=h200] input", "3.59/h")
    page.fill("#ttft", "2s")
    page.fill("#itl", "50ms")
    page.fill("#sessions", "60")
    shown(calculator, "#recommendation", recommendation)
    expect(page.locator("#sizing tbody tr")).to_have_count(2, timeout=WAIT_MS)
    assert table(calculator, "#sizing") == rows
    heading = calculator.page.text_content("#sizing-load") or ""
    assert heading == size_deployments(request).to_dict()["table"]["heading"]  # type: ignore[index]
    assert heading.startswith(
        "Sized for 60 concurrent sessions at peak (whole deployment) at a 32K cap, TTFT at most 2.00 s, inter-token "
        "at most 50.0 ms; request shape: --isl 1,000 / --osl 1,000 per request"
    )
    assert "ttft=2s" in page.url and "itl=50ms" in page.url
    assert page_errors(calculator) == []


def test_a_bad_target_shows_the_clis_error_next_to_its_field(
    calculator: Tab, capsys: pytest.CaptureFixture[str]
) -> None:
    line = cli_error(
        capsys, "size", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--sessions", "6", "--ttft", "2q"
    )
    assert line.startswith("Error: --ttft")
    calculator.page.fill("#sessions", "6")
    calculator.page.fill("#ttft", "2q")
    shown(calculator, "#ttft-error", line)
    assert calculator.page.get_attribute("#ttft", "aria-invalid") == "true"
    calculator.page.fill("#ttft", "2s")
    shown(calculator, "#ttft-error", "")
