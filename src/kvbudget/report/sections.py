"""The rows and lines of the report's Latency and Sizing sections, shared by the HTML page and the Markdown (each
escapes them as it writes them: none of this text is markup). Every figure is read from the answer it belongs
to (``kvbudget speed``, ``simulate`` and ``size`` --json); here they are only formatted."""

from __future__ import annotations

from kvbudget.plan import sizing_table as size_text  # the sizing table's cells and notes, as size's text has them
from kvbudget.report.data import Report
from kvbudget.units import latency_text

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.sizing import Sizing

seconds = latency_text  # a latency as the report, the page and size's table write it (units.py)

LATENCY_HEADERS = ["latency", "sessions per replica", "TTFT", "inter-token", "tokens/s per session", "binds", "from"]


def per_second(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def latency_card(report: Report) -> tuple[str, str]:
    """The latency card: its value and how it was found."""
    latency = report.latency
    if latency is None or latency.planned is None:
        why = latency.unavailable if latency is not None and latency.unavailable else "not computed"
        return "-", f"no latency at the planned sessions: {why}"
    s = latency.planned
    return (
        f"TTFT {seconds(s.ttft_s)} · ITL {seconds(s.itl_s)}",
        f"at {s.batch:,} sessions per replica, {s.decode_tokens_per_s_per_request:,.1f} tokens/s each; {s.binding}; "
        "computed (kvbudget speed's roofline)",
    )


def latency_rows(report: Report) -> list[list[str]]:
    latency = report.latency
    rows: list[list[str]] = []
    if latency is not None and latency.planned is not None:
        s = latency.planned
        rows.append(
            [
                "at the planned sessions",
                f"{s.batch:,}",
                seconds(s.ttft_s),
                seconds(s.itl_s),
                per_second(s.decode_tokens_per_s_per_request),
                s.binding,
                "computed: kvbudget speed",
            ]
        )
    simulated = latency.simulated if latency is not None else None
    if simulated is not None and report.simulated is not None:
        speeds = simulated.speeds
        pre, dec = speeds.get("prefill"), speeds.get("decode")
        source = (
            f"simulated; speeds: prefill {pre.get('provenance')}, decode {dec.get('provenance')}"
            if isinstance(pre, dict) and isinstance(dec, dict)
            else "simulated"
        )
        running = f"{report.simulated.mean_concurrency:,.1f} mean in flight"
        for label, q, out in (("simulated p50", "p50", "p50"), ("simulated p99", "p99", "slowest_1pct")):
            rows.append(
                [
                    label,
                    running,
                    seconds(simulated.quantile("ttft_s", q)),
                    seconds(simulated.quantile("itl_s", q)),
                    per_second(simulated.quantile("output_tokens_per_s_per_session", out)),
                    "-",
                    source,
                ]
            )
    return rows


def latency_notes(report: Report) -> list[str]:
    """What the latency figures rest on: the request shape, the speed model's basis, the simulator's speeds."""
    latency = report.latency
    if latency is None:
        return []
    notes: list[str] = []
    if latency.planned is not None:
        s = latency.planned
        notes += [
            f"At the planned sessions: {s.concurrency:,} requests in flight over {s.replicas:,} "
            f"replica{'s' if s.replicas != 1 else ''}; {latency.shape}. TTFT: the prompt's own prefill and one decode "
            "iteration; inter-token: the cycle of every session's prefill and decode iterations over the output "
            "tokens (all sessions generating at once, the worst case).",
            f"Computed (kvbudget speed): {s.compute_basis}; efficiencies: {s.efficiency.basis}.",
            f"Not modelled: {', '.join(s.not_modelled)}.",
            *s.warnings,
        ]
    elif latency.unavailable:
        notes.append(f"No latency at the planned sessions: {latency.unavailable}")
    if latency.simulated is not None:
        from kvbudget.render.simulate import speed_lines

        notes += [line.strip() for line in speed_lines(latency.simulated.speeds)]
    else:
        notes.append("Simulated latency (TTFT and inter-token p50 / p99): give --workload FILE to run the simulator.")
    return notes


def sizing_heading(s: Sizing) -> str:
    return size_text.sizing_table(s).heading


def sizing_table(s: Sizing) -> tuple[list[str], list[list[str]], set[int]]:
    """The deployments that meet the load, cheapest first (``size``'s order): the headings, the rows and the
    columns set right (plan/sizing_table.py ``sizing_table``, the page's table too)."""
    table = size_text.sizing_table(s)
    return (
        [c.label for c in table.columns],
        [list(row) for row in table.rows],
        {i for i, c in enumerate(table.columns) if c.right},
    )


def sizing_notes(s: Sizing) -> list[str]:
    """Under the table: what the columns mean, then the refusals at the cap, the speeds and the load, as ``size``
    says them."""
    return list(size_text.sizing_table(s).notes)


def sizing_unmet(s: Sizing) -> list[str]:
    return list(size_text.sizing_table(s).unmet)
