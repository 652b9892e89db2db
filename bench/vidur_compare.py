"""kvbudget's simulator side by side with Vidur (Microsoft's per-iteration simulator), issue 20.

The issue measured its speed target against Vidur; this repeats that measurement on the sessions of
``bench/fidelity.py`` (chat-like one-call traffic and the Azure 2023 conversation trace, one call a
request, no shared prefix): one replica of Llama-3-8B, bf16 KV, a 2,799-block pool of 16 tokens,
vLLM's scheduler with recompute preemption. Three models run the same requests:

* kvbudget's simulator (``kvbudget.simulate``), its time model set to an A100 (Vidur ships a
  Llama-3-8B profile for the A100 only): the roofline at 2.0 TB/s, prefill at 10,000 tokens/s;
* the lean per-iteration reference (``bench/iteration_reference.py``) with the same time model;
* Vidur (``bench/vidur_driver.py``, run by Vidur's own interpreter), with its profiled A100 times.

The agent traffic is not run through Vidur: its request generators replay open-loop arrivals, and an
agent's next call arrives a tool pause after its previous call *finishes*, which only the simulated
run knows.

Vidur is not a dependency of kvbudget (nor an extra): install it in a virtual environment of its own,
outside this repository, and point this script at it::

    git clone https://github.com/microsoft/vidur VIDUR_ROOT   (its profiling data is in the repository)
    python3 -m venv VIDUR_VENV
    VIDUR_VENV/bin/pip install numpy pandas scikit-learn ddsketch fasteners plotly_express wandb matplotlib seaborn
    python -m bench.vidur_compare --vidur-root VIDUR_ROOT --vidur-python VIDUR_VENV/bin/python

(or ``KVBUDGET_VIDUR_ROOT`` / ``KVBUDGET_VIDUR_PYTHON``). One JSON line per traffic and size. CPU
seconds: kvbudget's and the reference's include drawing the sessions; Vidur's are split into
``setup_cpu_s`` (execution-time predictor, cached by Vidur after its first run, and reading the
trace) and ``run_cpu_s`` (its event loop). ``speedup_vs_vidur`` is Vidur's run over kvbudget's
simulation; ``speedup_vs_vidur_total`` counts Vidur's set-up too; ``speedup_vs_vidur_net`` takes drawing
the sessions (``draw_cpu_s``: for the trace, parsing it) out of kvbudget's time, as Vidur's run leaves
reading its trace out of its own.

``--kvbudget-only ROUNDS`` needs no Vidur: it times kvbudget's side alone (the median of ROUNDS) against Vidur's
loop seconds recorded in ``VIDUR_LOOP_CPU_S``, to measure a change of the simulator.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from bench.fidelity import REF, figures, reference_figures, sessions
from bench.iteration_reference import RefConfig, run_reference
from bench.simpy_reference import draw_only
from kvbudget.simulate import SimConfig, simulate

# A100 80GB: HBM2e at 2.0 TB/s; prefill at fidelity.py's 10,000 tokens/s, where kvbudget's queue delays
# meet Vidur's profiled A100 on 1,000 chat requests (p50 7.1 s against 8.0 s; at 7,800 tokens/s,
# 312 TFLOP/s at 40% for 16 GFLOP a token, they are 17.0 s)
A100 = replace(REF, bandwidth_bytes_per_s=2.0e12)
DRIVER = Path(__file__).resolve().with_name("vidur_driver.py")
INSTALL = (
    "Vidur not found: clone github.com/microsoft/vidur, make a virtual environment for it outside this "
    "repository (pip install numpy pandas scikit-learn ddsketch fasteners plotly_express wandb matplotlib "
    "seaborn), then pass --vidur-root CLONE --vidur-python VENV/bin/python "
    "(or set KVBUDGET_VIDUR_ROOT and KVBUDGET_VIDUR_PYTHON); it is no kvbudget extra"
)


def sim_config(ref: RefConfig) -> SimConfig:
    from bench.fidelity import sim_config as fidelity_config

    return fidelity_config(ref)


def write_trace(traffic: str, count: int, path: Path) -> int:
    """The requests of ``count`` one-call sessions as Vidur's trace-replay CSV; returns the rows."""
    rows = 0
    with path.open("w") as out:
        out.write("arrived_at,num_prefill_tokens,num_decode_tokens\n")
        for plan in sessions(traffic, count):
            steps = list(plan.steps)
            if len(steps) != 1:
                raise SystemExit(
                    f"{traffic}: session {plan.session_id} has {len(steps)} calls; Vidur replays one-call requests"
                )
            out.write(f"{plan.arrival_s!r},{steps[0].append_tokens},{steps[0].output_tokens}\n")
            rows += 1
    return rows


def run_vidur(python: str, root: Path, trace: Path, workdir: Path) -> dict[str, object]:
    env = dict(os.environ, PYTHONPATH=str(root), WANDB_MODE="disabled")
    cmd = [python, str(DRIVER), "--trace", str(trace), "--workdir", str(workdir), "--num-blocks", str(A100.pool_blocks)]
    out, err = workdir / "vidur.out", workdir / "vidur.err"
    with out.open("w") as stdout, err.open("w") as stderr:  # files, not pipes: no wait on a stray worker
        code = subprocess.run(cmd, cwd=root, env=env, stdout=stdout, stderr=stderr, check=False).returncode
    lines = [line for line in out.read_text().splitlines() if line.startswith("{")]
    if code != 0 or not lines:
        raise SystemExit(f"Vidur failed (exit {code}): {err.read_text().strip()[-2000:]}")
    result: dict[str, object] = json.loads(lines[-1])
    return result


