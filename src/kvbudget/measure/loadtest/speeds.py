"""The server's speeds as the simulator charges them, from what the client's streams saw (flow.py).

* **Decode iteration per sessions decoding**: the mean of the clean gaps (one decode iteration of ``k`` sessions
  and nothing else) for each ``k`` with at least ``MIN_GAPS`` of them, the slowest ``TRIM`` left out (a gap the flow
  could not see spoiled: another client's prompt). A mean, not a median: a session's inter-token latency is the mean
  of its gaps, and on a busy machine the gaps are skewed (the server thread waits for a core now and then), so a
  median would run the simulator faster than the server ran.
* **Decode iteration by sessions and tokens held**: on a CPU a decode token's work grows with the context it
  attends to, so a load test's short holds (sessions young, contexts small) decode faster than a long one at the
  same concurrency. Every clean gap also carries the tokens the decoding requests hold (flow.py), and the iteration
  is fitted, by non-negative least squares over all of them, as ``c0 + c1 x sessions + c2 x tokens held``;
  the simulator takes it where it knows the tokens each running session holds (kvbudget.simulate.measured).
* **Prefill**: each request's prefill time is its time to first token less one decode iteration of the sessions
  decoding beside it, itself included (``k + 1``: the iteration the simulator adds to the prefill backlog for a
  first token, kvbudget.simulate.batch ``first_token``). It holds the prompts of its batch: the requests whose
  prefill overlapped its own (sent before its first token, first token after it was sent; its own included) and
  whose first token came with its own (within ``TOGETHER_S``). Prompts that wait together share one batch and
  finish together; a prompt sent while another's batch runs joins the next one, as the simulator batches them
  (kvbudget.simulate.scheduler ``_first_token``). Counting every overlapping prompt in the batch instead spread each
  time over more work than the simulator charges, and a live check's TTFT came out 15% to 40% low
  (docs/speed.md). Each batch goes with one token of each generating slot (llama.cpp
  tools/server/server-context.cpp ``update_slots``: "first, add sampled tokens from any ongoing sequences", then
  "next, batch any pending prompts without exceeding n_batch"). On a CPU a batch's time is its tokens' work, and a
  token's work grows with the context it attends to (measured on llama-server, docs/speed.md: 6 ms a token for a
  fresh 76-token prompt, 27 ms for 12 tokens after 190 cached). So the prefill time is fitted, by non-negative
  least squares over the requests, as ``c + a x new + b x new x (cached + new / 2)`` summed over the batch's
  prompts: ``a`` seconds a token, ``b`` seconds a token per token of context it reads on average, and ``c`` what a
  request waits that holds no batch (the HTTP request and its tokenizing, the wait for the iteration running when
  it came: the server takes new prompts between iterations), which the simulator puts before each step and counts
  in its time to first token, without stopping decode (TimeModel.first_token_s). ``prefill_tokens_per_s`` quotes
  the fit at the median request's shape (and is the rate older readers take).
  Each request's wait for the batch running when it was sent (flow.py ``waited_s``: llama-server takes new tasks
  only between batches) is taken out of its time first, and the simulator charges it where the server does
  (TimeModel.wait_iteration). When every request carries the server's own time of the batch that computed its
  prompt (llama.cpp ``timings.prompt_ms``), the stall is fitted to that (less one iteration) instead, and the mean
  of what the client saw beyond it (its HTTP request, its event loop waking late on a busy machine: nothing the
  server computed, nothing that stalls decode) is added to ``c``.
  When the prompt's work explains none of the time beyond ``c`` (the non-negative fit's ``a = b = 0``: a sample
  whose requests' times do not grow with their batches' tokens, measured on a loaded 2-core machine, docs/speed.md),
  the prefill model *is* that fixed cost a request: the fit is kept (``prefill_model`` ``fixed``), the simulator
  charges each request ``c`` before its first token and no decode stall, and ``prefill_tokens_per_s`` quotes the
  median request's tokens over ``c`` (what a reader of the rate alone charges for a prompt of that size). Before,
  such a sample had no prefill fit, and ``--speed-from`` refused the result.

* **The sample**: a result also carries its clean gaps and its requests' prefill rows (``sample``, at most
  ``SAMPLE_ROWS`` of each, a seeded uniform subsample past that), so that results pooled by ``--speed-from`` are
  fitted once over the union of their samples (``refit``), not each over its own narrow range of sessions and
  contexts and the fits averaged (kvbudget.simulate.measured).
"""

