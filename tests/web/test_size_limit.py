"""A size question like the README's with two rows checked by simulation (gpt-oss-120b with SGLang on H200 at 128K,
with a bf16 and an fp8 KV cache, both prefill-bound on speed's arithmetic: 60 GPUs each) on a real ``kvbudget
serve``: the process answering a request is not a daemon, so size's check by simulation runs its rows on worker
processes (``jobs``) there as on the command line, and at the server's time budget the answer's whole process group (the
answering process and its workers) is killed, and the client gets a 503 naming what would answer within the budget
(web/isolate.py)."""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.parse
from pathlib import Path

import pytest

from kvbudget.simulate.parallel import default_jobs
from tests.web.browser import serve
from tests.web.test_upload import upload

WEKA = Path(__file__).resolve().parents[2] / "examples" / "coding-agent-weka.toml"
# the README question's SGLang row and its fp8-cache twin: two latency-bound rows, each checked by simulation (the
# README's own vLLM row misses --ttft 2s on vLLM's fit, so the README question checks one row only; on B200 SGLang's
# row is memory-bound since prefill attention has its own share, so it is no longer checked)
README = {"model": "gpt-oss-120b", "gpu": "h200", "engine": "sglang", "kv-dtype": "auto,fp8", "sessions": "60",
          "context": "128k", "ttft": "2s", "itl": "50ms", "jobs": "2"}  # fmt: skip
BUDGET_S = 10  # past the two rows' sizing (under a second), short of their checks (tens of CPU s each)


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, state) of every process of this machine (Linux /proc)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="ascii")
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        found[int(entry.name)] = (int(fields[1]), int(fields[2]), fields[0])
    return found


def _descendants(root: int, table: dict[int, tuple[int, int, str]]) -> set[int]:
    out: set[int] = set()
    todo = [root]
    while todo:
        parent = todo.pop()
        for pid, (ppid, _, _) in table.items():
            if ppid == parent and pid not in out:
                out.add(pid)
                todo.append(pid)
    return out


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the process group is POSIX")
@pytest.mark.skipif(default_jobs() < 2, reason="jobs=2 asks for two cores")
def test_a_size_sweep_runs_on_workers_and_its_group_dies_at_the_budget() -> None:
    with serve("--request-seconds", f"{BUDGET_S}s") as server:
        status, _ = server.get("api/plan?model=llama-3.1-8b&gpu=l40s&context=16k")  # the fork server is up
        assert status == 200
        status, doc = upload(server, WEKA.read_bytes(), "coding-agent-weka.toml")
        assert status == 200, doc
        query = urllib.parse.urlencode({**README, "workload": str(doc["upload"]["id"])})  # type: ignore[index]
        reply: list[tuple[int, bytes]] = []
        asked = threading.Thread(target=lambda: reply.append(server.get(f"api/size?{query}")))
        asked.start()
        groups: set[int] = set()  # the answering processes: each leads its own group, with its workers in it
        most = 0
        while asked.is_alive():
            table = _processes()
            mine = _descendants(server.process.pid, table)
            leaders = {pid for pid in mine if table[pid][1] == pid}
            groups |= leaders
            most = max(most, max((sum(1 for p in mine if table[p][1] == g) for g in leaders), default=0))
            time.sleep(0.2)
        asked.join()
        status, body = reply[0]
        assert status == 503, body
        message = json.loads(body)["error"]["message"]
        assert message == (
            f"the answer took longer than {BUDGET_S:g} s, this server's budget per request; ask with no_simulate=1 "
            "(the latency-bound counts kept as speed's upper bound, in seconds) or fewer models, GPUs or engines, "
            "run the command line, or start the server with a larger --request-seconds"
        )
        # the check ran on two workers besides the answering process (it was serial in a daemon before)
        assert most >= 3, most
        # and nothing of the group outlives the budget: the workers were killed with the answering process
        deadline = time.monotonic() + 10
        left = [pid for pid, (_, group, state) in _processes().items() if group in groups and state != "Z"]
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = [pid for pid, (_, group, state) in _processes().items() if group in groups and state != "Z"]
        assert groups and left == []
        # the same question without the check answers within the budget
        quick = urllib.parse.urlencode({**README, "workload": str(doc["upload"]["id"]), "no_simulate": "1"})  # type: ignore[index]
        status, body = server.get(f"api/size?{quick}")
        assert status == 200, body
        assert json.loads(body)["simulate_check"].startswith("--no-simulate")
