"""Load-test client benchmark: the client keeps hundreds of concurrent agent sessions on one CPU core.

What it measures is the *client* (``kvbudget loadtest``'s sessions, streaming parser, metric
scraper and recorder), so the server is a stub that answers at once: a tiny asyncio HTTP server in
its own process (pinned to another core when there is one) that streams ``max_tokens`` chunks at
``TOKEN_S`` per token, like a server decoding at 50 tokens/s per sequence, and exposes a small
vLLM-style ``/metrics``. The client process is pinned to one core. A stub is right for a
throughput benchmark of the client; every behaviour test runs against a real llama-server.

Per session: a closed loop of steps (prompt of the prefix + history, 32 output tokens, 50 ms
tool pause). If the client kept up perfectly, each session would complete one request every
``32 x TOKEN_S + pause`` seconds; ``keep_up`` is the requests completed over that ideal (less the
one request per session still in flight when the hold ends; 1.0 = the stub's own pace), and
``client_cpu_share`` the client process's CPU time over the wall time (1.0 = one core saturated).
Targets: 256 sessions held, ``keep_up >= 0.9``, ``client_cpu_share < 0.8`` and p99 TTFT under
``TOKEN_S + 0.1`` s. ``--smoke`` (scripts/check) runs 200 sessions for a few seconds and fails only
on a gross regression (``keep_up < 0.5``). Results are printed as one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

TOKEN_S = 0.02
OUTPUT = 32
PAUSE_S = 0.05
FULL_SESSIONS, FULL_SECONDS = 256, 20.0
SMOKE_SESSIONS, SMOKE_SECONDS = 200, 4.0
WORKLOAD = f"""\
name = "bench"
steps = 1000
first_prompt_tokens = 400
append_tokens = 60
output_tokens = {OUTPUT}
tool_latency_s = {PAUSE_S}
think_time_s = 0

[arrival]
rate_per_s = 1

[prefix]
system_prompt_tokens = 200

[cap]
at_cap = "compact"
target_fraction = 0.5
"""
METRICS = (
    '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{{model_name="stub"}} {running}\n'
    '# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{model_name="stub"}} 0\n'
    '# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{{model_name="stub"}} 0.5\n'
)


# -- the stub server (its own process) ------------------------------------------------------------


async def _serve(port: int, ready: multiprocessing.synchronize.Event) -> None:
    running = 0

    async def reply(writer: asyncio.StreamWriter, status: str, body: bytes, kind: str = "application/json") -> None:
        head = f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(body)}\r\n\r\n"
        writer.write(head.encode() + body)
        await writer.drain()

    async def stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: dict[str, object]) -> None:
        nonlocal running
        prompt = request.get("prompt", "")
        tokens, out = len(prompt) + 1 if isinstance(prompt, str) else 1, int(str(request.get("max_tokens", 1)))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        running += 1
        loop = asyncio.get_running_loop()
        start = loop.time()
        try:
            for i in range(out):
                await asyncio.sleep(max(0.0, start + (i + 1) * TOKEN_S - loop.time()))  # no drift over tokens
                if writer.is_closing() or reader.at_eof():
                    return  # the client went away (a load test stopping): stop decoding, as servers do
                choice = {"text": "x", "index": 0, "finish_reason": "length" if i == out - 1 else None}
                event: dict[str, object] = {"choices": [choice]}
                if i == out - 1:
                    event["usage"] = {"prompt_tokens": tokens, "completion_tokens": out}
                data = b"data: " + json.dumps(event).encode() + b"\n\n"
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            done = b"data: [DONE]\n\n"
            writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(done), done))
            await writer.drain()
        finally:
            running -= 1

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode().split("\r\n")
                method, path = lines[0].split()[:2]
                length = next((int(h.split(":")[1]) for h in lines if h.lower().startswith("content-length")), 0)
                body = json.loads(await reader.readexactly(length)) if length else {}
                if method == "POST" and path == "/v1/completions":
                    await stream(reader, writer, body)
                elif path == "/v1/models":
                    await reply(writer, "200 OK", b'{"object":"list","data":[{"id":"stub","owned_by":"stub"}]}')
                elif path == "/metrics":
                    await reply(writer, "200 OK", METRICS.format(running=running).encode(), "text/plain")
                elif path == "/version":
                    await reply(writer, "200 OK", b'{"version":"stub"}')
                else:
                    await reply(writer, "404 Not Found", b'{"error":"not found"}')
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    ready.set()
    async with server:
        await server.serve_forever()


def _stub(port: int, ready: multiprocessing.synchronize.Event, core: int | None) -> None:
    if core is not None:
        os.sched_setaffinity(0, {core})
    asyncio.run(_serve(port, ready))


# -- the client (this process, one core) -----------------------------------------------------------


def _cpu_seconds(pid: int | None) -> float:
    """User + system CPU seconds of a process (Linux /proc), 0 where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