from __future__ import annotations

import itertools
import math
import random
from bisect import bisect_left
from collections.abc import Sequence

from kvbudget.measure.loadtest.flow import TOGETHER_S, Reservoir
from kvbudget.measure.loadtest.record import percentile

HIGHEST = 1e9  # tokens/s: the quoted rate of a prefill that costs nothing (kvbudget.simulate.measured.HIGHEST)

MIN_GAPS = 20  # clean gaps a concurrency needs before its mean is a measured point
TRIM = 0.01  # the share of the slowest clean gaps left out of the mean
MIN_PREFILLS = 5  # requests the prefill fit needs
OUTLIER = 3.0  # a request whose residual passes this many times the median absolute residual is left out, once

SAMPLE_ROWS = 4000  # clean gaps, and prefill rows, a result carries for pooling (module doc)

# (sent s, time to first token s, new tokens, cached tokens, decoding, s waited for the running batch: flow.py,
# the server's own seconds for the batch that computed the prompt: llama.cpp timings.prompt_ms, -1 when not given)
Prefill = tuple[float, float, int, int, int, float, float]
# (new tokens, cached tokens, the batch's tokens, the batch's tokens x mean context, time to first token s, decoding,
# s waited for the batch running when it was sent, the server's prompt seconds or -1)
PrefillRow = tuple[int, int, float, float, float, int, float, float]


def decode_iterations(gaps: dict[int, Reservoir]) -> list[tuple[int, float, int]]:
    """(sessions decoding, mean iteration seconds, clean gaps seen) for each concurrency measured well enough."""
    out = []
    for running in sorted(gaps):
        sample = gaps[running]
        if running < 1 or sample.seen < MIN_GAPS:
            continue
        kept = sorted(g for _, g in sample.values)[: max(1, math.ceil(len(sample.values) * (1 - TRIM)))]
        mean = sum(kept) / len(kept)
        if mean > 0:
            out.append((running, mean, sample.seen))
    return out


def _work(new: int, cached: int) -> tuple[float, float]:
    """A prompt's two features: its tokens, and its tokens times the mean context they read."""
    return float(new), new * (cached + new / 2)


def batched_work(prefills: list[Prefill], together_s: float = TOGETHER_S) -> list[tuple[float, float]]:
    """For each request (in the order given), the summed features of the prompts of its batch, its own included:
    those whose prefill overlapped its own and whose first token came within ``together_s`` of its own (one batch
    ends for all its prompts at once; a prompt sent while another's batch ran joined the next one)."""
    order = sorted(range(len(prefills)), key=lambda i: prefills[i][0])
    sent = [prefills[i][0] for i in order]
    longest = max((p[1] for p in prefills), default=0.0)
    out = []
    for start, ttft, *_ in prefills:
        lo = bisect_left(sent, start - longest)  # no earlier prefill lasted longer than the longest
        hi = bisect_left(sent, start + ttft)
        x1 = x2 = 0.0
        for j in order[lo:hi]:
            first = prefills[j][0] + prefills[j][1]
            if first >= start and abs(first - (start + ttft)) <= together_s:
                w1, w2 = _work(prefills[j][2], prefills[j][3])
                x1, x2 = x1 + w1, x2 + w2
        out.append((x1, x2))
    return out


def _solve(rows: Sequence[tuple[float, ...]], use: tuple[int, ...]) -> list[float] | None:
    """Least squares of ``y`` (each row's last value) on the row's features ``use``; None when singular."""
    n = len(use)
    m = [[sum(r[i] * r[j] for r in rows) for j in use] + [sum(r[i] * r[-1] for r in rows)] for i in use]
    for col in range(n):  # Gauss-Jordan with partial pivoting
        pivot = max(range(col, n), key=lambda k: abs(m[k][col]))
        if abs(m[pivot][col]) < 1e-300:
            return None
        m[col], m[pivot] = m[pivot], m[col]
        for k in range(n):
            if k != col:
                f = m[k][col] / m[col][col]
                m[k] = [x - f * y for x, y in zip(m[k], m[col], strict=True)]
    return [m[i][n] / m[i][i] for i in range(n)]


