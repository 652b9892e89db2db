"""The server's speeds as the simulator charges them, from what the client's streams saw (flow.py).

* **Decode iteration per sessions decoding**: the median of the clean gaps (one decode iteration of ``k``
  sessions and nothing else) for each ``k`` with at least ``MIN_GAPS`` of them. A median, not a mean: a gap the
  flow could not see spoiled (the server's own pauses, the client's scheduling on a busy machine) is an outlier.
* **Prefill**: each request's prefill time is its time to first token less one decode iteration of the sessions
  decoding beside it, itself included (``k + 1``: the iteration the simulator adds to the prefill backlog for a
  first token, kvbudget.simulate.batch ``first_token``). It holds the prompts of every request whose prefill
  overlapped its own (sent before its first token, first token after it was sent; its own included): prompts
  that arrive together share one batch and finish together, with one token of each generating slot (llama.cpp
  tools/server/server-context.cpp ``update_slots``: "first, add sampled tokens from any ongoing sequences", then
  "next, batch any pending prompts without exceeding n_batch"). On a CPU a batch's time is its tokens' work, and a
  token's work grows with the context it attends to (measured on llama-server, docs/speed.md: 6 ms a token for a
  fresh 76-token prompt, 27 ms for 12 tokens after 190 cached). So the prefill time is fitted, by least squares
  over the requests, as ``a x new + b x new x (cached + new / 2)`` summed over the batch's prompts: ``a`` seconds
  a token, ``b`` seconds a token per token of context it reads on average. ``prefill_tokens_per_s`` quotes it at
  the median request's shape (and is the rate older readers take).
"""

from __future__ import annotations

from bisect import bisect_left

from kvbudget.measure.loadtest.flow import Reservoir
from kvbudget.measure.loadtest.record import percentile

MIN_GAPS = 20  # clean gaps a concurrency needs before its median is a measured point
MIN_PREFILLS = 5  # requests the prefill fit needs
OUTLIER = 3.0  # a request whose residual passes this many times the median absolute residual is left out, once

Prefill = tuple[float, float, int, int, int]  # (sent s, time to first token s, new tokens, cached tokens, decoding)


def decode_iterations(gaps: dict[int, Reservoir]) -> list[tuple[int, float, int]]:
    """(sessions decoding, median iteration seconds, clean gaps seen) for each concurrency measured well enough."""
    out = []
    for running in sorted(gaps):
        sample = gaps[running]
        median = percentile(sample.values, 50)
        if running > 0 and median and sample.seen >= MIN_GAPS:
            out.append((running, median, sample.seen))
    return out


def _work(new: int, cached: int) -> tuple[float, float]:
    """A prompt's two features: its tokens, and its tokens times the mean context they read."""
    return float(new), new * (cached + new / 2)


def batched_work(prefills: list[Prefill]) -> list[tuple[float, float]]:
    """For each request (in the order given), the summed features of the prompts whose prefill overlapped its
    own, its own included."""
    order = sorted(range(len(prefills)), key=lambda i: prefills[i][0])
    sent = [prefills[i][0] for i in order]
    longest = max((p[1] for p in prefills), default=0.0)
    out = []
    for start, ttft, _, _, _ in prefills:
        lo = bisect_left(sent, start - longest)  # no earlier prefill lasted longer than the longest
        hi = bisect_left(sent, start + ttft)
        x1 = x2 = 0.0
        for j in order[lo:hi]:
            if prefills[j][0] + prefills[j][1] >= start:
                w1, w2 = _work(prefills[j][2], prefills[j][3])
                x1, x2 = x1 + w1, x2 + w2
        out.append((x1, x2))
    return out


def _fit(rows: list[tuple[float, float, float]]) -> tuple[float, float]:
    """Non-negative least squares of ``y = a x1 + b x2`` over ``(x1, x2, y)`` rows."""
    s11 = sum(x1 * x1 for x1, _, _ in rows)
    s22 = sum(x2 * x2 for _, x2, _ in rows)
    s12 = sum(x1 * x2 for x1, x2, _ in rows)
    s1y = sum(x1 * y for x1, _, y in rows)
    s2y = sum(x2 * y for _, x2, y in rows)
    det = s11 * s22 - s12 * s12
    if det > 0:
        a, b = (s1y * s22 - s2y * s12) / det, (s2y * s11 - s1y * s12) / det
        if a >= 0 and b >= 0:
            return a, b
    only_a = (s1y / s11, 0.0) if s11 > 0 else (0.0, 0.0)
    only_b = (0.0, s2y / s22) if s22 > 0 else (0.0, 0.0)

    def error(ab: tuple[float, float]) -> float:
        return sum((y - ab[0] * x1 - ab[1] * x2) ** 2 for x1, x2, y in rows)

    return min((ab for ab in (only_a, only_b) if ab[0] >= 0 and ab[1] >= 0), key=error, default=(0.0, 0.0))


def prefill_fit(prefills: list[Prefill], iterations: list[tuple[int, float, int]]) -> tuple[float, float, float] | None:
    """``(a, b, tokens/s at the median request)`` (module doc); None without a decode curve or enough requests."""
    if not iterations or len(prefills) < MIN_PREFILLS:
        return None
    from kvbudget.simulate.measured import MeasuredSpeeds

    curve = MeasuredSpeeds("", 1.0, tuple((k, 1 / t) for k, t, _ in iterations))
    rows = [
        (x1, x2, ttft - curve.iteration_s(beside + 1))
        for (_, ttft, _, _, beside), (x1, x2) in zip(prefills, batched_work(prefills), strict=True)
    ]
    a, b = _fit(rows)
    spread = percentile([abs(y - a * x1 - b * x2) for x1, x2, y in rows], 50) or 0.0
    kept = [r for r in rows if abs(r[2] - a * r[0] - b * r[1]) <= OUTLIER * spread]
    if len(kept) >= MIN_PREFILLS:
        a, b = _fit(kept)
    new = percentile([float(p[2]) for p in prefills], 50) or 1.0
    cached = percentile([float(p[3]) for p in prefills], 50) or 0.0
    seconds = a * new + b * new * (cached + new / 2)
    if seconds <= 0:
        return None
    return a, b, new / seconds


def speeds_json(gaps: dict[int, Reservoir], prefills: list[Prefill]) -> dict[str, object]:
    """The document's ``speeds``: what ``--speed-from`` reads (kvbudget.simulate.measured)."""
    iterations = decode_iterations(gaps)
    fit = prefill_fit(prefills, iterations)
    return {
        "decode_iterations": [{"running": k, "iteration_s": round(t, 6), "gaps": n} for k, t, n in iterations],
        "prefill_tokens_per_s": None if fit is None else round(fit[2], 3),
        "prefill_s_per_token": None if fit is None else fit[0],
        "prefill_s_per_token_context": None if fit is None else fit[1],
        "prefill_requests": len(prefills),
        "basis": (
            f"decode: the median clean stream gap (no prompt in flight, the same sessions decoding; at least "
            f"{MIN_GAPS} per point) per sessions decoding; prefill: time to first token less one iteration, fitted "
            "over the requests as a x tokens + b x tokens x mean context read, the prompts batched together summed"
        ),
    }
