"""The rows and lines of the report's Latency and Sizing sections, shared by the HTML page and the Markdown (each
escapes them as it writes them: none of this text is markup). Every figure is read from the answer it belongs
to (``kvbudget speed``, ``simulate`` and ``size`` --json); here they are only formatted."""

from __future__ import annotations

from kvbudget.plan import sizing_table as size_text  # the sizing table's cells and notes, as size's text has them
from kvbudget.report.data import Report
from kvbudget.units import format_tokens

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.sizing import Sizing

LATENCY_HEADERS = ["latency", "sessions per replica", "TTFT", "inter-token", "tokens/s per session", "binds", "from"]


def seconds(value: float | None) -> str:
    """A latency as the page and the report write it: milliseconds under a second, else seconds."""
    if value is None:
        return "-"
    return f"{value * 1e3:,.1f} ms" if value < 1 else f"{value:,.2f} s"


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


# the report's columns of a met deployment (plan/sizing_table.py SizingCells), right-aligned or not; "refused"
# only with a workload, whose sessions the cap may refuse
SIZING_COLUMNS = (
    ("deployment", "deployment", False),
    ("gpus", "GPUs", False),
    ("replicas", "replicas", True),
    ("count", "count", False),
    ("per_replica", "per replica mem/lat", True),
    ("binds", "binds", False),
    ("spare", "spare", True),
    ("refused", "refused", True),
    ("ttft_s", "TTFT", True),
    ("itl_s", "inter-token", True),
    ("cost_per_hour", "$/h", True),
    ("cost_per_session_hour", "$/session-h", True),
)


def sizing_heading(s: Sizing) -> str:
    p99 = "p99 " if s.shape.percentile == "p99" else ""  # a workload's p99 step, as simulate holds the targets
    targets = [f"{p99}TTFT at most {seconds(s.ttft_s)}"] if s.ttft_s is not None else []
    targets += [f"{p99}inter-token at most {seconds(s.itl_s)}"] if s.itl_s is not None else []
    return (
        f"Sized for {size_text.load_phrase(s)} (whole deployment) at a {format_tokens(s.context)} cap, "
        + (", ".join(targets) if targets else "no latency targets")
        + f"; request shape: {s.shape.basis}."
    )


def _columns(s: Sizing) -> list[tuple[str, str, bool]]:
    return [column for column in SIZING_COLUMNS if column[0] != "refused" or s.refusals is not None]


def sizing_table(s: Sizing) -> tuple[list[str], list[list[str]], set[int]]:
    """The deployments that meet the load, cheapest first (``size``'s order): the headings, the rows and the
    columns set right."""
    columns = _columns(s)
    rows = []
    for c in s.met:
        cells = size_text.sizing_cells(c)
        rows.append(
            [seconds(getattr(cells, name)) if name.endswith("_s") else getattr(cells, name) for name, _, _ in columns]
        )
    return [head for _, head, _ in columns], rows, {i for i, (_, _, right) in enumerate(columns) if right}


def sizing_notes(s: Sizing) -> list[str]:
    """Under the table: what the columns mean, then the refusals at the cap, the speeds and the load, as ``size``
    says them."""
    labels = {
        "per_replica": "per replica mem/lat",
        "count": "count",
        "binds": "binds",
        "spare": "spare",
        "refused": "refused",
        "latency": "TTFT, inter-token",
        "cost_per_session_hour": "$/session-h",
    }
    if s.refusals is None:
        del labels["refused"]
    notes = [f"{size_text.sizing_key(labels)}."]
    return (
        notes
        + [note for note in [size_text.refusal_note(s)] if note]
        + size_text.speeds_notes(s)
        + size_text.load_notes(s)
        + size_text.simulation_notes(s)
    )


def sizing_unmet(s: Sizing) -> list[str]:
    return [size_text.unmet_line(c) for c in s.unmet]