def compare(traffic: str, count: int, python: str, root: Path, workdir: Path) -> dict[str, object]:
    trace = workdir / f"{traffic}-{count}.csv"
    requests = write_trace(traffic, count, trace)
    simulate(sessions(traffic, 20), sim_config(A100))  # warm-up: imports and the trace's first read
    run_reference(sessions(traffic, 20), A100)
    cpu = time.process_time()
    ours = simulate(sessions(traffic, count), sim_config(A100))
    ours_s = time.process_time() - cpu
    cpu = time.process_time()
    ref = run_reference(sessions(traffic, count), A100)
    ref_s = time.process_time() - cpu
    cpu = time.process_time()
    draw_only(sessions(traffic, count))
    draw_s = time.process_time() - cpu
    vidur = run_vidur(python, root, trace, workdir)
    run_s = float(vidur["run_cpu_s"])  # type: ignore[arg-type]
    total_s = run_s + float(vidur["setup_cpu_s"])  # type: ignore[arg-type]
    return {
        "traffic": traffic,
        "requests": requests,
        "simulator": figures(ours),
        "reference": reference_figures(ref),
        "vidur": vidur,
        "simulator_cpu_s": round(ours_s, 3),
        "reference_cpu_s": round(ref_s, 3),
        "speedup_vs_reference": round(ref_s / ours_s, 1) if ours_s else None,
        "speedup_vs_vidur": round(run_s / ours_s, 1) if ours_s else None,
        "speedup_vs_vidur_total": round(total_s / ours_s, 1) if ours_s else None,
        # drawing the sessions (parsing the whole trace for ``trace``) is inside the simulator's time but
        # Vidur reads its trace in its set-up: the event loops compared alone
        "draw_cpu_s": round(draw_s, 3),
        "speedup_vs_vidur_net": round(run_s / (ours_s - draw_s), 1) if ours_s > draw_s else None,
    }


# Vidur's event loop (``run_cpu_s``), measured by ``compare`` 2026-12-02 03:41-03:46 UTC on the 2-core machine
# (docs/simulate.md, "Checked against Vidur"): what ``--kvbudget-only`` divides by, without running Vidur again.
VIDUR_LOOP_CPU_S = {("chat", 1000): 2.49, ("chat", 10000): 33.38, ("trace", 1000): 5.36, ("trace", 10000): 25.39}


def kvbudget_only(traffic: str, count: int, rounds: int) -> dict[str, object]:
    """kvbudget's side of ``compare`` alone, ``rounds`` times (the median kept: CPU seconds move with the machine's
    load), against Vidur's recorded loop seconds (``VIDUR_LOOP_CPU_S``)."""
    simulate(sessions(traffic, 20), sim_config(A100))  # warm-up, as compare does
    ours, draws = [], []
    for _ in range(rounds):
        cpu = time.process_time()
        result = simulate(sessions(traffic, count), sim_config(A100))
        ours.append(time.process_time() - cpu)
        cpu = time.process_time()
        draw_only(sessions(traffic, count))
        draws.append(time.process_time() - cpu)
    ours_s, draw_s = sorted(ours)[rounds // 2], sorted(draws)[rounds // 2]
    vidur_s = VIDUR_LOOP_CPU_S.get((traffic, count))
    return {
        "traffic": traffic,
        "requests": count,
        "simulator": figures(result),
        "simulator_cpu_s": round(ours_s, 3),
        "simulator_cpu_s_rounds": [round(x, 3) for x in ours],
        "draw_cpu_s": round(draw_s, 3),
        "vidur_loop_cpu_s_recorded": vidur_s,
        "speedup_vs_vidur": round(vidur_s / ours_s, 1) if vidur_s else None,
        "speedup_vs_vidur_net": round(vidur_s / (ours_s - draw_s), 1) if vidur_s and ours_s > draw_s else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--kvbudget-only",
        type=int,
        metavar="ROUNDS",
        help="time kvbudget's side alone ROUNDS times (median) against Vidur's recorded loop seconds; no Vidur needed",
    )
    parser.add_argument("--vidur-root", default=os.environ.get("KVBUDGET_VIDUR_ROOT"), help="Vidur's clone")
    parser.add_argument("--vidur-python", default=os.environ.get("KVBUDGET_VIDUR_PYTHON"), help="its interpreter")
    parser.add_argument("--sizes", default="1000,10000", help="request counts, comma-separated")
    parser.add_argument("--traffic", default="chat,trace", help="one-call traffics: chat, trace")
    parser.add_argument("--workdir", help="for the traces and Vidur's output (default: a temporary folder)")
    args = parser.parse_args(argv)
    if args.kvbudget_only:
        for traffic in args.traffic.split(","):
            for count in (int(x) for x in args.sizes.split(",")):
                print(json.dumps(kvbudget_only(traffic, count, args.kvbudget_only)), flush=True)
        return 0
    root = Path(args.vidur_root) if args.vidur_root else None
    if root is None or not args.vidur_python or not (root / "vidur" / "simulator.py").is_file():
        print(INSTALL, file=sys.stderr)
        return 1
    probe = subprocess.run(
        [args.vidur_python, "-c", "import vidur.simulator"],
        cwd=root,
        env=dict(os.environ, PYTHONPATH=str(root), WANDB_MODE="disabled"),
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        print(f"{INSTALL} ({args.vidur_python} cannot import vidur.simulator)", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(args.workdir or tmp).resolve()
        workdir.mkdir(parents=True, exist_ok=True)
        for traffic in args.traffic.split(","):
            for count in (int(x) for x in args.sizes.split(",")):
                print(json.dumps(compare(traffic, count, args.vidur_python, root, workdir)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
