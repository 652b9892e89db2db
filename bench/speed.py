"""The speed model against published measurements: the table of its errors per kind of figure, training and held out.

Reads every figure file in tests/data/speed/ (each cites its source: TensorRT-LLM's performance overview, offline
throughput; TensorRT-LLM v0.5's batch-1 first-token latency; NVIDIA NIM's TTFT, inter-token latency and throughput
at fixed concurrency), plans each figure's deployment, and prints per figure the measured and modelled value and the
error, then per kind (throughput, TTFT, ITL) the median absolute error and the share within 30% of each split.
``--fit`` refits the two latency parameters (bf16 prefill share, prefill queue factor) on every training figure
with the five throughput ones held as shipped; ``--fit-all`` refits all seven in two stages (the five on the
throughput training figures, then the two); print them, copy into kvbudget/speed/efficiency.py.
``--smoke`` (scripts/check) prints only the summaries and fails if the held-out error of a kind breaks issue 19's
target (median <= 15%, >= 80% within 30%).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvbudget.speed.efficiency import FITTED
from kvbudget.speed.fit import (
    KINDS,
    LATENCY_PARAMETERS,
    THROUGHPUT_PARAMETERS,
    Summary,
    errors,
    fit,
    load_all,
    prepare,
)

FIGURES = Path(__file__).resolve().parent.parent / "tests" / "data" / "speed"
UNITS = {"throughput": "tok/s", "ttft": "ms", "itl": "ms"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="summaries only; fail past the issue's target")
    parser.add_argument("--fit", action="store_true", help="refit the latency parameters on the training split")
    parser.add_argument("--fit-all", action="store_true", help="refit every efficiency on the training split")
    args = parser.parse_args(argv)
    prepared = prepare(load_all(FIGURES))
    efficiency = FITTED
    train = [p for p in prepared if p.figure.split == "train"]
    if args.fit_all:
        efficiency = fit([p for p in train if p.figure.kind == "throughput"], FITTED, names=THROUGHPUT_PARAMETERS)
    if args.fit or args.fit_all:
        efficiency = fit(train, efficiency, names=LATENCY_PARAMETERS)
        print(f"fitted: {efficiency}")
    errs = errors(prepared, efficiency)
    if not args.smoke:
        print(f"{'source':<26} {'figure':<40} {'kind':<10} {'split':<8} {'measured':>9} {'model':>9} {'error':>7}")
        for p, e in zip(prepared, errs, strict=True):
            f = p.figure
            value = f"{f.value:,.0f}" if f.value >= 100 else f"{f.value:,.2f}"
            model = f.value * (1 + e)
            shown = f"{model:,.0f}" if model >= 100 else f"{model:,.2f}"
            print(f"{f.source:<26} {f.label:<40} {f.kind:<10} {f.split[:8]:<8} {value:>9} {shown:>9} {e:>+7.1%}")
    failed = False
    for kind in KINDS:
        for split in ("train", "held_out"):
            mine = [e for p, e in zip(prepared, errs, strict=True) if p.figure.split == split and p.figure.kind == kind]
            s = Summary.of(mine)
            print(
                f"{kind:<10} {split:<8}: {s.count:>2} figures ({UNITS[kind]}), median |error| {s.median_abs:.1%}, "
                f"within 30%: {s.within_30:.0%}"
            )
            if split == "held_out" and (s.median_abs > 0.15 or s.within_30 < 0.80):
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