def _fit(rows: Sequence[tuple[float, ...]]) -> tuple[float, ...]:
    """Non-negative least squares of ``y`` (each row's last value) on the row's other values: the best of the
    unconstrained solutions on every subset of the terms whose coefficients are all non-negative."""
    n = len(rows[0]) - 1 if rows else 0
    best, best_error = (0.0,) * n, math.inf
    for size in range(n, 0, -1):
        for use in itertools.combinations(range(n), size):
            solved = _solve(rows, use)
            if solved is None or min(solved) < 0:
                continue
            coef = [0.0] * n
            for i, value in zip(use, solved, strict=True):
                coef[i] = value
            error = sum((r[-1] - sum(c * x for c, x in zip(coef, r, strict=False))) ** 2 for r in rows)
            if error < best_error:
                best, best_error = tuple(coef), error
    return best


def decode_fit(gaps: dict[int, Reservoir]) -> tuple[float, float, float] | None:
    """``(c0, c1, c2)``: a decode iteration of ``k`` sessions holding ``t`` tokens takes ``c0 + c1 k + c2 t``
    seconds, fitted over every clean gap (the slowest ``TRIM`` of each concurrency left out); None with fewer than
    ``MIN_GAPS``."""
    rows: list[tuple[float, ...]] = []
    for running, sample in gaps.items():
        ordered = sorted(sample.values, key=lambda v: v[1])
        for held, gap in ordered[: max(1, math.ceil(len(ordered) * (1 - TRIM)))]:
            rows.append((1.0, float(running), float(held), gap))
    if len(rows) < MIN_GAPS:
        return None
    c0, c1, c2 = _fit(rows)
    return (c0, c1, c2) if c0 + c1 + c2 > 0 else None


def prefill_rows(prefills: list[Prefill]) -> list[PrefillRow]:
    """Each request's row for the prefill fit: its own prompt, the batch it joined (``batched_work``), its time."""
    return [
        (new, cached, x1, x2, ttft, beside, waited, served)
        for (_, ttft, new, cached, beside, waited, served), (x1, x2) in zip(
            prefills, batched_work(prefills), strict=True
        )
    ]


def prefill_fit(
    prefills: list[Prefill], iterations: list[tuple[int, float, int]]
) -> tuple[float, float, float, float] | None:
    """``(c, a, b, tokens/s at the median request)`` (module doc); None without a decode curve or enough
    requests."""
    return fit_prefill(prefill_rows(prefills), iterations)


def fit_prefill(
    prefills: Sequence[PrefillRow], iterations: list[tuple[int, float, int]]
) -> tuple[float, float, float, float] | None:
    """``prefill_fit`` over rows already batched (one result's, or several results' pooled)."""
    if not iterations or len(prefills) < MIN_PREFILLS:
        return None
    from kvbudget.simulate.measured import MeasuredSpeeds

    curve = MeasuredSpeeds("", 1.0, tuple((k, 1 / t) for k, t, _ in iterations))
    # With the server's own prompt time on every row (llama-server's timings), the stall is fitted to it and what
    # the client saw beyond it (its HTTP request, its event loop's delay on a busy machine: nothing the server
    # computed, nothing that stalls decode) is the mean of the rest, added to c (module doc)
    served = all(row[7] >= 0 for row in prefills)
    rows: list[tuple[float, ...]] = [
        (1.0, x1, x2, (server if served else ttft - waited) - curve.iteration_s(beside + 1))
        for _, _, x1, x2, ttft, beside, waited, server in prefills
    ]
    client = sum(ttft - waited - server for *_, ttft, _, waited, server in prefills) / len(prefills) if served else 0.0
    c, a, b = _fit(rows)
    spread = percentile([abs(r[3] - c - a * r[1] - b * r[2]) for r in rows], 50) or 0.0
    kept = [r for r in rows if abs(r[3] - c - a * r[1] - b * r[2]) <= OUTLIER * spread]
    if len(kept) >= MIN_PREFILLS:
        c, a, b = _fit(kept)
    new = percentile([float(p[0]) for p in prefills], 50) or 1.0
    cached = percentile([float(p[1]) for p in prefills], 50) or 0.0
    seconds = a * new + b * new * (cached + new / 2)
    c += client
    if seconds <= 0:  # a fixed cost: the prompt's work explained none of the time beyond c (module doc)
        seconds = c
    return c, a, b, min(HIGHEST, new / seconds) if seconds > 0 else HIGHEST


