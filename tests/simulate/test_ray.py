"""Sweeps as tasks on a Ray cluster (``--ray ADDRESS``) give the serial answer, byte for byte.

The cluster is real: a ``ray start --head --block`` of 2 CPUs and a small object store, started here in its own
process group and stopped by that group's id (SIGTERM, then SIGKILL; always reaped). The sessions and the
deployment travel with the tasks (simulate/cluster.py), so the workers read no file of the test's.
Nothing here depends on timing: the answers are compared, not how long they took (on the loaded 2-core
development machine, load average 19, the module took about 90 s wall, almost all of it the head starting and
its two workers importing Ray, kvbudget and numpy; a few CPU seconds).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvbudget.simulate import cluster
from tests.helpers import run_cli
from tests.live.server import free_port

READY_TIMEOUT_S = 180  # a cold Ray head on a loaded 2-core machine takes about 20 s; this only bounds a hang
COMPARE = (
    "compare", "llama-3.1-8b", "--gpu", "h100-sxm", "--engine", "vllm,llamacpp", "--context", "32k",
    "--workload", "examples/coding-agent.toml", "--simulate", "--search-sessions", "60", "--search-probes", "2",
)  # fmt: skip
SIMULATE = (
    "simulate", "llama-3.1-8b", "--gpu", "l4", "--engine", "vllm", "--context", "32k",
    "--workload", "examples/chat.toml", "--rate", "0.05", "--sessions", "200",
    "--search-sessions", "200", "--search-probes", "4",
)  # fmt: skip


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    """Stop the head and everything it started (its process group, by id): SIGTERM, then SIGKILL; reaped."""
    for sig, wait_s in ((signal.SIGTERM, 3), (signal.SIGKILL, 30)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            continue
        # the head has exited; what it started may still be going down: give the group the same end
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                os.killpg(process.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.2)
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """The address of a real local Ray head (2 CPUs, a 75 MiB object store) for the module's tests."""
    pytest.importorskip("ray", reason="Ray is not installed (extra kvbudget[ray]; scripts/setup installs it)")
    command = shutil.which("ray", path=str(Path(sys.executable).parent)) or shutil.which("ray")
    assert command, "the ray command is not on the path of this interpreter"
    port = free_port()
    temp = Path(tempfile.mkdtemp(prefix="kvray"))  # short: Ray's socket paths must fit in 107 characters
    log = temp / "head.log"
    argv = [command, "start", "--head", "--block", "--port", str(port), "--node-ip-address", "127.0.0.1"]
    argv += ["--num-cpus", "2", "--object-store-memory", str(75 * 2**20), "--include-dashboard", "false"]
    argv += ["--disable-usage-stats", "--temp-dir", str(temp)]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    with log.open("wb") as sink:
        process = subprocess.Popen(
            argv, stdout=sink, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the Ray head did not start:\n{log.read_text(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        cluster.disconnect()
        _stop_group(process)
        shutil.rmtree(temp, ignore_errors=True)


def test_compare_simulate_on_ray_is_the_serial_answer(capsys: pytest.CaptureFixture[str], ray_head: str) -> None:
    code, serial, err = run_cli(capsys, *COMPARE, "--json", "--jobs", "1")
    assert code == 0, err
    code, on_ray, err = run_cli(capsys, *COMPARE, "--json", "--ray", ray_head)
    assert code == 0, err
    assert on_ray == serial
    rows = json.loads(serial)["rows"]
    assert len(rows) == 2 and all(row["simulated"] is not None for row in rows)


def test_simulate_search_on_ray_is_the_serial_answer(capsys: pytest.CaptureFixture[str], ray_head: str) -> None:
    code, serial, err = run_cli(capsys, *SIMULATE, "--json", "--jobs", "1")
    assert code == 0, err
    code, on_ray, err = run_cli(capsys, *SIMULATE, "--json", "--ray", ray_head)
    assert code == 0, err
    assert on_ray == serial
    trail = json.loads(serial)["search"]["probes"]
    # the search turned (both outcomes), so probes run ahead on the cluster were also thrown away
    assert len(trail) == 4 and len({probe["target_met"] for probe in trail}) == 2


@pytest.mark.parametrize("address", ["nowhere", "host:0", "host:70000", "http://host:6379", "host:port"])
def test_an_address_that_is_not_one_is_one_line(capsys: pytest.CaptureFixture[str], address: str) -> None:
    code, out, err = run_cli(capsys, *SIMULATE, "--ray", address)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "--ray" in err and "HOST:PORT" in err and "Traceback" not in err


def test_an_address_where_no_head_listens_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray", reason="Ray is not installed (extra kvbudget[ray]; scripts/setup installs it)")
    address = f"127.0.0.1:{free_port()}"  # bound and released: nothing listens there
    code, out, err = run_cli(capsys, *COMPARE, "--ray", address)
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and f"--ray {address}: no Ray head answers there" in err


def test_without_ray_the_extra_is_named(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError, as where it is not installed
    code, out, err = run_cli(capsys, *COMPARE, "--ray", "127.0.0.1:6379")
    assert code == 1 and out == ""
    assert err.count("\n") == 1 and "pip install 'kvbudget[ray]'" in err


def test_the_web_api_joins_no_cluster() -> None:
    pytest.importorskip("starlette")
    from kvbudget.web import api
    from kvbudget.web.uploads import Uploads

    uploads = Uploads()
    try:
        query = [("model", "llama-3.1-8b"), ("gpu", "h100-sxm"), ("context", "32k"), ("ray", "127.0.0.1:6379")]
        reply = api.run("compare", query, uploads)
    finally:
        uploads.close()
    assert reply.status == 400
    assert json.loads(reply.body)["error"]["message"].startswith("--ray: the web API joins no Ray cluster")
