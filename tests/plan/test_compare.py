"""kvbudget compare through the real entry point: every row is the plan `kvbudget plan` makes for it, costs are the
given prices over the sessions held, and a rate becomes GPUs through Little's law on the workload's session time."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

import kvbudget
from kvbudget.errors import InputError
from kvbudget.workload.little import session_time
from kvbudget.workload.loader import load_workload
from tests.helpers import run_cli

WORKLOAD = "examples/coding-agent.toml"


def _compare(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code, out, err = run_cli(capsys, "compare", *argv, "--json")
    assert code == 0, err
    doc: dict[str, object] = json.loads(out)
    return doc


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    code, out, err = run_cli(capsys, "plan", *argv, "--json")
    assert code == 0, err
    doc: dict[str, object] = json.loads(out)
    return doc


def test_rows_are_the_plans(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _compare(
        capsys, "llama-3.1-8b,qwen3-8b", "--gpu", "h100-sxm,l40s", "--engine", "vllm,sglang", "--context", "32k"
    )
    rows = doc["rows"]
    assert isinstance(rows, list) and len(rows) == 8
    sessions = [r["sessions"] for r in rows]
    assert sessions == sorted(sessions, reverse=True)  # --sort sessions: most first
    for row in rows:
        engine = row["engine"]
        assert isinstance(engine, dict)
        plan = _plan(capsys, row["model"], "--gpu", row["gpu"], "--engine", engine["name"], "--context", "32k")
        assert (row["sessions"], row["kv_pool_bytes"], row["per_session_bytes"]) == (
            plan["sessions"],
            plan["kv_pool_bytes"],
            plan["per_session_bytes"],
        )


def test_prices_give_cost_per_session_hour(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text('h100-sxm = "59.76/day"\n')  # = 2.49/h
    doc = _compare(
        capsys, "llama-3.1-8b", "--gpu", "h100-sxm,h200", "--context", "32k", "--engine", "vllm",
        "--prices", str(prices), "--price", "h200=3.59/h", "--sort", "cost",
    )  # fmt: skip
    rows = doc["rows"]
    assert isinstance(rows, list)
    by_gpu = {r["gpu"]: r for r in rows}
    h100 = by_gpu["h100-sxm"]
    assert h100["price_per_gpu_hour"] == pytest.approx(2.49)
    assert h100["cost_per_session_hour"] == pytest.approx(2.49 / h100["sessions"], abs=1e-6)  # rounded to 1e-6
    costs = [r["cost_per_session_hour"] for r in rows]
    assert costs == sorted(costs)


@pytest.mark.parametrize(
    ("prices", "message"),
    [
        # two prices for one GPU: the last one silently won, so $/h did not match either one the user read
        (("h100-sxm=2.49/h", "h100-sxm=3.10/h"), "--price h100-sxm=3.10/h: h100-sxm is already priced by --price "),
        (("h100-sxm=2.49/h", "H100-SXM=3.10/h"), "--price H100-SXM=3.10/h: h100-sxm is already priced by --price "),
        # an unknown GPU in a price named no option
        (("h900=2.49/h",), "--price h900=2.49/h: GPU 'h900' is not in the catalog"),
    ],
)
def test_a_gpu_priced_twice_or_unknown_is_refused(prices: tuple[str, ...], message: str) -> None:
    from kvbudget.errors import InputError

    request = kvbudget.CompareRequest(model=("llama-3.1-8b",), gpu=("h100-sxm",), context=(32_768,), price=prices)
    with pytest.raises(InputError) as caught:
        kvbudget.compare_deployments(request)
    assert str(caught.value).startswith(message), str(caught.value)


def test_each_rows_bytes_say_how_they_were_found() -> None:
    # a compare row gave the pool, the weights and a session's bytes with no provenance (plan's ledger has them)
    request = kvbudget.CompareRequest(model=("llama-3.1-8b",), gpu=("h100-sxm",), context=(8192,), engine=("vllm",))
    row = kvbudget.compare_deployments(request).to_dict()["rows"][0]  # type: ignore[index]
    plan = kvbudget.plan_deployment(
        kvbudget.PlanRequest(model="llama-3.1-8b", gpu="h100-sxm", context=8192, engine="vllm")
    )
    ledger = {line["label"]: line["provenance"] for line in plan.to_dict()["ledger"]}  # type: ignore[attr-defined]
    assert row["provenance"] == {
        "weights_bytes_per_gpu": "computed",  # from the config's parameter count at bf16
        "kv_pool_bytes": "heuristic",  # usable - weights - overhead: the weakest, the overhead's heuristic
        "per_session_bytes": "exact",  # vLLM's dense layout, held to vLLM's own code (engines/evidence)
    }
    assert (ledger["weights"], ledger["KV pool"], ledger["one session at the cap"]) == tuple(row["provenance"].values())


def test_one_gpu_by_two_names_is_refused() -> None:
    # --gpu h100,h100-sxm planned the same rows twice (the alias reads as h100-sxm)
    request = kvbudget.CompareRequest(model=("llama-3.1-8b",), gpu=("h100", "h100-sxm"), context=(8192,))
    with pytest.raises(InputError, match=r"^--gpu: 'h100-sxm' and 'h100' are the same GPU \(h100-sxm\); give it once"):
        kvbudget.compare_deployments(request)


def test_an_hourly_price_is_the_price_as_written() -> None:
    # the JSON said "price_per_gpu_hour": 3.5900000000000003 for --price h200=3.59/h (per second and back)
    rows = kvbudget.compare_deployments(
        kvbudget.CompareRequest(
            model=("llama-3.1-8b",),
            gpu=("h200", "h100-sxm"),
            context=(32_768,),
            price=("h200=3.59/h",),
            prices=None,
        )
    ).to_dict()["rows"]
    assert isinstance(rows, list)
    assert [r["price_per_gpu_hour"] for r in rows] == [3.59, None]


def test_a_rate_becomes_gpus_by_littles_law(capsys: pytest.CaptureFixture[str]) -> None:
    doc = _compare(
        capsys, "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm", "--context", "32k",
        "--workload", WORKLOAD, "--rate", "50/h",
    )  # fmt: skip
    row = doc["rows"][0]  # type: ignore[index]
    mean = session_time(load_workload(WORKLOAD)).mean_s
    needed = 50 / 3600 * mean
    assert row["rate"]["concurrent_sessions"] == pytest.approx(needed, rel=1e-6)
    assert row["rate"]["gpus_needed"] == math.ceil(needed / row["sessions_per_replica"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--rate", "50/h"), "--rate needs --workload FILE"),
        (("--price", "h100-sxm"), "write GPU=PRICE"),
        (("--price", "h100-sxm=cheap"), "cannot read 'cheap'"),
        (("--sort", "vibes"), "--sort: 'vibes' is not a choice; choose one of"),
    ],
)
def test_bad_options_are_one_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str) -> None:
    code, out, err = run_cli(capsys, "compare", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", *argv)
    assert code == 1 and out == "" and message in err and err.count("\n") == 1


def test_refused_deployments_are_rows_with_their_reason(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "compare", "qwen3-32b,llama-3.1-8b", "--gpu", "rtx-4090", "--context", "8k")
    assert code == 0
    assert "refused [" in out and "exceed the" in out


def test_simulate_gives_each_row_what_the_simulator_sustains(capsys: pytest.CaptureFixture[str]) -> None:
    """--simulate runs each served row as `kvbudget simulate` runs it (same plan, the engine's own policy, the
    workload) and turns the rate's Little's-law need into replicas holding the simulated sessions."""
    doc = _compare(
        capsys, "llama-3.1-8b", "--gpu", "h100-sxm,l40s", "--engine", "vllm,llamacpp", "--context", "32k",
        "--workload", WORKLOAD, "--rate", "50/h", "--simulate", "--search-sessions", "300", "--search-probes", "4",
    )  # fmt: skip
    rows = doc["rows"]
    assert isinstance(rows, list) and len(rows) == 4
    for row in rows:
        sim = row["simulated"]
        code, out, err = run_cli(
            capsys, "simulate", "--model", "llama-3.1-8b", "--gpu", row["gpu"], "--engine", row["engine"]["name"],
            "--context", "32k", "--workload", WORKLOAD, "--sessions", "300", "--search-sessions", "300",
            "--search-probes", "4", "--json",
        )  # fmt: skip
        assert code == 0, err
        alone = json.loads(out)
        assert sim["sustained_sessions_per_replica"] == pytest.approx(alone["sustained_sessions"], abs=0.005)
        assert sim["basis"] == alone["sustained_basis"]
        need = row["rate"]["concurrent_sessions"]
        per = sim["sustained_sessions_per_replica"]
        assert sim["replicas_needed"] == (max(1, math.ceil(need / per)) if per else None)
        assert sim["gpus_needed"] == sim["replicas_needed"]  # tp 1, pp 1
    code, out, _ = run_cli(
        capsys, "compare", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--workload", WORKLOAD,
        "--simulate", "--search-sessions", "200", "--search-probes", "3",
    )  # fmt: skip
    assert code == 0 and "sim sessions" in out.splitlines()[0] and "GPUs (sim)" not in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--simulate",), "--simulate needs --workload FILE"),
        (("--simulate", "--workload", WORKLOAD, "--context", ",".join(f"{k}k" for k in range(4, 30))),
         "--simulate: 26 served deployments to simulate; it takes at most 24"),
        # the sweep's ceiling: 3 rows x 2,000,000 sessions x (1 run + 6 probes) x the workload's 30 mean steps
        (("--simulate", "--workload", WORKLOAD, "--context", "8k,16k,32k", "--search-sessions", "2000000"),
         "--simulate: about 1,260,000,000 model calls for 3 deployments (420,000,000 each), about 140 minutes"),
    ],
)  # fmt: skip
def test_simulate_refuses_what_it_cannot_run(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, _, err = run_cli(capsys, "compare", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", *argv)
    assert code == 1 and message in err


def test_the_text_labels_every_figure_with_how_it_was_found(capsys: pytest.CaptureFixture[str]) -> None:
    """The text table gave sessions, a session's bytes and prices with no provenance (its JSON and plan's ledger
    carry them): a line under the table says, per column, exact / measured / computed / heuristic / given, and which
    rows a label holds for when they differ (the H200's memory is an estimate, the H100's measured)."""
    code, out, err = run_cli(
        capsys, "compare", "llama-3.1-8b", "--gpu", "h100-sxm,h200", "--engine", "vllm", "--context", "32k",
        "--price", "h100-sxm=2.49/h",
    )  # fmt: skip
    assert code == 0, err
    assert out.splitlines()[2].split()[1] == "h200"  # row 1: the H200
    flat = " ".join(out.split())
    assert (
        "provenance: per session exact (the engine's layout at the cap); sessions heuristic (KV pool // per session; "
        "the pool: GPU memory heuristic [1], measured [2], weights computed, runtime overhead heuristic); $/h given "
        "(--price, --prices); $/session-h computed ($/h / sessions)"
    ) in flat, flat