def speeds_json(gaps: dict[int, Reservoir], prefills: list[Prefill]) -> dict[str, object]:
    """The document's ``speeds``: what ``--speed-from`` reads (kvbudget.simulate.measured), with its sample."""
    rows = prefill_rows(prefills)
    flat = [(k, held, gap) for k, sample in sorted(gaps.items()) for held, gap in sample.values]
    return {**_figures(gaps, rows), "sample": _sample(flat, rows)}


def refit(
    gaps: Sequence[tuple[int, int, float]], prefills: Sequence[PrefillRow], *, batch_wait: bool = True
) -> dict[str, object]:
    """The figures of ``speeds`` fitted once over samples pooled from several results (``sample``, module doc);
    ``batch_wait`` False: some rows come from results from before the wait was measured (it is then left in every
    row's time, and in the fit's constant, as those results had it)."""
    by: dict[int, Reservoir] = {}
    for running, held, gap in gaps:
        by.setdefault(running, Reservoir()).add((held, gap))
    if not batch_wait:
        prefills = [(n, c, x1, x2, t, k, 0.0, -1.0) for n, c, x1, x2, t, k, *_ in prefills]
    return {**_figures(by, prefills), "batch_wait": batch_wait}


def _sample(gaps: list[tuple[int, int, float]], prefills: list[PrefillRow]) -> dict[str, object]:
    """At most SAMPLE_ROWS of each, a seeded uniform subsample past that (a mean per sessions stays unbiased)."""
    rng = random.Random(0)
    gaps = gaps if len(gaps) <= SAMPLE_ROWS else rng.sample(gaps, SAMPLE_ROWS)
    prefills = prefills if len(prefills) <= SAMPLE_ROWS else rng.sample(prefills, SAMPLE_ROWS)
    return {
        "gaps": [[k, held, round(gap, 6)] for k, held, gap in gaps],
        "prefills": [
            [new, cached, x1, x2, round(ttft, 6), beside, round(waited, 6), round(server, 6)]
            for new, cached, x1, x2, ttft, beside, waited, server in prefills
        ],
    }


def _figures(gaps: dict[int, Reservoir], rows: Sequence[PrefillRow]) -> dict[str, object]:
    iterations = decode_iterations(gaps)
    fit = fit_prefill(rows, iterations)
    decode = decode_fit(gaps)
    return {
        "decode_iterations": [{"running": k, "iteration_s": round(t, 6), "gaps": n} for k, t, n in iterations],
        "decode_fit": None
        if decode is None
        else {"s_per_iteration": decode[0], "s_per_session": decode[1], "s_per_token_held": decode[2]},
        "prefill_tokens_per_s": None if fit is None else round(fit[3], 3),
        "prefill_s_per_token": None if fit is None else fit[1],
        "prefill_s_per_token_context": None if fit is None else fit[2],
        "first_token_overhead_s": None if fit is None else fit[0],
        "prefill_model": None if fit is None else ("tokens" if fit[1] + fit[2] > 0 else "fixed"),
        "prefill_requests": len(rows),
        "batch_wait": True,
        "basis": (
            f"decode: the mean clean stream gap (no prompt in flight, the same sessions decoding; at least "
            f"{MIN_GAPS} per point, the slowest {TRIM:.0%} left out) per sessions decoding; prefill: time to first "
            "token less its wait for the batch running when it was sent and one iteration, fitted over the requests "
            "as c + a x tokens + b x tokens x mean context read, "
            "the prompts batched together summed"
        ),
    }
