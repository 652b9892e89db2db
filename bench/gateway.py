"""Gateway overhead benchmark: the latency ``kvbudget gateway`` adds over a direct call, per streamed request.

A small local upstream (aiohttp, in a process of its own on this machine, as an engine is) answers like
llama-server with no model behind it: ``/v1/models`` (a BPE vocabulary), ``/apply-template`` and ``/tokenize`` (the
gateway counts a request through them, as it does with a real llama-server, unless its bound proves it fits:
``--cap 1M``, the default, skips every count, ``--cap 24`` none) and a streamed chat completion of ``EVENTS`` SSE
events plus the usage event. The gateway runs as its command line (a subprocess, ``--engine llamacpp``). A client
(aiohttp) sends streamed requests at 1, 64 and 512 concurrent streams (``--streams``), each stream a session of its
own, directly and through the gateway, rounds alternating; reported per concurrency: time to first byte and to the
last byte, p50 and p99, direct and through the gateway, and the added p50/p99 (gateway minus direct, of the same
percentile). The upstream runs in its own process so that the direct call crosses processes as a call to an engine
does: with the upstream inside the client's event loop, a direct call never waited for the scheduler, and on an
oversubscribed machine each wake-up of another process costs milliseconds, which the "added" figure then wrongly
charged to the gateway. Also reported: the gateway process's own CPU time per request (user + system, /proc), its
cost whatever the machine's load. Measured, on whatever machine runs it: a shared 2-core machine makes the
64-stream figures mostly queueing on the CPU. Results: one JSON document.

Also measured: the memory of 10,000 resident sessions in the gateway's own structures (admission state with a
pending trace row each, as under ``--record``), by tracemalloc, in this process.

``--smoke``: fewer requests (for a quick check); ``--json``: only the document; ``--state redis://...``: the
gateway keeps its sessions in that Redis (two Lua scripts a request: the entry, which admits a new session or
reads a resident one's carried state, and the release); ``--replicas N`` (with ``--state``): N gateway processes
share that Redis and each stream alternates between them request by request, so every request after a stream's
first enters a session another replica served last (the reported CPU is all the replicas' together);
``--profile FILE``: the gateway runs under cProfile, its statistics written to FILE when it stops (read them with
``python -m pstats FILE``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).resolve().parents[1]
PROFILED = """import cProfile, time
from kvbudget.cli.main import entry
profile = cProfile.Profile(time.process_time)
profile.enable()
try:
    entry()
finally:
    profile.disable()
    profile.dump_stats({file!r})