def run(sessions: int, seconds: float) -> dict[str, object]:
    from kvbudget.measure.loadtest.progress import Progress
    from kvbudget.measure.loadtest.result import to_json
    from kvbudget.measure.loadtest.run import Settings, run_loadtest
    from kvbudget.measure.loadtest.session import from_workload

    cores = sorted(os.sched_getaffinity(0))
    client_core, stub_core = cores[0], (cores[1] if len(cores) > 1 else None)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready = multiprocessing.Event()
    stub = multiprocessing.Process(target=_stub, args=(port, ready, stub_core), daemon=True)
    stub.start()
    try:
        if not ready.wait(10):
            raise RuntimeError("the stub server did not start")
        os.sched_setaffinity(0, {client_core})
        with tempfile.TemporaryDirectory() as tmp:
            workload = Path(tmp) / "bench.toml"
            workload.write_text(WORKLOAD, encoding="utf-8")
            source = from_workload(str(workload), seed=0, prefix=None)
            settings = Settings(
                url=f"http://127.0.0.1:{port}",
                context=1_000_000,
                hold=sessions,
                duration_s=seconds,
                time_scale=1.0,
                target_ttft_s=10.0,
            )
            cpu, wall, stub_cpu = time.process_time(), time.perf_counter(), _cpu_seconds(stub.pid)
            outcome = run_loadtest(settings, source, lambda info, cap: None, Progress(False))
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            stub_cpu = _cpu_seconds(stub.pid) - stub_cpu
    finally:
        os.sched_setaffinity(0, set(cores))
        stub.terminate()
        stub.join(10)
    doc = to_json(outcome)
    requests = int(str(doc["requests"]))
    held = float(str(doc["duration_s"]))
    # Each session completes one request per cycle; the last cycle may still be in flight at the end.
    ideal = sessions * (held / (OUTPUT * TOKEN_S + PAUSE_S) - 1)
    ttft = doc["ttft_s"]
    assert isinstance(ttft, dict)
    return {
        "benchmark": "loadtest",
        "sessions": sessions,
        "sessions_started": doc["sessions_started"],
        "seconds_held": round(held, 2),
        "requests": requests,
        "errors": doc["errors"],
        "requests_per_s": round(requests / held, 1),
        "tokens_per_s": round(int(str(doc["tokens"]["output"])) / held),  # type: ignore[index]
        "keep_up": round(requests / ideal, 3),
        "ttft_p50_s": ttft["p50"],
        "ttft_p99_s": ttft["p99"],
        "client_cpu_share": round(cpu / wall, 3),
        "stub_cpu_share": round(stub_cpu / wall, 3),
        "scrapes": doc["scrapes"],
        "stopped_by": doc["stopped_by"],
        "error": doc["error"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--smoke", action="store_true", help="200 sessions for a few seconds, lenient bound (CI)")
    parser.add_argument("--sessions", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=0.0)
    args = parser.parse_args()
    sessions = args.sessions or (SMOKE_SESSIONS if args.smoke else FULL_SESSIONS)
    seconds = args.seconds or (SMOKE_SECONDS if args.smoke else FULL_SECONDS)
    out = run(sessions, seconds)
    print(json.dumps(out))
    keep_up, share = float(str(out["keep_up"])), float(str(out["client_cpu_share"]))
    p99 = float(str(out["ttft_p99_s"] or "inf"))
    failures = []
    if out["error"] or out["errors"]:
        failures.append(f"errors: {out['error'] or out['errors']}")
    if args.smoke:
        if keep_up < 0.5:
            failures.append(f"keep_up {keep_up} < 0.5")
    else:
        if keep_up < 0.9:
            failures.append(f"keep_up {keep_up} < 0.9")
        if share >= 0.8:
            failures.append(f"client CPU share {share} >= 0.8 of one core")
        if p99 > TOKEN_S + 0.1:
            failures.append(f"p99 TTFT {p99} s > {TOKEN_S + 0.1} s")
    for failure in failures:
        print(f"FAIL: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
