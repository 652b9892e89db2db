"""The calculator page in a real headless Chromium, against a real ``kvbudget serve``: what it shows is what the CLI
computes, errors appear next to the field they concern, and the page is readable at laptop and phone widths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvbudget.cli.main import main
from tests.helpers import dense_config
from tests.web.browser import LAPTOP, PHONE, Server, Tab, tab

WAIT_MS = 30_000  # one update is four commands on a shared CPU


def cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert main([*argv, "--json"]) == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


def cli_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one line the CLI prints on stderr for a bad command line."""
    assert main(list(argv)) == 1
    return capsys.readouterr().err.strip()


def sessions(capsys: pytest.CaptureFixture[str], model: str, gpu: str, context: str) -> str:
    """The plan's sessions as the page writes them (thousands separated)."""
    plan = cli_json(capsys, "plan", model, "--gpu", gpu, "--engine", "vllm", "--context", context)
    return f"{plan['sessions']:,}"


def shown(calculator: Tab, selector: str, text: str) -> None:
    from playwright.sync_api import expect

    expect(calculator.page.locator(selector)).to_have_text(text, timeout=WAIT_MS)


def test_the_page_loads_with_no_console_errors(calculator: Tab, capsys: pytest.CaptureFixture[str]) -> None:
    page = calculator.page
    shown(calculator, "#sessions-count", sessions(capsys, "llama-3.1-8b", "h100-sxm", "32k"))
    assert calculator.errors == []
    models = cli_json(capsys, "models")["models"]
    gpus = cli_json(capsys, "gpus")["gpus"]
    assert isinstance(models, list)
    assert isinstance(gpus, list)
    listed = page.eval_on_selector_all("#model-list option", "options => options.map(o => o.value)")
    assert {m["name"] for m in models} <= set(listed)
    assert page.eval_on_selector_all("#gpu option", "o => o.map(x => x.value)") == [g["id"] for g in gpus]
    assert page.locator("#ledger-bar rect").count() == 5
    assert page.locator("#curve polyline").count() == 1
    assert page.locator(".command").count() == 5


def test_changing_the_cap_shows_the_clis_sessions(calculator: Tab, capsys: pytest.CaptureFixture[str]) -> None:
    before = sessions(capsys, "llama-3.1-8b", "h100-sxm", "32k")
    after = sessions(capsys, "llama-3.1-8b", "h100-sxm", "8k")
    assert before != after
    shown(calculator, "#sessions-count", before)
    calculator.page.fill("#context", "8k")
    shown(calculator, "#sessions-count", after)
    assert "?model=llama-3.1-8b&gpu=h100-sxm&engine=vllm&kv_dtype=auto&context=8k" in calculator.page.url
    assert calculator.errors == []


def test_changing_the_gpu_shows_the_clis_sessions(calculator: Tab, capsys: pytest.CaptureFixture[str]) -> None:
    before = sessions(capsys, "llama-3.1-8b", "h100-sxm", "32k")
    after = sessions(capsys, "llama-3.1-8b", "l40s", "32k")
    assert before != after
    shown(calculator, "#sessions-count", before)
    calculator.page.select_option("#gpu", "l40s")
    shown(calculator, "#sessions-count", after)
    assert calculator.errors == []


def test_gpus_compared_side_by_side_are_the_clis_rows(calculator: Tab, capsys: pytest.CaptureFixture[str]) -> None:
    page = calculator.page
    assert page.locator("#compare-section").is_hidden()
    page.select_option("#gpu-add", "h200")
    page.select_option("#gpu-add", "a100-80gb")
    doc = cli_json(
        capsys, "compare", "llama-3.1-8b", "--gpu", "h100-sxm,h200,a100-80gb", "--engine", "vllm", "--context", "32k"
    )
    rows = doc["rows"]
    assert isinstance(rows, list)
    expected = [[f"{r['gpu']} x {r['gpus']}", f"{r['sessions']:,}"] for r in rows]
    table = page.locator("#compare tbody tr")
    from playwright.sync_api import expect

    expect(table).to_have_count(3, timeout=WAIT_MS)
    got = page.eval_on_selector_all(
        "#compare tbody tr", "rows => rows.map(r => [...r.cells].slice(0, 2).map(c => c.textContent))"
    )
    assert got == expected
    assert page.locator("#curve polyline").count() == 3
    page.click("#gpu-chips button >> text=h200")
    expect(table).to_have_count(2, timeout=WAIT_MS)


@pytest.mark.parametrize(
    ("field", "value", "where"),
    [
        ("#context", "32q", "#context-error"),
        ("#kv_dtype", "fp7", "#kv_dtype-error"),
        ("#model", "no-such-model", "#model-error"),
        ("#tp", "0", "#tp-error"),
    ],
)
def test_a_bad_value_shows_the_clis_error_next_to_its_field(
    calculator: Tab, capsys: pytest.CaptureFixture[str], field: str, value: str, where: str
) -> None:
    argv = {"model": "llama-3.1-8b", "--gpu": "h100-sxm", "--engine": "vllm", "--context": "32k", "--tp": "1"}
    argv[{"#model": "model", "#kv_dtype": "--kv-dtype"}.get(field, "--" + field[1:])] = value
    line = cli_error(capsys, "plan", *[x for k, v in argv.items() for x in ([v] if k == "model" else [k, v])])
    assert line.startswith("Error: ")
    calculator.page.fill(field, value)
    shown(calculator, where, line)
    assert calculator.page.get_attribute(field, "aria-invalid") == "true"
    shown(calculator, "#general-error", "")
    calculator.page.fill(field, {"#context": "32k", "#kv_dtype": "auto", "#model": "llama-3.1-8b", "#tp": "1"}[field])
    shown(calculator, where, "")
    shown(calculator, "#sessions-count", sessions(capsys, "llama-3.1-8b", "h100-sxm", "32k"))


