"""Speeds measured in one load test predict, through the simulator, the latency of another (real llama-server).

Three identical servers: a tiny GGUF with Llama-3.2-1B's KV geometry (tests/live/tiny_gguf.py) that generates
only the letter ``a``, so each reply sent back as history is the same tokens again and the slot's prompt cache
keeps them, as a real model's would; ``-c 1024 -np 4``: four slots of 256 cells. The sessions vary (uniform step
sizes, exponential tool pauses) so that they drift apart as real agents do.

Load test B holds 3 sessions on one server until it sent 60 requests while, all the while, load test A holds 2
sessions on the second and 4 on the third (two processes, interrupted when B ends: Ctrl-C, the load test writes
what it measured). At every moment the three see the same machine, so the speed of a shared machine (the 2-core CI
machine; the development machine's load average swings by a factor of two within seconds) drifts under all of
them alike: A's samples at 2 and at 4 sessions cover the same seconds as B's, where holds of 2 then 4 on one
server each covered a different stretch and the fit took the machine's drift for the sessions' cost. B is bounded
by the requests it sends (``--max-requests``; ``--duration`` only a ceiling), never by the clock, so a slow machine
gives the same samples, only later. A's results are pooled by ``--speed-from`` and fitted once over the union of
their clean gaps and prefill rows (their ``sample``, kvbudget.measure.loadtest.speeds): the decode iteration by
sessions decoding and tokens held, and the prefill time less each request's wait for the running batch. The
simulator runs B's closed loop (3 sessions, each replaced when it ends, the same sessions by the same seed,
``SimConfig.closed_loop``) on the slots' memory for B's duration at A's speeds; its TTFT and inter-token latency
p50 must land within 25% of B's.

In the suite as tests/live/test_speed_prediction_live.py; docs/speed.md, "Held to a real server", records the runs
it was held to. Run it by hand: ``python -m tests.live.speed_check`` prints the figures (exit 1 outside 25%).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema

from kvbudget.measure.loadtest.session import from_workload
from kvbudget.schemas import schema
from kvbudget.simulate import MemoryModel, MemoryPolicy, SimConfig, simulate
from kvbudget.simulate.measured import measured_speeds
from kvbudget.simulate.speeds import measured_time_model
from tests.live.server import binary, llama_server
from tests.live.tiny_gguf import LLAMA_32_1B, write_llama

SLOTS, CAP = 4, 256
SCALE = 0.05  # the load test's --time-scale: tool pauses of 1 s mean last 50 ms
A_SESSIONS = (2, 4)  # A's holds, each on its own server, all the while B runs (interrupted when B ends)
A_CEILING = 10_000  # A's --max-requests: never reached, B's end ends them
B_SESSIONS, B_REQUESTS, B_SEED = 3, 60, 1  # B's one hold
TOLERANCE = 0.25
WORKLOAD = """\
name = "live-speed"
steps = 8
think_time_s = 0

[arrival]
rate_per_s = 1

[prefix]
system_prompt_tokens = 32

[first_prompt_tokens]
dist = "uniform"
low = 8
high = 32

[append_tokens]
dist = "uniform"
low = 4
high = 16

[output_tokens]
dist = "uniform"
low = 4
high = 20

[tool_latency_s]
dist = "exponential"
mean = 1.0

