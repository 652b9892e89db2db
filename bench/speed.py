"""The speed model against published measurements: the table of its errors, training and held out.

Reads tests/data/speed/trtllm_perf_overview.json (TensorRT-LLM's performance overview, cited in the file), plans
each figure's deployment, and prints per figure the measured and modelled value and the error, then the median
absolute error and the share within 30% of each split. ``--fit`` refits the efficiencies on the training split
(print them; copy into kvbudget/speed/efficiency.py). ``--smoke`` (scripts/check) prints only the summary and
fails if the held-out error breaks issue 19's target (median <= 15%, >= 80% within 30%).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvbudget.speed.efficiency import FITTED
from kvbudget.speed.fit import Summary, errors, fit, load, prepare

FIGURES = Path(__file__).resolve().parent.parent / "tests" / "data" / "speed" / "trtllm_perf_overview.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="summary only; fail past the issue's target")
    parser.add_argument("--fit", action="store_true", help="refit the efficiencies on the training split")
    args = parser.parse_args(argv)
    figures, source = load(FIGURES)
    prepared = prepare(figures)
    efficiency = FITTED
    if args.fit:
        efficiency = fit([p for p in prepared if p.figure.split == "train"], FITTED)
        print(f"fitted: {efficiency}")
    errs = errors(prepared, efficiency)
    if not args.smoke:
        print(f"source: {source['repository']} {source['path']} @{source['commit']}")
        print(f"{'figure':<36} {'split':<9} {'measured':>10} {'model':>10} {'error':>7}")
        for p, e in zip(prepared, errs, strict=True):
            f = p.figure
            print(f"{f.label:<36} {f.split:<9} {f.value:>10,.0f} {f.value * (1 + e):>10,.0f} {e:>+7.1%}")
    failed = False
    for split in ("train", "held_out"):
        s = Summary.of([e for p, e in zip(prepared, errs, strict=True) if p.figure.split == split])
        print(f"{split}: {s.count} figures, median |error| {s.median_abs:.1%}, within 30%: {s.within_30:.0%}")
        if split == "held_out" and (s.median_abs > 0.15 or s.within_30 < 0.80):
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
