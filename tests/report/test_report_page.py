"""The HTML page and the Markdown of `kvbudget report`, through the real entry point: the page fetches
nothing, each chart is an inline <svg> whose marks carry the CLI JSON's values, the key numbers are on it,
and the Markdown has the same figures as tables with the serve commands in code blocks."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from kvbudget.report.markdown import md
from kvbudget.units import format_bytes, format_int
from tests.report.cli_runs import DOCS_EXAMPLE, QUICK_SIM, QWEN, WEKA, document, html, run

CHARTS = {"per-token", "ledger", "sessions", "curve", "cdf", "levers"}
EXAMPLE = (*DOCS_EXAMPLE, *QUICK_SIM)


class Marks(HTMLParser):
    """Every element's attributes, grouped by the chart (<svg data-chart>) it sits in."""

    def __init__(self) -> None:
        super().__init__()
        self.charts: dict[str, list[tuple[str, dict[str, str]]]] = {}
        self.chart: str | None = None
        self.tags: list[tuple[str, dict[str, str]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.tags.append((tag, values))
        if tag == "svg":
            self.chart = values["data-chart"]
            self.charts[self.chart] = [(tag, values)]
        elif self.chart is not None:
            self.charts[self.chart].append((tag, values))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "svg":
            self.chart = None

    def marks(self, chart: str, cls: str) -> list[dict[str, str]]:
        return [a for tag, a in self.charts[chart] if a.get("class") == cls]


def _marks(page: str) -> Marks:
    parser = Marks()
    parser.feed(page)
    return parser


def _embedded(page: str) -> object:
    match = re.search(r'<script type="application/json" id="kvbudget-report">(.*?)</script>', page, re.S)
    assert match is not None
    return json.loads(match.group(1))


def test_the_page_fetches_nothing() -> None:
    page = html(*EXAMPLE)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # the only URL on the page is the SVG namespace, which names and fetches nothing
    assert set(re.findall(r"[a-z][a-z0-9+.-]*://[^\s\"'<>)]*", page, re.I)) == {"http://www.w3.org/2000/svg"}
    assert not re.search(r"\b(?:src|href|srcset|action|poster|data)\s*=", page, re.I)  # no attribute that loads
    assert "<link" not in page and "@import" not in page and "@font-face" not in page
    assert set(re.findall(r"url\(([^)]*)\)", page)) == {"#hatch"}  # the hatch pattern defined in the page
    scripts = re.findall(r"<script[^>]*>", page)
    assert scripts == ['<script type="application/json" id="kvbudget-report">']  # data, never run


def test_every_chart_is_an_inline_svg_with_the_cli_values() -> None:
    page = html(*EXAMPLE)
    marks = _marks(page)
    assert set(marks.charts) == CHARTS
    plan, levers = document("plan", *QWEN), document("levers", *QWEN)
    report = document("report", *EXAMPLE)
    for chart in CHARTS:
        svg = marks.charts[chart][0][1]
        assert svg["viewbox"].startswith("0 0 420 ") and svg["role"] == "img" and svg["aria-label"]

    (group,) = marks.marks("per-token", "bar")
    assert int(group["data-held-bytes-per-token"]) == plan["kv_bytes_per_token"] == 262_144
    assert int(group["data-bytes-at-cap"]) == plan["per_session_bytes"]

    segments = {s["data-label"]: int(s["data-bytes"]) for s in marks.marks("ledger", "segment")}
    assert sum(segments.values()) == plan["gpu_memory_bytes"] == int(marks.charts["ledger"][0][1]["data-total"])
    assert segments["weights"] == plan["weights_bytes"]
    assert segments["runtime overhead"] == plan["overhead_bytes"]
    assert segments["KV: 4 sessions at 32K"] == 4 * plan["per_session_bytes"]
    assert segments["KV: 4 sessions at 32K"] + segments["KV pool left over"] == plan["kv_pool_bytes"]
    assert segments["not used by the engine"] == plan["gpu_memory_bytes"] - plan["usable_bytes"]

    bars = {b["data-kind"]: float(b["data-sessions"]) for b in marks.marks("sessions", "bar")}
    # the example's coding agent passes the 32K cap in 71 of its first 200 sessions, at any load: the simulation
    # sustains none (its search stops after one probe), so no simulated bar is drawn, not a bar of 0
    simulated = report["sessions"]["simulated"]
    assert simulated["sustained_sessions"] is None and simulated["search_stopped"]["refused_at_cap"] == 71
    assert bars == {"planned": plan["sessions"]}

    points = [(int(p["data-cap"]), int(p["data-total-sessions"])) for p in marks.marks("curve", "point")]
    assert points == [(p["cap"], p["total_sessions"]) for p in report["curve"]]
    curve_markers = {m["data-marker"]: int(m["data-value"]) for m in marks.marks("curve", "marker")}
    assert curve_markers == {"cap": 32768, "recommended": report["trace"]["recommended_cap_tokens"], "window": 40960}

    (line,) = marks.marks("cdf", "line")
    assert line["data-points"] == " ".join(f"{t}:{s}" for t, s in report["trace"]["cdf"])
    cdf_markers = {m["data-marker"]: int(m["data-value"]) for m in marks.marks("cdf", "marker")}
    stats = document("trace", "stats", *WEKA, "--model", *QWEN)
    # the true recommendation (173,056: p99 + 10%), and the trained window drawn apart, not in its place
    p99 = stats["session_peak_tokens"]["p99"]
    assert cdf_markers == {"cap": 32768, "p99": p99, "recommended": 173_056, "window": 40960}

    lever_bars = [(b["data-lever"], int(b["data-total-sessions"])) for b in marks.marks("levers", "bar")]
    ranked = [(lv["lever"], lv["total_sessions"]) for lv in levers["levers"] if lv["total_sessions"] is not None]
    # best first per GPU at the same cap (tp x2's 13 sessions are on two GPUs: 6.5 each, below fp8's 9 on one)
    assert lever_bars == ranked and lever_bars[0] == ("KV fp8", 9) and ("tp x2", 13) in lever_bars
    (baseline,) = marks.marks("levers", "baseline")
    assert float(baseline["data-value"]) == levers["baseline_total_sessions"] == 4


def test_the_numbers_are_cards() -> None:
    from kvbudget.report.sections import seconds

    page = html(*EXAMPLE)
    cards = dict(re.findall(r'<li class="card" data-number="([^"]+)">.*?<div class="value">([^<]*)</div>', page))
    plan = document("plan", *QWEN)
    report = document("report", *EXAMPLE)
    assert report["sessions"]["simulated"]["sustained_sessions"] is None  # the search stopped at the cap
    planned = report["latency"]["planned"]
    assert cards == {
        "per-token": f"{format_int(plan['kv_bytes_per_token'])} B",
        "weights": format_bytes(plan["weights_bytes"]),
        "cap": "32,768 tokens",
        "p99": "157,056 tokens",
        "sessions": f"{plan['sessions']} / none found",
        "latency": f"TTFT {seconds(planned['ttft_s'])} · ITL {seconds(planned['itl_s'])}",
    }
    assert cards["weights"] == "31.96 GiB"


def test_the_embedded_data_is_the_json_document() -> None:
    assert _embedded(html(*EXAMPLE)) == document("report", *EXAMPLE)


def test_the_serve_commands_are_on_the_page() -> None:
    page = html(*QWEN)
    commands = document("plan", *QWEN)["commands"]
    shown = dict(re.findall(r'<pre><code data-engine="([^"]+)">([^<]*)</code></pre>', page))
    assert shown == {name: c["text"] for name, c in commands.items() if c["argv"]}
    assert next(iter(shown)) == "vllm"  # the plan's own engine first


def test_without_traces_or_measurements_the_page_says_what_to_give() -> None:
    page = html(*QWEN)
    assert set(_marks(page).charts) == CHARTS - {"cdf"}
    assert "add --trace FILE..." in page
    assert "give --workload FILE to run the simulator" in page
    assert "give --loadtest RESULT.json or --log ENGINE.log" in page


def test_markdown_has_the_tables_and_the_commands() -> None:
    code, out, err = run("report", *EXAMPLE, "--format", "md")
    assert code == 0, err
    plan = document("plan", *QWEN)
    assert "<svg" not in out and out.startswith("## kvbudget report: Qwen3-32B on vllm 0.33.0")
    for line in plan["ledger"]:
        assert f"| {line['label']} | {format_bytes(line['bytes'])} | {format_int(line['bytes'])} |" in out
    for command in plan["commands"].values():
        if command["argv"]:
            assert f"```sh\n{command['text']}\n```" in out
    assert "| enforced cap | 32,768 tokens | vllm --max-model-len 32768 |" in out
    assert "| p99 | 157,056 |" in out
    for point in document("report", *QWEN)["curve"]:
        assert f"| {format_int(point['cap'])} | {point['sessions']:,} | {point['total_sessions']:,} |" in out
    for lever in document("levers", *QWEN)["levers"]:
        name, change = md(lever["lever"]), md(lever["change"])  # escaped: "8->4-bit" is "8-&gt;4-bit"
        assert f"| {name} | {change} | {lever['total_sessions']:,} | {lever['delta']:+,} |" in out


@pytest.mark.parametrize(
    "name",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "a | b",
        "[x](javascript:y)",
    ],
)
def test_markdown_escapes_what_it_did_not_write(tmp_path: Path, name: str) -> None:
    model = tmp_path / "m"
    model.mkdir()
    config = {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
    config |= {"hidden_size": 256, "torch_dtype": "bfloat16", "vocab_size": 1000, "intermediate_size": 512}
    (model / "config.json").write_text(json.dumps(config), encoding="utf-8")
    from kvbudget.report.data import Report
    from kvbudget.report.markdown import render_markdown

    del render_markdown, Report  # the CLI renders; the name is the config folder's
    renamed = tmp_path / name.replace("/", "_").replace("\n", "\n")
    try:
        model.rename(renamed)
    except OSError:
        pytest.skip("this file system does not take that name")
    code, out, err = run("report", str(renamed), "--gpu", "h100-sxm", "--context", "4k", "--format", "md")
    assert code == 0, err
    prose = re.sub(r"(?ms)^(`{3,})sh\n.*?^\1$", "", out)  # a fenced block renders its text as code: inert
    assert "<script" not in prose and "<img" not in prose
    assert not re.search(r"(?<!\\)\]\(", prose)  # no link made from the name
    # the name's pipe is escaped wherever the name is written (no table cell split by it)
    named = [line for line in prose.splitlines() if "a \\| b" in line or "a | b" in line]
    assert all("a | b" not in line for line in named) and (bool(named) or "|" not in name)


@pytest.mark.parametrize(
    ("text", "inert"),
    [
        ("x\n# Injected", "x \\# Injected"),
        ("x\r\n## y\u2028z", "x \\#\\# y z"),
        ("<b onclick=1>&", "&lt;b onclick=1&gt;&amp;"),
        ("a | b", "a \\| b"),
        ("`code` *em* _u_ ![i](j)", "\\`code\\` \\*em\\* \\_u\\_ \\!\\[i\\](j)"),
    ],
)
def test_markdown_text_is_one_inert_line(text: str, inert: str) -> None:
    assert md(text) == inert


def test_out_writes_the_file_and_says_so(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    code, out, err = run("report", *QWEN, "--out", str(target))
    assert code == 0, err
    text = target.read_text(encoding="utf-8")
    assert out == (
        f"wrote {target} (html, {len(text.encode()):,} bytes): Qwen3-32B on vllm 0.33.0, 4 sessions at 32,768 tokens\n"
    )
    assert text == html(*QWEN) and text.endswith("</html>\n")
    md = tmp_path / "report.md"
    assert run("report", *QWEN, "--format", "md", "--out", str(md))[0] == 0
    assert md.read_text(encoding="utf-8") == run("report", *QWEN, "--format", "md")[1]


def test_si_units_label_the_charts_in_gb() -> None:
    page = html(*QWEN, "--units", "si")
    plan = document("plan", *QWEN)
    assert "GB (1 GB = 10^9 B) per GPU, of 85.06 GB" in page
    assert f">{format_bytes(plan['weights_bytes'], 'si')}</text>" in page and "GiB</text>" not in page
    assert "per GPU, kB (1 kB = 10^3 B)" in page  # the per-token axis
