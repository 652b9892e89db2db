"""The calculator page in a real headless Chromium, against a real ``kvbudget serve``: what it shows is what the CLI
computes, errors appear next to the field they concern, and the page is readable at laptop and phone widths."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kvbudget.cli.main import main
from kvbudget.units import money
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


def not_a_number(tab: Tab) -> list[str]:
    """Every attribute of every SVG element on the page whose value holds NaN, Infinity, undefined or null."""
    found: list[str] = tab.page.evaluate(
        """() => [...document.querySelectorAll('svg, svg *')].flatMap(e => [...e.attributes]
            .filter(a => /NaN|Infinity|undefined|null/.test(a.value))
            .map(a => `<${e.tagName} ${a.name}="${a.value}">`))"""
    )
    return found


def page_errors(tab: Tab) -> list[str]:
    """The page's console errors and uncaught exceptions, less Chromium's own line for an API answer of 400 (the
    CLI's error document, which the page shows): the page itself logs nothing."""
    return [e for e in tab.errors if "the server responded with a status of 400" not in e]


def compare_rows(tab: Tab) -> list[list[str]]:
    rows: list[list[str]] = tab.page.eval_on_selector_all(
        "#compare tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    return rows


def served_cells(row: dict[str, object]) -> list[str]:
    """A served compare row as the page's side-by-side table writes it: GPU x n, sessions, ..., $/h, $/session-h
    (the prices as `kvbudget compare` prints them)."""
    price, per_session = row["cost_per_hour"], row["cost_per_session_hour"]
    assert price is None or isinstance(price, float)
    assert per_session is None or isinstance(per_session, float)
    return [f"{row['gpu']} x {row['gpus']}", f"{row['sessions']:,}", money(price), money(per_session)]


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
        page.goto(server.url + "?compare=h200,t4&price=h100-sxm%3D2.49%2Fh&price=h200%3D3.10%2Fh")
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
        assert page.locator("#compare tr.refused").count() == 1  # t4: llama-3.1-8b does not fit
        assert not_a_number(opened) == []
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


def test_a_refused_gpu_compared_keeps_its_row_with_the_clis_reason(
    calculator: Tab, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 24: Qwen3-32B at 128K with an RTX 5090 to compare. The CLI refuses the 5090 (the weights do not fit) and
    h100-sxm holds 0 sessions: the row stays with the CLI's reason and fixes, the chart draws no point at NaN and
    marks the refused caps, and nothing is logged."""
    from playwright.sync_api import expect

    page = calculator.page
    page.fill("#model", "qwen3-32b")
    page.fill("#context", "128k")
    page.select_option("#gpu-add", "rtx-5090")
    doc = cli_json(
        capsys, "compare", "qwen3-32b", "--gpu", "h100-sxm,rtx-5090", "--engine", "vllm", "--context", "128k"
    )
    rows = doc["rows"]
    assert isinstance(rows, list)
    served, refused = rows
    assert served["refused"] is None
    assert served["sessions"] == 0
    assert isinstance(refused["refused"], str)
    assert "smallest fixes" in refused["refused"]
    shown(calculator, "#compare tr.refused td.reason", refused["refused"])
    shown(calculator, "#sessions-count", "0")
    got = compare_rows(calculator)
    assert [got[0][:2], *got[0][-2:]] == [served_cells(served)[:2], *served_cells(served)[2:]]
    assert got[1] == ["rtx-5090", "refused", refused["refused"]]
    # the warnings plan gives for the served deployment (128K is past Qwen3-32B's trained window) are on its row's note
    warnings = served["warnings"]
    assert isinstance(warnings, list) and warnings
    expect(page.locator("#compare-warnings li")).to_have_count(len(warnings), timeout=WAIT_MS)
    assert page.locator("#compare-warnings li").all_text_contents() == [f"h100-sxm: {w}" for w in warnings]
    # every cap of the chart: h100-sxm's points drawn (0 sessions at 64K and 128K), the 5090's six marked refused
    expect(page.locator("#curve path.refused")).to_have_count(6, timeout=WAIT_MS)
    assert page.locator("#curve circle").count() == 6
    assert "rtx-5090 (refused)" in page.locator("#curve text.label").all_text_contents()
    assert "refused (rtx-5090 at every cap)" in page.inner_text("#curve-note")
    assert not_a_number(calculator) == []
    assert calculator.errors == []


def test_a_refused_chosen_gpu_is_the_answer_with_the_clis_reason(
    browser: object, server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    """The chosen GPU refused: the plan's error is the answer (above the results, its fixes named), the GPU's row
    stays in the side-by-side table with the same reason, and the compared GPU is drawn."""
    from playwright.sync_api import Browser

    assert isinstance(browser, Browser)
    line = cli_error(capsys, "plan", "qwen3-32b", "--gpu", "rtx-5090", "--engine", "vllm", "--context", "128k")
    assert "smallest fixes" in line
    doc = cli_json(capsys, "compare", "qwen3-32b", "--gpu", "rtx-5090,h200", "--engine", "vllm", "--context", "128k")
    rows = doc["rows"]
    assert isinstance(rows, list)
    assert [r["gpu"] for r in rows] == ["h200", "rtx-5090"]
    with tab(browser) as opened:
        opened.page.goto(server.url + "?model=qwen3-32b&gpu=rtx-5090&engine=vllm&context=128k&compare=h200")
        opened.page.wait_for_selector("body[data-state=ready]")
        shown(opened, "#general-error", line)
        shown(opened, "#sessions-count", "refused")
        assert compare_rows(opened) == [
            [*served_cells(rows[0])[:2], *compare_rows(opened)[0][2:-2], *served_cells(rows[0])[2:]],
            ["rtx-5090", "refused", line.removeprefix("Error: ")],
        ]
        assert opened.page.locator("#ledger-section").is_hidden()
        assert opened.page.locator("#curve path.refused").count() == 6
        assert opened.page.locator("#curve circle").count() == 6
        assert not_a_number(opened) == []
        assert page_errors(opened) == []


def test_prices_show_the_clis_cost_per_hour_and_per_session_hour(
    calculator: Tab, capsys: pytest.CaptureFixture[str]
) -> None:
    page = calculator.page
    page.select_option("#gpu-add", "h200")
    page.select_option("#gpu-add", "t4")
    page.fill("#price-h100-sxm", "2.49/h")
    page.fill("#price-h200", "74.40/day")
    page.fill("#price-t4", "0.35")
    doc = cli_json(
        capsys,
        "compare",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm,h200,t4",
        "--engine",
        "vllm",
        "--context",
        "32k",
        "--price",
        "h100-sxm=2.49/h",
        "--price",
        "h200=74.40/day",
        "--price",
        "t4=0.35",
    )
    rows = doc["rows"]
    assert isinstance(rows, list)
    assert [r["gpu"] for r in rows] == ["h200", "h100-sxm", "t4"]
    assert rows[2]["refused"] is not None  # t4: the model does not fit; a refused row has no price
    expected = [served_cells(r) for r in rows[:2]]
    assert expected[0][2:] == ["3.10", "0.1148"]  # 74.40/day is 3.10/h; 3.10 / 27 sessions
    shown(calculator, "#compare tbody tr:nth-child(1) td:last-child", expected[0][3])
    shown(calculator, "#compare tbody tr:nth-child(2) td:last-child", expected[1][3])
    got = compare_rows(calculator)
    assert [[r[0], r[1], r[-2], r[-1]] for r in got[:2]] == expected
    assert got[2][:2] == ["t4", "refused"]
    assert "price=h100-sxm%3D2.49%2Fh&price=h200%3D74.40%2Fday&price=t4%3D0.35" in page.url
    assert calculator.errors == []


def test_a_bad_price_shows_the_clis_error_under_its_field(calculator: Tab, capsys: pytest.CaptureFixture[str]) -> None:
    page = calculator.page
    page.select_option("#gpu-add", "h200")
    line = cli_error(
        capsys,
        "compare",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm,h200",
        "--engine",
        "vllm",
        "--context",
        "32k",
        "--price",
        "h200=abc",
    )
    assert line.startswith("Error: --price h200=abc: ")
    page.fill("#price-h200", "abc")
    shown(calculator, "#price-h200-error", line)
    assert page.get_attribute("#price-h200", "aria-invalid") == "true"
    shown(calculator, "#price-h100-sxm-error", "")
    shown(calculator, "#general-error", "")
    # the rest is drawn without prices, as compare draws it with none
    got = compare_rows(calculator)
    assert [r[0] for r in got] == ["h200 x 1", "h100-sxm x 1"]
    assert [r[-2:] for r in got] == [["-", "-"], ["-", "-"]]
    page.fill("#price-h200", "3.10/h")
    shown(calculator, "#price-h200-error", "")
    shown(calculator, "#compare tbody tr:nth-child(1) td:nth-last-child(2)", "3.10")
    assert page.get_attribute("#price-h200", "aria-invalid") is None
    assert page_errors(calculator) == []
