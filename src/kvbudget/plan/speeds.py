"""The plan's speeds (``plan --speed-from RESULT.json``, ``report --speed-from``): what one replica of the planned
deployment does at its planned concurrency, read off a load test's measured speeds (simulate/measured.py).

At ``N`` sessions per replica (the sessions wanted over the replicas with ``--sessions``, else the sessions the
KV pool holds at the cap):

* inter-token latency = one decode iteration with ``N`` sessions decoding: ``1 / the measured decode tokens/s per
  session`` at concurrency ``N``, interpolated between the load test's levels (past its largest level, extended
  by the last segment's slope: said as ``extrapolated``);
* output tokens/s per replica = ``N / ITL``;
* time to first token, worst case = a prompt of the whole cap with nothing cached, at the measured prefill
  tokens/s, + one iteration (the load test derived its prefill rate as the new tokens over TTFT less one
  inter-token gap). The measured rate is of the load test's own prompts: attention's growth over a longer prompt
  is not in it, so a whole-cap prompt may take longer still.

Every figure is ``measured`` (interpolated from measured points), never the roofline's.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.units import a_or_an

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.plan import Plan
    from kvbudget.simulate.measured import MeasuredSpeeds


@dataclass(frozen=True)
class PlanSpeeds:
    """One replica's latency at the planned concurrency, from a load test (module doc)."""

    measured: MeasuredSpeeds
    sessions: int  # per replica
    sessions_basis: str
    prompt_tokens: int  # the worst-case prompt of the TTFT: the whole cap
    ttft_s: float
    itl_s: float

    @property
    def extrapolated(self) -> bool:
        return self.sessions > self.measured.levels[-1]

    @property
    def output_tokens_per_s(self) -> float:
        return self.sessions / self.itl_s

    def to_dict(self) -> dict[str, object]:
        m = self.measured
        return {
            "provenance": "measured",
            "source": m.source,
            "prefill": {"tokens_per_s": round(m.prefill_tokens_per_s, 3), "basis": m.prefill_basis},
            "decode": {
                "basis": m.decode_basis,
                "levels": [{"sessions": n, "tokens_per_s_per_session": round(r, 3)} for n, r in m.points],
            },
            "sessions_per_replica": self.sessions,
            "sessions_basis": self.sessions_basis,
            "extrapolated": self.extrapolated,
            "itl_s": round(self.itl_s, 6),
            "decode_tokens_per_s_per_session": round(1 / self.itl_s, 3),
            "output_tokens_per_s_per_replica": round(self.output_tokens_per_s, 3),
            "ttft_s": round(self.ttft_s, 6),
            "ttft_prompt_tokens": self.prompt_tokens,
            "ttft_basis": (
                "a prompt of the whole cap: the measured fixed prefill cost a request (no growth with the prompt "
                "measured), + one decode iteration"
                if m.prefill_fixed
                else "worst case: a prompt of the whole cap, nothing cached, at the measured prefill tokens/s, "
                "+ one decode iteration"
            ),
        }

    def lines(self) -> list[str]:
        """The plan's text section."""
        m = self.measured
        beyond = (
            f"; past the largest count measured ({m.levels[-1]:,} session{'s' if m.levels[-1] > 1 else ''}): "
            "extrapolated"
            if self.extrapolated
            else ""
        )
        return [
            f"Speeds (measured, {m.origin} {m.source}) at {self.sessions:,} sessions per replica "
            f"({self.sessions_basis}{beyond}):",
            f"  inter-token latency {self.itl_s * 1000:,.1f} ms: {1 / self.itl_s:,.1f} tokens/s per session, "
            f"{self.output_tokens_per_s:,.0f} output tokens/s per replica",
            f"  time to first token at most about {self.ttft_s:,.2f} s ({a_or_an(f'{self.prompt_tokens:,}')}-token "
            "prompt, the whole cap, nothing cached)",
            f"  {m.prefill_basis}",
            f"  {m.decode_basis}",
        ]


def plan_speeds(measured: MeasuredSpeeds, plan: Plan) -> PlanSpeeds:
    """The speeds of one replica of ``plan`` at its planned concurrency (module doc)."""
    from kvbudget.plan.plan import sessions_per_replica

    wanted = plan.inputs.sessions
    if wanted:
        n = sessions_per_replica(wanted, plan.replicas)
        basis = f"--sessions {wanted:,} over {plan.replicas:,} replicas" if plan.replicas > 1 else "--sessions"
    else:
        n = max(1, plan.sessions)
        basis = "the sessions the KV pool holds at the cap" if plan.sessions else "one session (none fits the cap)"
    itl = measured.iteration_s(n)
    prompt = plan.inputs.context
    # a fixed prefill (measured.prefill_fixed): every request waits that cost, whatever its prompt
    prefill = measured.first_token_s if measured.prefill_fixed else prompt / measured.prefill_tokens_per_s
    return PlanSpeeds(measured, n, basis, prompt, prefill + itl, itl)