[cap]
at_cap = "refuse"
"""


def _start(url: str, workload: Path, out: Path, sessions: int, requests: int, seed: int) -> subprocess.Popen[bytes]:
    """One load test, its own process (two run at once), holding ``sessions`` until it sent ``requests``."""
    command = [
        sys.executable, "-m", "kvbudget", "loadtest", url, "--workload", str(workload), "--context", str(CAP),
        "--history", "output", "--time-scale", str(SCALE), "--target-ttft", "60", "--scrape-interval", "0.5",
        "--seed", str(seed), "--sessions", str(sessions), "--max-requests", str(requests), "--duration", "3600",
        "--json", "--out", str(out),
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    with out.with_suffix(".log").open("w", encoding="utf-8") as log:  # the child keeps its own descriptor
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL, env=env)


def _result(process: subprocess.Popen[bytes], out: Path, requests: int, *, whole: bool) -> dict[str, Any]:
    """The load test's result, checked; ``whole``: it ran to its requests (not interrupted by B's end)."""
    process.wait()
    error = out.with_suffix(".log").read_text(encoding="utf-8")[-2000:]
    assert process.returncode == 0 or not whole, f"kvbudget loadtest exited with {process.returncode}: {error}"
    doc: dict[str, Any] = json.loads(out.read_text(encoding="utf-8"))
    jsonschema.validate(doc, schema("loadtest"))
    (level,) = doc["levels"]
    assert level["refused"] == 0 and level["errors"] == 0 and level["deferred_peak"] == 0, level["reasons"]
    # --max-requests ends the hold at its last send: at most one request a session is cut off in flight
    assert not whole or level["requests"] >= requests - level["sessions"], level
    return doc


def check(tmp_path: Path) -> tuple[str, dict[str, float]]:
    """Run A's servers and B's at once, and the simulator; (the report, the relative errors of the TTFT and
    inter-token latency p50)."""
    binary()
    model = write_llama(tmp_path / "llama-3.2-1b-tiny.gguf", LLAMA_32_1B, letter="a")
    workload = tmp_path / "agents.toml"
    workload.write_text(WORKLOAD, encoding="utf-8")
    args = ("-c", str(SLOTS * CAP), "-np", str(SLOTS))
    with ExitStack() as stack:
        servers = [
            stack.enter_context(llama_server(model, tmp_path / f"server-{name}.log", *args))
            for name in [*(f"a{n}" for n in A_SESSIONS), "b"]
        ]
        a = [tmp_path / f"a{n}.json" for n in A_SESSIONS]
        running = [
            _start(server.url, workload, path, n, A_CEILING, 10 + n)
            for server, path, n in zip(servers, a, A_SESSIONS, strict=False)
        ]
        try:
            b_out = tmp_path / "b.json"
            b = _result(
                _start(servers[-1].url, workload, b_out, B_SESSIONS, B_REQUESTS, B_SEED), b_out, B_REQUESTS, whole=True
            )
        finally:
            for process in running:  # Ctrl-C: the load test writes what it measured
                if process.poll() is None:
                    process.send_signal(signal.SIGINT)
        docs = [_result(process, path, A_CEILING, whole=False) for process, path in zip(running, a, strict=True)]
    for doc in [*docs, b]:
        assert doc["tokens"]["cached"] > doc["tokens"]["prompt"] / 2, "the history was the server's own tokens"
        assert len(doc["speeds"]["sample"]["prefills"]) == doc["speeds"]["prefill_requests"], "all kept: < 4,000"
    measured = measured_speeds(",".join(str(path) for path in a))  # one fit over the union of A's holds' samples
    assert measured.clean and measured.decode_fit is not None and measured.prefill_per_token is not None
    # llama.cpp's slots, one byte a cell: each session reserves a slot of CAP cells (reserve-at-cap, as the load
    # test's own prediction), and its cache's bytes are the tokens it holds, which the decode fit reads
    cells = MemoryModel.linear(SLOTS * CAP, 1, CAP, share_prefix=False)
    time_model = measured_time_model(replace(measured, bytes_per_token=1.0))
    held = b["levels"][0]
    source = from_workload(str(workload), B_SEED, None)  # B's own sessions, in the same order
    config = SimConfig(
        memory=cells,
        policy=MemoryPolicy(policy="reserve", admission="queue", cap=source.cap(CAP)),
        time=time_model,
        closed_loop=B_SESSIONS,
        duration_s=float(held["duration_s"]),
    )
    result = simulate((source.plan(i, SCALE) for i in range(1000)), config)
    assert result.refused_admission == 0
    predicted = {"ttft": result.ttft_s["p50"], "itl": result.itl_s["p50"]}
    observed = {"ttft": float(held["ttft_s"]["p50"]), "itl": float(held["itl_s"]["p50"])}
    errors = {k: predicted[k] / observed[k] - 1 for k in predicted}
    rates = ", ".join(f"{1e3 / rate:.0f} ms at {n}" for n, rate in measured.points)
    compared = ", ".join(
        f"{k} predicted {predicted[k] * 1e3:.0f} ms vs {observed[k] * 1e3:.0f} ms ({errors[k]:+.0%})" for k in errors
    )
    c0, c1, c2 = measured.decode_fit
    a_holds = ", ".join(f"{d['levels'][0]['requests']} at {d['levels'][0]['sessions']}" for d in docs)
    report = (
        f"A's holds: {a_holds}; "
        f"decode iteration {rates} ({c0 * 1e3:.1f} ms + {c1 * 1e3:.1f} ms a session + {c2 * 1e6:.0f} us a token "
        f"held); prefill {measured.prefill_per_token * 1e3:.2f} ms/token + "
        f"{measured.prefill_per_context * 1e6:.1f} us/token/context, {measured.first_token_s * 1e3:.0f} ms/request; "
        f"B: {held['requests']} requests in {held['duration_s']:.0f} s, simulated {result.steps} steps; {compared}"
    )
    return report, errors


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as where:
        text, errs = check(Path(where))
    print(text)
    sys.exit(0 if all(abs(e) <= TOLERANCE for e in errs.values()) else 1)