"""
EVENTS = 8
CONTENT = ["hello"]  # the user message of every request (--body-kib pads it)


def _upstream_app() -> web.Application:
    async def template(request: web.Request) -> web.Response:
        body = await request.json()
        text = "".join(str(m.get("content", "")) for m in body.get("messages", []))
        return web.json_response({"prompt": text})

    async def tokenize(request: web.Request) -> web.Response:
        body = await request.json()
        return web.json_response({"tokens": list(range(1 + len(str(body.get("content", "")))))})

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        reply = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await reply.prepare(request)
        for _ in range(EVENTS):
            await reply.write(b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n')
        await reply.write(b'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":8}}\n\n')
        await reply.write(b"data: [DONE]\n\n")
        await reply.write_eof()
        return reply

    async def models(request: web.Request) -> web.Response:  # llama-server's meta: a BPE vocabulary (2)
        return web.json_response({"object": "list", "data": [{"id": "bench", "meta": {"vocab_type": 2}}]})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/apply-template", template)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/v1/chat/completions", chat)
    return app


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc; its clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(share * len(ordered)) - 1))]


async def _one(client: aiohttp.ClientSession, url: str, session: str) -> tuple[float, float]:
    try:
        return await _timed(client, url, session)
    except aiohttp.ServerDisconnectedError:
        # a kept-alive connection the server closed at its keep-alive timeout (uvicorn: 5 s) while a long round
        # to the other side ran: the request never left; once more on a fresh connection, timed afresh
        return await _timed(client, url, session)


async def _timed(client: aiohttp.ClientSession, url: str, session: str) -> tuple[float, float]:
    body = {"messages": [{"role": "user", "content": CONTENT[0]}], "max_tokens": 8, "stream": True}
    start = time.perf_counter()
    async with client.post(url + "/v1/chat/completions", json=body, headers={"x-session-id": session}) as reply:
        first = None
        async for _ in reply.content.iter_any():
            if first is None:
                first = time.perf_counter() - start
        assert reply.status == 200, reply.status
    return first or 0.0, time.perf_counter() - start


async def _round(
    client: aiohttp.ClientSession, urls: list[str], streams: int, each: int, tag: str
) -> list[tuple[float, float]]:
    async def worker(i: int) -> list[tuple[float, float]]:  # stream i's k-th request to replica (i + k) mod N
        return [await _one(client, urls[(i + k) % len(urls)], f"{tag}-{i}") for k in range(each)]

    results = await asyncio.gather(*(worker(i) for i in range(streams)))
    return [r for worker_results in results for r in worker_results]


def _summary(times: list[tuple[float, float]]) -> dict[str, float]:
    ttfb, total = [t[0] for t in times], [t[1] for t in times]
    return {
        "ttfb_p50_ms": _percentile(ttfb, 0.5) * 1e3,
        "ttfb_p99_ms": _percentile(ttfb, 0.99) * 1e3,
        "total_p50_ms": _percentile(total, 0.5) * 1e3,
        "total_p99_ms": _percentile(total, 0.99) * 1e3,
    }


# requests per stream at each concurrency (full, --smoke): enough for a p99 at one stream, a few rounds at many
PER_STREAM = {1: (400, 50), 64: (10, 2), 512: (4, 1)}


async def _serve_upstream() -> None:
    """The upstream alone, in this process: its URL on stdout, then it serves until killed."""
    runner = web.AppRunner(_upstream_app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    print(f"http://127.0.0.1:{port}", flush=True)
    await asyncio.Event().wait()


async def _bench(
    smoke: bool,
    engine: str,
    state: str | None = None,
    levels: tuple[int, ...] = (1, 64, 512),
    profile: str | None = None,
    cap: str = "1M",
    replicas: int = 1,
) -> dict[str, Any]:
    path = [str(ROOT / "src")] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    server = subprocess.Popen([sys.executable, __file__, "--serve-upstream"], stdout=subprocess.PIPE, text=True,
                              env=env)  # fmt: skip
    assert server.stdout is not None
    upstream = (await asyncio.to_thread(server.stdout.readline)).strip()
    command = [sys.executable, "-m", "kvbudget", "gateway", "--upstream", upstream, "--port", "0",
               "--cap", cap, "--sessions", "100000", "--engine", engine]  # fmt: skip
    if state is not None:
        command += ["--state", state]
    if profile is not None:  # CPU time (process_time), not wall time: a wait for a busy core is not the gateway's cost
        command[1:3] = ["-c", PROFILED.format(file=profile)]  # in place of -m kvbudget
    gateways = [subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env) for _ in range(replicas)]
    urls = []
    for gateway in gateways:
        assert gateway.stdout is not None
        line = await asyncio.to_thread(gateway.stdout.readline)
        urls.append(line.split()[2].rstrip("/"))
    out: dict[str, Any] = {"events_per_stream": EVENTS, "engine": engine, "cap": cap, "body_bytes": len(CONTENT[0]),
                           "state": "redis" if state else "memory", "replicas": replicas,
                           "concurrency": {}}  # fmt: skip
    out["load_average_before"] = [round(x, 2) for x in os.getloadavg()]  # the machine's load, stated with the figures
    try:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
            await _round(client, urls, 4, 5, "warm")
            for streams in levels:
                full, quick = PER_STREAM.get(streams, (4, 1))
                each = quick if smoke else full
                direct: list[tuple[float, float]] = []
                through: list[tuple[float, float]] = []
                cpu_s = 0.0  # the gateway's own CPU time over its rounds: its cost, whatever waits the machine adds
                for r in range(4):  # alternate, so a busy spell hits both alike
                    direct += await _round(client, [upstream], streams, max(1, each // 4), f"d{streams}-{r}")
                    before = sum(_cpu_s(gateway.pid) for gateway in gateways)
                    through += await _round(client, urls, streams, max(1, each // 4), f"g{streams}-{r}")
                    cpu_s += sum(_cpu_s(gateway.pid) for gateway in gateways) - before
                d, g = _summary(direct), _summary(through)
                out["concurrency"][str(streams)] = {
                    "requests": len(through),
                    "direct": d,
                    "gateway": g,
                    "added_p50_ms": g["total_p50_ms"] - d["total_p50_ms"],
                    "added_p99_ms": g["total_p99_ms"] - d["total_p99_ms"],
                    "added_ttfb_p50_ms": g["ttfb_p50_ms"] - d["ttfb_p50_ms"],
                    "gateway_cpu_ms_per_request": cpu_s * 1e3 / len(through),
                }
        out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    finally:
        for gateway in gateways:
            os.kill(gateway.pid, signal.SIGINT)
        for gateway in gateways:
            gateway.wait(15)
        server.kill()
        server.wait(15)
    return out


def _session_memory(count: int = 10_000) -> dict[str, float]:
    import tempfile
    import tracemalloc

    from kvbudget.gateway.admission import Admission
    from kvbudget.gateway.records import Recorder

    async def fill() -> int:
        admission = Admission(count, queue_timeout_s=1, max_queue=1, idle_timeout_s=600)
        with tempfile.TemporaryDirectory() as where:
            recorder = Recorder(Path(where) / "steps.jsonl")
            tracemalloc.start()
            before = tracemalloc.get_traced_memory()[0]
            for i in range(count):
                session = await admission.enter(f"session-{i:08d}-0123456789abcdef")
                recorder.step(session, start_s=1.0, end_s=2.0, prompt_tokens=1000, output_tokens=100, cached_tokens=900)
                admission.leave(session)
            used = tracemalloc.get_traced_memory()[0] - before
            tracemalloc.stop()
            recorder.close()
        return used

    used = asyncio.run(fill())
    return {"sessions": count, "bytes": used, "bytes_per_session": used / count}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="fewer requests")
    parser.add_argument("--json", action="store_true", help="print only the JSON document")
    counting = "llamacpp: through the upstream's /apply-template and /tokenize; other: from bytes, no extra call"
    parser.add_argument("--engine", default="llamacpp", help=f"the gateway's --engine ({counting})")
    parser.add_argument("--state", help="the gateway's --state (redis://HOST:PORT/DB: two Redis calls a request)")
    parser.add_argument("--replicas", type=int, default=1, help="gateway processes sharing --state, each stream "
                        "alternating between them (default 1)")  # fmt: skip
    parser.add_argument("--streams", default="1,64,512", help="concurrent streams to measure, e.g. 1,64,512")
    parser.add_argument("--cap", default="1M", help="the gateway's --cap (1M: every request provably fits and skips "
                        "the count; 24: the bound no longer fits, every request is counted)")  # fmt: skip
    parser.add_argument("--body-kib", type=int, default=0, help="pad each request's user message to about this many "
                        "KiB (an agent's long context; default: a 5-byte message)")  # fmt: skip
    parser.add_argument("--profile", help="run the gateway under cProfile and write its statistics to this file")
    parser.add_argument("--serve-upstream", action="store_true", help=argparse.SUPPRESS)  # the upstream's process
    args = parser.parse_args()
    if args.serve_upstream:
        asyncio.run(_serve_upstream())
        return 0
    levels = tuple(int(part) for part in args.streams.split(",") if part.strip())
    if args.body_kib > 0:
        CONTENT[0] = ("The quick brown fox jumps over the lazy dog. " * (args.body_kib * 1024 // 45 + 1))[
            : args.body_kib * 1024
        ]
    if args.replicas < 1 or (args.replicas > 1 and args.state is None):
        parser.error("--replicas: 1, or more with --state redis://... (replicas share their sessions there)")
    if args.replicas > 1 and args.profile is not None:
        parser.error("--profile: one replica only (each would write the same file)")
    result = asyncio.run(_bench(args.smoke, args.engine, args.state, levels, args.profile, args.cap, args.replicas))
    result["memory"] = _session_memory()
    if not args.json:
        for streams, row in result["concurrency"].items():
            print(
                f"{streams:>3} streams: added p50 {row['added_p50_ms']:.2f} ms, p99 {row['added_p99_ms']:.2f} ms, "
                f"TTFB p50 {row['added_ttfb_p50_ms']:.2f} ms (direct p50 {row['direct']['total_p50_ms']:.2f} ms); "
                f"gateway CPU {row['gateway_cpu_ms_per_request']:.2f} ms a request"
            )
        memory = result["memory"]
        print(f"{memory['sessions']:,} resident sessions: {memory['bytes'] / 2**20:.1f} MiB "
              f"({memory['bytes_per_session']:.0f} bytes each, with a pending trace row)")  # fmt: skip
    print(json.dumps(result, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
