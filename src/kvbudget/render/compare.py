"""The text of ``kvbudget compare``: the deployments side by side, what the columns mean, refusals and warnings."""

from __future__ import annotations

from kvbudget.provenance import derived
from kvbudget.render.text import fit, table
from kvbudget.units import format_bytes, format_tokens, money

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.compare import Choice, Row
    from kvbudget.plan.comparison import Comparison
    from kvbudget.plan.plan import Plan


def render_comparison(comparison: Comparison) -> str:
    """``kvbudget compare``: one line per deployment, then what the columns mean, refusals and warnings."""
    rows = list(comparison.rows)
    with_rate, with_workload = comparison.rate_per_s is not None, comparison.with_workload
    with_sim = comparison.simulated
    asked = next((r.plan.inputs.sessions for r in rows if r.plan is not None and r.plan.inputs.sessions), None)

    head = ["model", "gpu x n", "engine", "cap", "kv", "sessions", "per session", "$/h", "$/session-h"]
    if asked:
        head.append(f"cap for {asked:,}")
    if with_workload:
        head.append("$/M out tok")
    if with_rate:
        head += ["need", "GPUs"]
    if with_sim:
        head.append("sim sessions")
        if with_rate:
            head.append("GPUs (sim)")
        head += ["TTFT s", "ITL ms"]
    body = []
    refused: list[str] = []
    warned: list[str] = []
    for i, row in enumerate(rows, 1):
        c = row.choice
        if row.plan is None:
            refused.append(
                f"  [{i}] {c.model} on {c.gpu} ({c.engine}, {format_tokens(c.context)}, {c.kv_dtype}{_variant(c)}): "
                f"{row.refused}"
            )
            blank = [""] * (len(head) - 6)
            body.append([c.model, c.gpu, c.engine, format_tokens(c.context), c.kv_dtype, f"refused [{i}]", *blank])
            continue
        warned += [f"  [{i}] {warning}" for warning in row.plan.warnings]
        p = row.plan
        line = [
            p.inputs.spec.name + _variant(c),
            f"{c.gpu} x {p.inputs.gpus:,}",
            p.inputs.engine.label,
            format_tokens(p.inputs.context),
            p.inputs.kv_dtype_label,
            f"{row.sessions:,}",
            format_bytes(p.per_session_bytes),
            money(row.cost_per_hour),
            money(row.cost_per_session_hour),
        ]
        if asked:
            line.append("-" if p.max_context_for_sessions is None else format_tokens(p.max_context_for_sessions))
        if with_workload:
            line.append(money(row.cost_per_million_output_tokens))
        if with_rate:
            needed = row.concurrent_needed
            line += [
                "-" if needed is None else f"{needed:,.1f}",
                "-" if row.gpus_needed is None else f"{row.gpus_needed:,}",
            ]
        if with_sim:
            sim = row.simulated.sessions_per_replica if row.simulated else None
            line.append("-" if sim is None else f"{sim * p.replicas:,.1f}")
            if with_rate:
                gpus = row.gpus_needed_simulated
                line.append("-" if gpus is None else f"{gpus:,}")
            ttft = row.simulated.ttft_s if row.simulated else None
            itl = row.simulated.itl_s if row.simulated else None
            line.append("-" if ttft is None else f"{ttft['p50']:.3g}")
            line.append("-" if itl is None else f"{itl['p50'] * 1e3:.3g}")
        body.append(line)
    text = table(head, body, [False, False, False, True, False, *[True] * (len(head) - 5)])
    notes = [
        "",
        "sessions: at the cap, worst case reserved (plan); $/session-h: the deployment's price / those sessions",
    ]
    if asked:
        notes.append(
            f"cap for {asked:,}: the largest cap at which the deployment holds {asked:,} sessions in all "
            "(--sessions is the whole deployment; each replica holds its share, rounded up)"
        )
    if with_workload:
        notes.append("$/M out tok: every session slot busy, sessions / E[T] x the workload's output tokens per session")
    if with_rate:
        notes.append("need: concurrent sessions at the rate (Little's law, rate x E[T]); GPUs: replicas x tp x pp")
    if with_sim:
        target = next((r.simulated.target for r in rows if r.simulated), "")
        notes.append(
            "sim sessions: what the simulator sustains on the deployment under the workload (mean live sessions at the "
            f"highest arrival rate meeting the target: {target}; each engine's own memory policy)"
        )
        if with_rate:
            notes.append("GPUs (sim): replicas that each hold the simulated sessions, for the need, x tp x pp")
        said = next((r.simulated.speeds for r in rows if r.simulated and r.simulated.speeds), "")
        notes.append(
            "TTFT s / ITL ms: time to first token and inter-token latency p50 of the simulated run at the workload's "
            f"own rate ({said}; kvbudget simulate shows the speeds and p99)"
        )
        bound = [
            f"  {_row_name(r, r.plan)}: {r.simulated.at_targets}"
            for r in rows
            if r.plan is not None and r.simulated is not None and r.simulated.at_targets
        ]
        if bound:
            notes += ["", "sim sessions at the latency targets (per replica; the sim sessions column holds both):"]
            notes += bound
        stopped = [
            f"  {_row_name(r, r.plan)}: {r.simulated.stopped['text']}"
            for r in rows
            if r.plan is not None and r.simulated is not None and r.simulated.stopped
        ]
        if stopped:
            notes += ["", "sim sessions - (none): no load meets the target", *stopped]
    notes.append(_provenance(rows, asked=bool(asked), with_workload=with_workload, with_rate=with_rate))
    if refused:
        notes += ["", "refused:", *refused]
    if warned:
        notes += ["", "warnings (as plan gives them for that deployment):", *warned]
    return fit(text + "\n" + "\n".join(notes))


