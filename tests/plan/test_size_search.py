"""The order of size's simulation probes (plan/sizing_check.py ``_check_one``) changes which runs are made, never the
answer: for every place the verdict can turn (a count that meets, one fewer that misses), every floor and bound, with
the calibration run at the bound met or missed, the search finds the fewest count that meets, the run one fewer
missing it, as a walk through every count would. The simulator is replaced by the verdict alone (the real runs are
held in tests/plan/test_size.py: the README question's 9 SGLang and 11 vLLM H200s)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from kvbudget.plan import sizing_check
from kvbudget.plan.sizing_check import ABOVE, Probe


def _probe(replicas: int, met: bool) -> Probe:
    return Probe(replicas, 0.0, 0.0, 0.0, met, () if met else ("p99 TTFT",))


def _search(monkeypatch: pytest.MonkeyPatch, floor: int, bound: int, turn: int, calibration: bool | None) -> object:
    """The check of a row whose memory floor and speed bound are given, on which simulate meets from ``turn`` up."""
    row = SimpleNamespace(load=SimpleNamespace(sessions=floor * 10), memory_sessions=10, replicas=bound)
    runs: list[int] = []

    def run(request: object, c: object, replicas: int, rate: float) -> Probe:
        runs.append(replicas)
        return _probe(replicas, replicas >= turn)

    cal = None if calibration is None else _probe(bound, calibration)
    monkeypatch.setattr(sizing_check, "_rate", lambda request, c, workload: (1.0, "", cal))
    monkeypatch.setattr(sizing_check, "_run", run)
    sim = sizing_check._check_one(None, None, row)  # type: ignore[arg-type]  # the fakes carry what it reads
    assert len(runs) == len(set(runs)), runs  # no count is run twice
    return sim


@pytest.mark.parametrize("calibration", [None, True, False])
def test_every_turn_is_found_with_one_fewer_missing(monkeypatch: pytest.MonkeyPatch, calibration: bool | None) -> None:
    for floor in (1, 2, 5, 9):
        for bound in range(floor, floor + 12):
            for turn in range(1, ABOVE * bound + 3):
                sim = _search(monkeypatch, floor, bound, turn, calibration)
                expected = max(turn, floor) if turn <= ABOVE * bound else None
                assert sim.replicas == expected, (floor, bound, turn, [p.replicas for p in sim.probes])  # type: ignore[attr-defined]
                if expected is None:
                    continue
                assert sim.met_probe is not None and sim.met_probe.met  # type: ignore[attr-defined]
                missed = sim.missed_probe  # type: ignore[attr-defined]
                assert (missed is None) == (expected == floor) and (missed is None or not missed.met)


def test_the_readme_questions_rows_take_four_probes_where_bisection_took_seven(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang on H200: floor 9, bound 15, meets from 9: the floor alone. vLLM on H200: floor 5, bound 15, meets from
    11 (docs/size.md): 5, then the midpoint 10 (missed) and its neighbour 11 (met). A bisection from the middle made
    12, 10, 9 and 10, 13, 12, 11."""
    sglang = _search(monkeypatch, 9, 15, 9, True)
    vllm = _search(monkeypatch, 5, 15, 11, True)
    assert [p.replicas for p in sglang.probes] == [9]  # type: ignore[attr-defined]
    assert [p.replicas for p in vllm.probes] == [5, 10, 11]  # type: ignore[attr-defined]


def test_the_probes_stay_within_a_few_of_a_bisections(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worst case of the order: the floor and each neighbour can be a run a bisection would not make; within the
    floor to the bound, no more than the bisection's halvings plus their neighbours and the floor."""
    for floor, bound in ((1, 16), (5, 15), (9, 40)):
        width = bound - floor + 1
        for turn in range(floor, bound + 1):
            sim = _search(monkeypatch, floor, bound, turn, True)
            assert len(sim.probes) <= 2 * math.ceil(math.log2(width)) + 1  # type: ignore[attr-defined]
