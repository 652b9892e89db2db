"""A web request cannot make the server start more processes than it has cores: ``jobs`` (compare's and size's
sweeps) above the server's cores is a 400 naming the field and the limit (requests/values.py ``max_jobs``: the
command line and the Python API hold the same bound), and a daemonic
process runs a sweep serially instead of failing to start a pool (Python refuses a daemon children: the README's size
question was a 503 "exit code 1" on the web when serve answered in a daemon; it now answers in a process group of its
own, tests/web/test_size_limit.py)."""

from __future__ import annotations

import json
import multiprocessing
import urllib.parse
from multiprocessing.connection import Connection

import pytest

from kvbudget.requests import values
from kvbudget.simulate.parallel import default_jobs, run_all
from kvbudget.web import api
from kvbudget.web.uploads import Uploads
from tests.web.browser import Server

COMPARE = {"model": "llama-3.1-8b", "gpu": "h100-sxm,h200", "engine": "vllm", "context": "8k"}
SIZE = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "32k", "sessions": "60", "itl": "40ms"}


def _get(server: Server, command: str, params: dict[str, str]) -> tuple[int, dict[str, object]]:
    status, body = server.get(f"api/{command}?{urllib.parse.urlencode(params)}")
    return status, json.loads(body)


def test_jobs_past_the_servers_cores_is_a_400_naming_the_limit(server: Server) -> None:
    cores = default_jobs()  # the server runs on this machine, with the same cores
    for command, params in (("compare", COMPARE), ("size", SIZE)):
        status, doc = _get(server, command, {**params, "jobs": str(cores + 1)})
        assert status == 400, doc
        assert doc["error"] == {
            "kind": "InputError",
            "message": f"--jobs: {cores + 1:,} processes asked; this machine runs at most {cores:,} (its cores): give "
            f"{cores:,} or fewer, or leave it out (every core)",
        }
        status, doc = _get(server, command, {**params, "jobs": str(cores)})
        assert status == 200, doc
        status, doc = _get(server, command, {**params, "jobs": "1000000"})
        assert status == 400 and "--jobs: 1,000,000 processes asked; this machine runs at most" in str(doc["error"])


def test_the_bound_is_the_requests_own_check(monkeypatch: pytest.MonkeyPatch) -> None:
    uploads = Uploads()
    try:
        monkeypatch.setattr(values, "max_jobs", lambda: 3)
        reply = api.run("compare", [*COMPARE.items(), ("jobs", "4")], uploads)
        assert reply.status == 400 and json.loads(reply.body)["error"]["message"].startswith(
            "--jobs: 4 processes asked; this machine runs at most 3 (its cores)"
        )
        assert api.run("compare", [*COMPARE.items(), ("jobs", "3")], uploads).status == 200
        assert api.run("compare", list(COMPARE.items()), uploads).status == 200  # left out: every core
    finally:
        uploads.close()


def _square(x: int) -> int:
    return x * x


def _sweep_in_a_daemon(conn: Connection) -> None:
    try:
        conn.send(("ok", run_all(_square, [1, 2, 3, 4], 4)))
    except BaseException as exc:  # whatever it was, the test names it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    conn.close()


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="the pool forks its workers")
def test_a_daemonic_process_runs_a_sweep_serially() -> None:
    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_sweep_in_a_daemon, args=(send,), daemon=True)
    child.start()
    send.close()
    assert receive.poll(60)
    assert receive.recv() == ("ok", [1, 4, 9, 16])
    child.join(60)
    assert child.exitcode == 0


@pytest.mark.parametrize(
    ("command", "base"),
    [
        ("simulate", ("llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--workload", "examples/chat.toml")),
        ("size", ("llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--sessions", "8")),
        ("compare", ("llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--simulate")),
    ],
)
def test_the_command_line_and_the_python_api_hold_the_same_bound(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str, base: tuple[str, ...]
) -> None:
    """`kvbudget simulate --jobs 99999` was taken (and a pool of that many processes asked for) where the web API
    refused it: one bound, the request's, on every face (requests/values.py ``max_jobs``)."""
    from kvbudget.cli.main import main
    from kvbudget.errors import InputError
    from kvbudget.requests import by_command

    monkeypatch.setattr(values, "max_jobs", lambda: 3)
    message = (
        "--jobs: 99,999 processes asked; this machine runs at most 3 (its cores): give 3 or fewer, or leave it out"
    )
    assert main([command, *base, "--jobs", "99999"]) == 1
    assert capsys.readouterr().err.startswith(f"Error: {message}")
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        by_command()[command].from_options(
            {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "32k", "jobs": 99999}
        )