def _labels(rows: list[Row], *lines: str) -> str:
    """How the plans' ledger lines ``lines`` were found (a figure of several: the weakest, provenance.derived): one
    label when every row agrees, else each label with the rows (numbered as in the table) it holds for
    (``heuristic [1], measured [2]``)."""
    found: dict[str, list[int]] = {}
    for n, row in enumerate(rows, 1):
        if row.plan is not None:
            labels = [x.provenance for x in row.plan.ledger if x.label in lines]
            label = labels[0] if len(labels) == 1 else derived(*labels)
            found.setdefault(label, []).append(n)
    if len(found) <= 1:
        return next(iter(found), "-")
    return ", ".join(f"{label} [{', '.join(map(str, ns))}]" for label, ns in found.items())


def _provenance(rows: list[Row], *, asked: bool, with_workload: bool, with_rate: bool) -> str:
    """The line that labels every figure of the table: exact, measured, computed, heuristic (as plan's ledger labels
    the bytes behind them), or given."""
    parts = [
        f"per session {_labels(rows, 'one session at the cap')} (the engine's layout at the cap)",
        f"sessions {_labels(rows, 'KV pool', 'one session at the cap')} "
        f"(KV pool // per session; the pool: GPU memory {_labels(rows, 'GPU memory')}, weights "
        f"{_labels(rows, 'weights')}, runtime overhead {_labels(rows, 'runtime overhead')})",
        "$/h given (--price, --prices)",
        "$/session-h computed ($/h / sessions)",
    ]
    if asked:
        parts.append("cap for N computed (the pool over N sessions)")
    if with_workload:
        parts.append("$/M out tok computed")
    if with_rate:
        parts.append("need and GPUs computed")
    if any(r.simulated for r in rows):
        parts.append("sim sessions, TTFT and ITL computed (simulated, at the speeds said above)")
    return "provenance: " + "; ".join(parts)


def _variant(c: Choice) -> str:
    """A row's weights precision and tensor-parallel size, when they are not the defaults."""
    parts = ([f"weights {c.weights}"] if c.weights else []) + ([f"tp {c.tp}"] if c.tp > 1 else [])
    return f" ({', '.join(parts)})" if parts else ""


def _row_name(r: Row, plan: Plan) -> str:
    """A simulated row as its notes name it: the model (and variant), GPU, engine and cap."""
    return f"{plan.inputs.spec.name + _variant(r.choice)} on {r.choice.gpu}, {plan.inputs.engine.label}, " + (
        format_tokens(plan.inputs.context)
    )