def test_an_error_naming_several_options_is_shown_above_the_results(
    calculator: Tab, capsys: pytest.CaptureFixture[str]
) -> None:
    line = cli_error(capsys, "plan", "llama-3.1-70b", "--gpu", "a10", "--engine", "vllm", "--context", "32k")
    assert "--tp" in line
    assert "--weights" in line
    calculator.page.select_option("#gpu", "a10")
    calculator.page.fill("#model", "llama-3.1-70b")
    shown(calculator, "#general-error", line)
    shown(calculator, "#tp-error", "")


def test_a_dropped_config_is_planned_as_the_cli_plans_it(
    calculator: Tab, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = dense_config(48, 40, 8, 128, hidden_size=5120, intermediate_size=13824, vocab_size=32000)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    expected = sessions(capsys, str(path), "h100-sxm", "32k")
    assert expected != sessions(capsys, "llama-3.1-8b", "h100-sxm", "32k")
    calculator.page.set_input_files("#file", str(path))
    shown(calculator, "#sessions-count", expected)
    model = calculator.page.input_value("#model")
    assert model.startswith("upload-")
    shown(calculator, "#model-note", f"config.json: {model} (llama), as {model}")
    assert calculator.errors == []


def test_the_copy_button_copies_the_command(
    browser: object, server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    from playwright.sync_api import Browser

    assert isinstance(browser, Browser)
    plan = cli_json(capsys, "plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k")
    commands = plan["commands"]
    assert isinstance(commands, dict)
    with tab(browser) as opened:
        opened.page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=server.url.rstrip("/"))
        opened.page.goto(server.url)
        opened.page.wait_for_selector("body[data-state=ready]")
        opened.page.click(".command[data-engine=vllm] button")
        shown(opened, ".command[data-engine=vllm] button", "Copied")
        assert opened.page.evaluate("navigator.clipboard.readText()") == commands["vllm"]["text"]


@pytest.mark.parametrize(("name", "viewport"), [("laptop", LAPTOP), ("phone", PHONE)])
def test_readable_at_laptop_and_phone_widths(
    browser: object, server: Server, tmp_path: Path, name: str, viewport: dict[str, int]
) -> None:
    """No sideways scrolling, no text under 12 px (chart text included), the answer in the first screens; the
    screenshot goes to $KVBUDGET_SCREENSHOTS (docs/img when refreshing the docs' pictures) or a temporary folder."""
    from playwright.sync_api import Browser

    assert isinstance(browser, Browser)
    with tab(browser, viewport) as opened:
        page = opened.page
        page.goto(server.url + "?compare=h200,a100-80gb")
        page.wait_for_selector("body[data-state=ready]")
        assert page.evaluate("document.documentElement.scrollWidth") <= viewport["width"]
        smallest = page.evaluate(
            """() => Math.min(...[...document.querySelectorAll('body *')]
                .filter(e => [...e.childNodes].some(n => n.nodeType === 3 && n.textContent.trim()))
                .filter(e => e.getClientRects().length && !(e instanceof SVGElement))
                .map(e => parseFloat(getComputedStyle(e).fontSize)))"""
        )
        assert smallest >= 12
        chart_text = page.evaluate(
            "Math.min(...[...document.querySelectorAll('#curve text')].map(t => t.getBoundingClientRect().height))"
        )
        assert chart_text >= 12
        answer = page.locator("#sessions-count").bounding_box()
        assert answer is not None
        assert answer["y"] < 2 * viewport["height"]
        folder = Path(os.environ.get("KVBUDGET_SCREENSHOTS") or tmp_path)
        folder.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(folder / f"serve-{name}.png"), full_page=True)
        assert (folder / f"serve-{name}.png").stat().st_size > 10_000
        assert opened.errors == []


def test_sessions_wanted_show_the_largest_cap_the_cli_finds(
    calculator: Tab, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k"]
    most = cli_json(capsys, *base, "--sessions", "20")["max_context_for_sessions"]
    assert isinstance(most, int)
    assert most > 0
    calculator.page.fill("#sessions", "20")
    shown(calculator, "#extra-line", f"20 sessions fit at a cap of up to {most:,} tokens")
    assert cli_json(capsys, *base, "--sessions", "10000000")["max_context_for_sessions"] == 0
    calculator.page.fill("#sessions", "10000000")
    shown(calculator, "#extra-line", "10,000,000 sessions do not fit at any cap on this deployment")


def test_a_shared_prefix_shows_the_clis_sessions_with_it(calculator: Tab, capsys: pytest.CaptureFixture[str]) -> None:
    from playwright.sync_api import expect

    plan = cli_json(
        capsys, "plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k", "--prefix", "8k"
    )
    prefix = plan["prefix"]
    assert isinstance(prefix, dict)
    calculator.page.fill("#prefix", "8k")
    expected = f"with the shared prefix: {prefix['sessions']:,} sessions ({prefix['basis']})"
    expect(calculator.page.locator("#extra-line")).to_have_text(expected, timeout=WAIT_MS)
