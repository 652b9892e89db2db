"""Issue 21's acceptance test: ``kvbudget loadtest`` driven *through* ``kvbudget gateway`` at twice the planned
sessions, against a real llama-server (no mock; the tiny GGUF with Llama-3.1-8B's KV geometry).

The server has four slots of 256 cells (``-c 1024 -np 4``); the gateway holds a plan of two sessions at a
256-token cap. The load test holds four sessions (each request names its session with ``x-session-id`` and
ends it at the gateway when it ends), so two at a time are resident and two wait. Watched from outside at
10 ms: the server's ``/slots`` (never more than two processing) and its ``llamacpp:requests_deferred``
(never a deferred request), the gateway's ``/metrics`` (never more than two resident, the excess queued or
refused with 429) and no cap event (no session passed the cap; the load test ends a session at the cap). The
gateway records the steps (``--record``): ``kvbudget trace stats`` reads every row, and its steps and prompt
tokens are what the load test sent and the engine reported.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvbudget.cli.main import main
from kvbudget.workload.traces import kvbudget_jsonl
from tests.live.gateway import gateway
from tests.live.server import Server, binary, llama_server
from tests.live.test_loadtest_live import CAP, SLOTS, WORKLOAD
from tests.live.tiny_gguf import write_llama

PLANNED = 2


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    binary()  # skip (or fail under KVBUDGET_REQUIRE_LIVE) before writing anything
    where = tmp_path_factory.mktemp("gateway-loadtest-live")
    model = write_llama(where / "llama-3.1-8b-tiny.gguf")
    with llama_server(model, where / "server.log", "-c", str(SLOTS * CAP), "-np", str(SLOTS)) as running:
        yield running


def _deferred(server: Server) -> float:
    with urllib.request.urlopen(server.url + "/metrics", timeout=5) as reply:
        text = reply.read().decode()
    lines = [line for line in text.splitlines() if line.startswith("llamacpp:requests_deferred ")]
    assert lines, "llama-server exports llamacpp:requests_deferred with --metrics"
    return float(lines[0].split()[1])


def test_loadtest_through_the_gateway_at_twice_the_plan_never_makes_the_server_defer(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workload = tmp_path / "agent.toml"
    workload.write_text(WORKLOAD, encoding="utf-8")
    seen: dict[str, float] = {"processing": 0, "deferred": 0, "resident": 0, "queued": 0, "scrapes": 0}
    stop = threading.Event()
    record = tmp_path / "steps.jsonl"
    # the excess waits in the queue for the whole run (a session ends only after several steps): no 429 however slow
    args = ("--cap", str(CAP), "--sessions", str(PLANNED), "--queue-timeout", "900", "--engine", "llamacpp",
            "--record", str(record))  # fmt: skip
    with gateway(server.url, *args) as gw:

        def watch() -> None:
            while not stop.is_set():
                slots = server.get_json("/slots")
                assert isinstance(slots, list)
                seen["processing"] = max(seen["processing"], sum(1 for s in slots if s.get("is_processing")))
                seen["deferred"] = max(seen["deferred"], _deferred(server))
                seen["resident"] = max(seen["resident"], gw.metric("kvbudget_gateway_sessions_resident"))
                seen["queued"] = max(seen["queued"], gw.metric("kvbudget_gateway_sessions_queued"))
                seen["scrapes"] += 1
                time.sleep(0.01)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            code = main([
                "loadtest", gw.url, "--workload", str(workload), "--context", str(CAP), "--history", "filler",
                # stopped by a count, not a time: asking for a 6th request, 5 were sent and at most 3 are still out
                # (one a session; the asking one has none), so at least PLANNED were answered on any machine
                "--sessions", str(2 * PLANNED), "--max-requests", "5", "--duration", "900", "--time-scale", "0.01",
                "--target-ttft", "600",
                "--scrape-interval", "0.2", "--json",
            ])  # fmt: skip
        finally:
            stop.set()
            watcher.join(30)
        doc: dict[str, Any] = json.loads(capsys.readouterr().out)
        cap_events = gw.metric("kvbudget_gateway_cap_events_total")
        refused = gw.metric("kvbudget_gateway_admissions_refused_total")
        ended = gw.metric("kvbudget_gateway_sessions_ended_total", why="ended")
    assert code in (0, 1), doc  # 1: the level's own criteria (a waiting session's TTFT) may fail it
    assert seen["scrapes"] >= 3  # the watcher saw the run (each scrape is slower on a loaded machine, as is the run)
    assert seen["processing"] <= PLANNED, seen  # the server never held more than the plan
    assert seen["deferred"] == 0, seen  # llama-server never deferred a request
    assert seen["resident"] <= PLANNED, seen  # the gateway never admitted more than the plan
    assert seen["queued"] >= 1 or refused >= 1, seen  # the excess waited (or was refused with 429)
    assert cap_events == 0  # no session passed the cap
    assert doc["errors"] == 0 and doc["refused"] == 0 and int(str(doc["requests"])) >= PLANNED
    assert int(str(doc["sessions_started"])) >= 2 * PLANNED  # all four started: two admitted, two waited
    finished = int(str(doc["sessions_completed"])) + int(str(doc["sessions_capped"]))
    assert ended >= finished  # each session the load test finished was ended at the gateway, its slot reused
    # the record, read back as the next plan reads it: every row a step, every step the load test had answered (and
    # those it abandoned at the end of its run, once they had reached the engine: recorded with the engine's count)
    assert main(["trace", "stats", str(record), "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    bad: list[object] = []
    rows = list(kvbudget_jsonl.read(record, bad.append))
    assert stats["bad_rows"] == 0 and not bad and stats["steps"] == len(rows)
    answered, aborted = int(str(doc["requests"])), int(str(doc["requests_aborted"]))
    assert answered <= len(rows) <= answered + aborted
    assert stats["sessions"] <= int(str(doc["sessions_started"]))
    prompt = sum(row.prompt_tokens for row in rows)
    if aborted == 0:
        assert prompt == doc["tokens"]["prompt"]  # step for step, as the engine reported them to the load test
    else:
        assert prompt >= doc["tokens"]["prompt"]
