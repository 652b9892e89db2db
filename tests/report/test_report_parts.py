"""The report's parts on their own: the CDF's points, the session peaks behind them, the caps of the curve,
the setting that enforces the cap in each engine's serve command, and the chart scales."""

from __future__ import annotations

import pytest

from kvbudget.report.charts import byte_unit
from kvbudget.report.collect import cap_setting, curve_caps
from kvbudget.report.svg import nice_ticks
from kvbudget.report.traces import cdf_points, session_peaks
from kvbudget.workload.record import StepRecord
from kvbudget.workload.stats import Distribution, trace_stats
from kvbudget.workload.traces import read_records
from tests.report.cli_runs import ROOT, document

TRACES = ROOT / "tests" / "data" / "traces"


def _step(session: str, step: int, prompt: int, output: int, *, final: bool = False) -> StepRecord:
    return StepRecord(
        session=session, step=step, start_s=float(step), prompt_tokens=prompt, output_tokens=output, final=final
    )


def test_a_session_peak_is_its_largest_context_even_after_compaction() -> None:
    records = [
        _step("a", 0, 1000, 100),
        _step("b", 0, 50, 5, final=True),
        _step("a", 1, 9000, 500),  # 9,500: the peak
        _step("a", 2, 3000, 200),  # compacted
        _step("b", 0, 70, 7, final=True),  # the id again after a final row: a new session
    ]
    assert sorted(session_peaks(records)) == [55, 77, 9500]


@pytest.mark.parametrize(
    "files",
    [
        sorted(str(p) for p in (TRACES / "weka_kv_cache_tester").glob("trace_*.json")),
        [str(TRACES / "mooncake_fast25" / "synthetic_trace.jsonl")],
        [str(TRACES / "tracelab_example" / "round_trace.sanitized.jsonl")],
    ],
    ids=["weka", "mooncake", "tracelab"],
)
def test_session_peaks_are_the_ones_trace_stats_counts(files: list[str]) -> None:
    records = list(read_records(files, bad_rows=[]))
    peaks = session_peaks(records)
    assert Distribution.of(peaks) == trace_stats(records, 0).session_peak_tokens


def test_cdf_points_are_ranks_over_the_count() -> None:
    assert cdf_points([30, 10, 20, 20]) == ((10, 0.25), (20, 0.75), (30, 1.0))
    assert cdf_points([]) == ()


def test_cdf_points_thin_out_by_nearest_rank() -> None:
    peaks = list(range(1, 1001))
    points = cdf_points(peaks, max_points=100)
    assert len(points) == 100
    assert points[0] == (10, 0.01) and points[-1] == (1000, 1.0)
    assert all(share == tokens / 1000 for tokens, share in points)


def test_curve_caps_double_from_1k_with_the_cap_the_window_and_marks() -> None:
    assert curve_caps(32768, 40960) == [1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 40960]
    assert curve_caps(5000, None, [7168]) == [1024, 1536, 2048, 3072, 4096, 5000, 6144, 7168, 8192, 10000]
    assert curve_caps(300, None) == [300, 600]


def test_cap_setting_in_every_engines_command() -> None:
    commands = document("plan", "qwen3-32b", "--gpu", "h100-sxm", "--context", "32k", "--weights", "fp8")["commands"]
    settings = {name: cap_setting(c["argv"], 32768) for name, c in commands.items()}
    assert settings == {
        "vllm": "--max-model-len 32768",
        "sglang": "--context-length 32768",
        "trtllm": "--max_seq_len 32768",
        "llamacpp": "-c 163840 -np 5 (163,840 / 5 = 32,768 tokens per slot)",
        "ollama": "OLLAMA_CONTEXT_LENGTH=32768",
    }
    assert cap_setting(["vllm", "serve", "m", "--max-num-batched-tokens", "32768"], 32768) is None


def test_nice_ticks_reach_the_top_in_round_steps() -> None:
    assert nice_ticks(79.22) == [0.0, 20.0, 40.0, 60.0, 80.0]
    assert nice_ticks(13) == [0.0, 5.0, 10.0, 15.0]
    assert nice_ticks(4.01) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert nice_ticks(0) == [0.0, 1.0]


def test_byte_units_are_labelled_per_system() -> None:
    assert byte_unit(262_144, "iec") == (1024, "KiB")
    assert byte_unit(262_144, "si") == (1000, "kB")
    assert byte_unit(85_061_827_297, "iec") == (2**30, "GiB")
    assert byte_unit(512, "iec") == (1, "B")
