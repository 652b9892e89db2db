"""Finding the oracle environment (scripts/setup-oracles) and running a probe in it.

The environment holds vLLM's and SGLang's wheels over the CPU torch; kvbudget's own environment never
imports them. A probe (``vllm_probe.py``, ``sglang_probe.py``) runs there as a subprocess, reads its
cases as JSON on stdin, and prints one ``ORACLE {json}`` line per case. Without the environment the
oracle tests skip, or fail under ``KVBUDGET_REQUIRE_LIVE`` (scripts/check sets it), so CI cannot pass
without running them.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
REQUIREMENTS = HERE / "requirements-oracle.txt"
TORCH = "torch==2.13.0"  # scripts/setup-oracles pins the same CPU wheel
MARK = "ORACLE "


def _cache_root() -> Path:
    explicit = os.environ.get("KVBUDGET_CACHE")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "kvbudget"


def oracle_python() -> Path | None:
    """The oracle environment's interpreter: $KVBUDGET_ORACLE_PYTHON, else setup-oracles' cache path."""
    explicit = os.environ.get("KVBUDGET_ORACLE_PYTHON")
    if explicit:
        return Path(explicit)
    # the same key as scripts/setup-oracles: sha256 of the pinned list followed by the torch pin
    key = hashlib.sha256(REQUIREMENTS.read_bytes() + f"{TORCH}\n".encode()).hexdigest()[:16]
    env = _cache_root() / "oracles" / key
    if (env / ".complete").is_file() and (env / "bin" / "python").exists():
        return env / "bin" / "python"
    return None


def require_oracle() -> Path:
    """The interpreter, or a skip (a failure under KVBUDGET_REQUIRE_LIVE) naming the setup step."""
    python = oracle_python()
    if python is None:
        message = "the oracle environment is not built: run scripts/setup-oracles"
        if os.environ.get("KVBUDGET_REQUIRE_LIVE"):
            pytest.fail(message + " (KVBUDGET_REQUIRE_LIVE is set: the oracle tests must run)")
        pytest.skip(message)
    return python


def run_probe(
    probe: str, cases: list[dict[str, Any]], *, sm: int = 90, gpu_bytes: int, gpu_name: str
) -> dict[str, Any]:
    """Run ``probe`` in the oracle environment on ``cases``; the results by case id."""
    python = require_oracle()
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("VLLM_", "SGLANG_", "CUDA_", "PYTHON", "KVBUDGET_ORACLE"))
    }
    env.update(
        PYTHONPATH=os.pathsep.join([str(HERE), str(HERE / "stubs")]),
        # the stand-in GPU (oracle_standin.py): an NVIDIA device of this compute capability and memory
        KVBUDGET_ORACLE_GPU="1",
        KVBUDGET_ORACLE_SM=str(sm),
        KVBUDGET_ORACLE_GPU_BYTES=str(gpu_bytes),
        KVBUDGET_ORACLE_GPU_NAME=gpu_name,
        # empty: Triton counts as present with no active driver, as in a distributed worker's start-up
        CUDA_VISIBLE_DEVICES="",
        VLLM_LOGGING_STREAM="ext://sys.stderr",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    done = subprocess.run(
        [str(python), str(HERE / probe)],
        input=json.dumps(cases),
        capture_output=True,
        text=True,
        env=env,
        cwd=str(ROOT),
        timeout=1800,  # a hang guard: a loaded 2-core machine runs one GPU's cases in up to ~10 min
        check=False,
    )
    results = {}
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            result = json.loads(line[len(MARK) :])
            results[result["id"]] = result
    if done.returncode or len(results) != len(cases):
        raise AssertionError(f"{probe} exited {done.returncode}; stderr tail:\n{done.stderr[-4000:]}")
    return results


# Every probe run of the session goes through one pool: a process per (probe, GPU) run, as many at once as
# the machine has cores (KVBUDGET_ORACLE_JOBS overrides). The conftest submits all the selected modules' runs
# when the session starts (``prefetch``), so the vLLM and SGLang runs overlap each other and the in-process
# tests; each module then waits on its own. Results are keyed by case id, so they do not depend on the order.
_POOL: list[ThreadPoolExecutor] = []
_RUNS: dict[tuple[str, str, str], Future[dict[str, Any]]] = {}
Runs = dict[str, tuple[list[dict[str, Any]], int, int, str]]


def jobs() -> int:
    """Probe processes at once: $KVBUDGET_ORACLE_JOBS, else the machine's cores (at most 8)."""
    explicit = os.environ.get("KVBUDGET_ORACLE_JOBS")
    return max(1, int(explicit) if explicit else min(os.cpu_count() or 1, 8))


def submit_probes(probe: str, runs: Runs, tag: str) -> dict[str, Future[dict[str, Any]]]:
    """Start ``probe`` once per stood-in GPU of ``runs`` (a GPU key -> (cases, compute capability, memory
    bytes, name)), unless this ``tag``'s run of it is already started; the futures by GPU key."""
    require_oracle()
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(max_workers=jobs(), thread_name_prefix="oracle-probe"))
    for gpu, (cases, sm, memory, name) in runs.items():
        if (probe, tag, gpu) not in _RUNS:
            _RUNS[probe, tag, gpu] = _POOL[0].submit(run_probe, probe, cases, sm=sm, gpu_bytes=memory, gpu_name=name)
    return {gpu: _RUNS[probe, tag, gpu] for gpu in runs}


def run_probes(probe: str, runs: Runs, tag: str) -> dict[str, dict[str, Any]]:
    """Run ``probe`` once per stood-in GPU, in parallel processes (``submit_probes``); the results by GPU key,
    then by case id."""
    return {gpu: future.result() for gpu, future in submit_probes(probe, runs, tag).items()}
