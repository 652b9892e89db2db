"""The calculator's sizing panel takes what ``kvbudget size`` takes that shapes its answer (the load as an arrival
rate, the request shape, more models and engines, the targets, prices) and its answer is ``kvbudget size --json``
for the same inputs, byte for byte: driven through a real headless Chromium against a real ``kvbudget serve``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli
from tests.web.browser import Tab
from tests.web.test_page import WAIT_MS, cli_error, page_errors, shown
from tests.web.test_page_time import document_rows, table

CHAT = Path(__file__).resolve().parents[2] / "examples" / "chat.toml"
PATIENT_MS = 3 * WAIT_MS  # one update sizes 8 combinations besides plan, compare and levers, on a shared CPU


def test_a_rate_with_a_request_shape_is_size_json_on_the_page(
    calculator: Tab, capsys: pytest.CaptureFixture[str]
) -> None:
    page = calculator.page
    code, out, err = run_cli(
        capsys, "size", "llama-3.1-8b,qwen3-32b", "--gpu", "h100-sxm,h200", "--engine", "vllm,sglang",
        "--context", "32k", "--rate", "2/s", "--isl", "2000", "--osl", "500", "--itl", "30ms",
        "--price", "h100-sxm=2.49/h,h200=3.59/h", "--json",
    )  # fmt: skip
    assert code == 0, err
    expected = json.loads(out)
    # the load is the rate over the whole deployment, each session one 2,000 / 500-token request
    assert expected["sessions"] is None and expected["rate_per_s"] == 2.0
    assert expected["shape"]["isl"] == 2000 and expected["shape"]["osl"] == 500
    assert all(d["load"]["rate_per_s"] == 2.0 for d in expected["deployments"])
    page.select_option("#gpu-add", "h200")
    page.fill("#prices li[data-gpu=h100-sxm] input", "2.49/h")
    page.fill("#prices li[data-gpu=h200] input", "3.59/h")
    for field, value in (("size_model", "qwen3-32b"), ("size_engine", "sglang"), ("itl", "30ms"), ("rate", "2/s"),
                         ("isl", "2000")):  # fmt: skip
        page.fill(f"#{field}", value)
        page.wait_for_selector("body[data-state=ready]", timeout=PATIENT_MS)
    # the last field typed starts the one update whose /api/size answer the page then draws
    with page.expect_response(lambda r: "/api/size?" in r.url and "osl=500" in r.url, timeout=PATIENT_MS) as answer:
        page.fill("#osl", "500")
    assert answer.value.status == 200
    assert answer.value.json() == expected
    page.wait_for_selector("body[data-state=ready]", timeout=PATIENT_MS)
    shown(calculator, "#recommendation", expected["recommendation"])
    # the page draws the answer's own table (plan/sizing_table.py, the report's): its rows are the deployments'
    # figures in the report's columns and units, and its heading, notes and unmet lines are as the document says
    drawn = expected["table"]
    assert table(calculator, "#sizing") == drawn["rows"] == document_rows(expected)
    shown(calculator, "#sizing-load", drawn["heading"])
    assert drawn["heading"].startswith(
        "Sized for 2 new sessions/s (whole deployment) at a 32K cap, inter-token at most 30.0 ms; request shape: "
        f"{expected['shape']['basis']}"
    )
    notes = page.eval_on_selector_all("#sizing-notes li", "items => items.map(i => i.textContent)")
    assert notes == drawn["notes"]
    loads = [f"load: {b}" for b in sorted({d["load"]["basis"] for d in expected["deployments"]})][:3]
    assert notes[-len(loads) :] == loads and notes[0].startswith("per replica mem/lat: sessions one replica holds")
    unmet = page.eval_on_selector_all("#sizing-unmet li", "items => items.map(i => i.textContent)")
    assert unmet == drawn["unmet"]
    assert unmet == [f"{d['model']} {d['engine']} on {d['gpu']}, tp {d['tp']}: {d['unmet']}" for d in expected["unmet"]]
    for name in ("rate=2%2Fs", "isl=2000", "osl=500", "size_model=qwen3-32b", "size_engine=sglang"):
        assert name in page.url  # the inputs are in the address the page shares
    assert page_errors(calculator) == []


def test_a_bad_rate_or_shape_shows_the_clis_error_next_to_its_field(
    calculator: Tab, capsys: pytest.CaptureFixture[str]
) -> None:
    for field, value in (("rate", "fast"), ("osl", "lots")):
        line = cli_error(
            capsys, "size", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--rate", "2/s", f"--{field}",
            value,
        )  # fmt: skip
        assert line.startswith(f"Error: --{field}")
        calculator.page.fill("#rate", "2/s")
        calculator.page.fill(f"#{field}", value)
        shown(calculator, f"#{field}-error", line)
        assert calculator.page.get_attribute(f"#{field}", "aria-invalid") == "true"
        calculator.page.fill(f"#{field}", "2/s" if field == "rate" else "500")
        shown(calculator, f"#{field}-error", "")


def test_a_workload_file_sizes_the_load_as_size_workload_does(
    calculator: Tab, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The workload chosen on the sizing panel is uploaded and sized as ``size --workload FILE``: the page draws
    that answer (its refused column and the refusal note); a bad one is the CLI's one-line error next to it."""
    page = calculator.page
    code, out, err = run_cli(
        capsys, "size", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--sessions", "60",
        "--workload", str(CHAT), "--json",
    )  # fmt: skip
    assert code == 0, err
    expected = json.loads(out)
    page.fill("#sessions", "60")
    page.wait_for_selector("body[data-state=ready]", timeout=PATIENT_MS)
    with page.expect_response(lambda r: "/api/size?" in r.url and "workload=upload-" in r.url, timeout=PATIENT_MS) as a:
        page.set_input_files("#workload-file", str(CHAT))
    assert a.value.status == 200 and a.value.json() == expected
    page.wait_for_selector("body[data-state=ready]", timeout=PATIENT_MS)
    assert "refused" in [c["label"] for c in expected["table"]["columns"]]  # a workload's column
    assert table(calculator, "#sizing") == expected["table"]["rows"]
    notes = page.eval_on_selector_all("#sizing-notes li", "items => items.map(i => i.textContent)")
    assert notes == expected["table"]["notes"] and any(n.startswith("refused at the cap: ") for n in notes)
    shown(calculator, "#workload-note", f"chat.toml: workload chat, as {page.input_value('#workload')}")
    # a workload the CLI refuses: its one-line error, as the CLI words it, next to the field
    bad = tmp_path / "agents.toml"
    bad.write_text(CHAT.read_text(encoding="utf-8").replace("mean = 4", "mean = -4"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    argv = ["size", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--sessions", "6", "--workload", bad.name]
    line = cli_error(capsys, *argv)
    page.set_input_files("#workload-file", str(bad))
    shown(calculator, "#workload-error", line)
    assert page_errors(calculator) == []
