"""Speeds measured in one load test predict, through the simulator, the latency of another (real llama-server).

tests/live/speed_check.py runs it: three identical llama-servers, load test A's holds of 2 and 4 sessions and B's
of 3 all at once, A's pooled speeds (``--speed-from``) simulated on B's closed loop; B's time to first
token and inter-token latency p50 must come out within 25% (the issue's bar, docs/speed.md "Held to a real
server" records the runs it was held to). No wall-clock bound: every hold is bounded by the requests it sends, so a
slow machine gives the same samples, later; what is compared are two medians of the same machine at once. A
machine whose load shifts while A and B run (three servers and their load tests on a shared CPU) can move one
run's medians by themselves (a clean-clone CI on 2 cores once gave ITL +27%, and the next runs +2% to +11%), so a
miss is measured once more, from new servers and load tests, and that second run must be within the bar: a model
that does not predict the server misses both.
"""

from __future__ import annotations

from pathlib import Path

from tests.live.speed_check import TOLERANCE, check


def _within(errors: dict[str, float]) -> bool:
    return all(abs(e) <= TOLERANCE for e in errors.values())


def test_one_load_tests_speeds_predict_anothers_latency(tmp_path: Path) -> None:
    (tmp_path / "first").mkdir()
    report, errors = check(tmp_path / "first")
    if not _within(errors):
        (tmp_path / "again").mkdir()
        again, errors = check(tmp_path / "again")
        report = f"first run: {report}; measured again: {again}"
    assert _within(errors), report
