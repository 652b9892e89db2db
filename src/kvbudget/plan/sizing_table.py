"""The sizing answer as a table and its notes, built once for every face that writes ``kvbudget size``'s answer:
its text (render/size.py), the report's Sizing section (report/sections.py, for HTML and Markdown) and the web
page. A met deployment's cells are typed (``SizingCells``); the text picks their order and writes the two
latencies in columns of seconds and milliseconds. ``sizing_table`` is the report's table (``35.6 ms``), heading,
notes and unmet lines, all text: ``size --json`` carries it as ``table``, and the page (web/static/app.js
``renderSizing``) draws it as it is, whatever columns it holds. The notes (the load, the refusals at the cap, the
speeds used, what the columns mean) are the same sentences everywhere."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.plan.cap_refusals import pct
from kvbudget.units import a_or_an, format_tokens, latency_text, money

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.plan.sizing import Candidate, Sizing


@dataclass(frozen=True)
class SizingCells:
    """One deployment that meets the load, cell by cell."""

    deployment: str  # model, weights, engine (with the version whose rules sized it), cache dtype
    gpus: str  # "h200 x 4 tp2"
    replicas: str
    count: str  # how the count was found: simulated (checked by simulate) or computed
    per_replica: str  # sessions one replica holds in memory / runs within the latency targets
    binds: str  # memory, prefill (TTFT) or decode (inter-token latency)
    spare: str  # sessions held beyond the peak, "+14"
    refused: str  # the share of the workload's sessions the cap refuses; "-" without a workload
    ttft_s: float | None  # at the load each replica runs; None: memory alone (no speed figures)
    itl_s: float | None
    cost_per_hour: str
    cost_per_session_hour: str


def deployment(c: Candidate) -> str:
    """The row's name: the model as resolved, its weights precision, the engine and version, the cache dtype."""
    name = c.plan.inputs.spec.name if c.plan else c.choice.model
    engine = c.plan.inputs.engine.label if c.plan else c.choice.engine
    weights = f" {c.choice.weights}" if c.choice.weights else ""
    kv = f" kv {c.choice.kv_dtype}" if c.choice.kv_dtype != "auto" else ""
    return f"{name}{weights} {engine}{kv}"


def sizing_cells(c: Candidate) -> SizingCells:
    return SizingCells(
        deployment=deployment(c),
        gpus=f"{c.choice.gpu} x {c.gpus:,}" + (f" tp{c.choice.tp}" if c.choice.tp > 1 else ""),
        replicas=f"{c.replicas:,}",
        count=c.replicas_basis,
        per_replica=f"{c.memory_sessions:,}/{c.latency_sessions:,}",
        binds=c.binding,
        spare=f"+{c.headroom:,}",
        refused="-" if c.refusals is None else pct(c.refusals.share),
        ttft_s=c.latency.ttft_s if c.latency else None,
        itl_s=c.latency.itl_s if c.latency else None,
        cost_per_hour=money(c.cost_per_hour),
        cost_per_session_hour=money(c.cost_per_session_hour),
    )


def unmet_line(c: Candidate) -> str:
    """A combination that cannot meet the load, and why (the reason names what would)."""
    return f"{deployment(c)} on {c.choice.gpu}, tp {c.choice.tp}: {c.unmet}"


def load_phrase(s: Sizing) -> str:
    """The load as asked: peak concurrent sessions, or an arrival rate."""
    return f"{s.sessions:,} concurrent sessions at peak" if s.sessions else f"{s.rate_per_s:g} new sessions/s"


def refusal_note(s: Sizing) -> str | None:
    """The workload's sessions the asked cap refuses (computed on the sample) and the smallest cap within the
    tolerance; None without a workload."""
    r = s.refusals
    if r is None:
        return None
    within = s.cap_within
    smallest = (
        f"; the smallest cap within it: {format_tokens(within.cap)} ({pct(within.share)})"
        if within is not None
        else "; no cap up to 1M is within it"
    )
    return (
        f"refused at the cap: {pct(r.share)} of the workload's sessions (computed: {r.basis}); tolerated "
        f"{pct(s.refusal_rate)}{smallest}"
    )


def speeds_notes(s: Sizing) -> list[str]:
    """With ``--speed-from``: which rows used the measured speeds (a load test's or an engine log's), and what they
    were."""
    if not s.speed_from:
        return []
    measured = [c for c in s.met if c.speeds and c.speeds[0] == "measured"]
    rows = ", ".join(dict.fromkeys(deployment(c) for c in measured)) or "none of the rows that meet the load"
    return [
        f"speeds: measured by {s.speed_origin} {s.speed_from} for {rows} (TTFT, ITL and the latency limit from the "
        f"{s.speed_origin}'s prefill and decode speeds); the other rows: computed (roofline)",
        *[c.speeds[1] for c in measured[:1] if c.speeds],
    ]


def simulation_notes(s: Sizing, most: int = 3) -> list[str]:
    """The met rows whose count simulate checked (at most ``most``): the runs either side of the count, the count
    speed's arithmetic gave, and the rate they ran at; or why no row was checked."""
    if s.simulate_check:
        return [f"count: {s.simulate_check}"]
    notes = []
    for c in [c for c in s.met if c.simulated is not None][:most]:
        sim = c.simulated
        assert sim is not None
        runs = ", ".join(
            f"{p.replicas:,} {'met' if p.met else 'missed'} (p99 TTFT {p.ttft_p99_s:.2f} s, ITL "
            f"{p.itl_p99_s * 1000:.1f} ms)"
            for p in sim.probes
        )
        found = (
            f"the fewest that meet the targets: {sim.replicas:,}"
            if sim.replicas is not None
            else f"none up to {sim.computed:,} meets the targets"
        )
        notes.append(
            f"simulated, {deployment(c)} on {c.choice.gpu}: {found} (memory's count {sim.floor:,}, speed's "
            f"{sim.computed:,}); runs of {sim.sessions:,} sessions (seed {sim.seed}) at {sim.rate_per_s:.4g} "
            f"sessions/s ({sim.rate_basis}): {runs}"
        )
    return notes


def load_notes(s: Sizing, most: int = 3) -> list[str]:
    """With a rate: the concurrency Little's law gives each deployment (each its own speeds), at most ``most``."""
    bases = {c.load.basis for c in s.met if c.load is not None and c.load.rate_per_s is not None}
    return [f"load: {basis}" for basis in sorted(bases)[:most]]


# What each column means, for the key under the table (every face names the columns its own way).
MEANINGS = {
    "per_replica": "sessions one replica holds in memory at the cap (plan, worst case reserved) / runs within the "
    "latency targets (speed's roofline, computed, or a load test's speeds, measured: see speeds; every session "
    "generating at once; simulated: the load over the replicas)",
    "replicas": "replicas (GPUs / tp)",
    "count": "how the replicas were found: simulated (the fewest that meet the targets in simulate runs of the "
    "workload, pauses included, one fewer missing) or computed (memory's count, or speed's arithmetic counting every "
    "session as generating at once: an upper bound when latency binds)",
    "binds": "what set the replicas (memory; prefill: TTFT; decode: inter-token latency)",
    "spare": "sessions held beyond the peak",
    "refused": "the workload's sessions that outgrow the cap (counted on the sessions simulate draws)",
    "latency": "at the load each replica runs, of the p99 step with a workload (as simulate's targets), else of "
    "every request (computed or measured, as the speeds; simulated: the p99 of the run at that count)",
    "cost_per_session_hour": "$/h over the peak sessions",
}


def sizing_key(labels: dict[str, str]) -> str:
    """The key: ``label: meaning`` for each column the face names in ``labels`` (cell name -> its heading)."""
    return "; ".join(f"{label}: {MEANINGS[name]}" for name, label in labels.items())


# The report's and the page's columns of a met deployment (``SizingCells`` field, heading, set right); "refused"
# only with a workload, whose sessions the cap may refuse
TABLE_COLUMNS = (
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
# the key under the table: the columns it explains, by the headings above
TABLE_KEY = {
    "per_replica": "per replica mem/lat",
    "count": "count",
    "binds": "binds",
    "spare": "spare",
    "refused": "refused",
    "latency": "TTFT, inter-token",
    "cost_per_session_hour": "$/session-h",
}


@dataclass(frozen=True)
class Column:
    name: str  # the SizingCells field
    label: str
    right: bool  # a figure: set right


@dataclass(frozen=True)
class SizingTable:
    """The sizing answer as the report and the page write it: every cell and line is text, units included."""

    heading: str  # the load, the cap, the targets and the request shape
    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...]  # the deployments that meet the load, cheapest first
    notes: tuple[str, ...]  # the key, then the refusals at the cap, the speeds, the load and the simulation check
    unmet: tuple[str, ...]  # the combinations that cannot meet it, and why

    def to_dict(self) -> dict[str, object]:
        return {
            "heading": self.heading,
            "columns": [{"name": c.name, "label": c.label, "right": c.right} for c in self.columns],
            "rows": [list(row) for row in self.rows],
            "notes": list(self.notes),
            "unmet": list(self.unmet),
        }


def _heading(s: Sizing) -> str:
    p99 = "p99 " if s.shape.percentile == "p99" else ""  # a workload's p99 step, as simulate holds the targets
    targets = [f"{p99}TTFT at most {latency_text(s.ttft_s)}"] if s.ttft_s is not None else []
    targets += [f"{p99}inter-token at most {latency_text(s.itl_s)}"] if s.itl_s is not None else []
    return (
        f"Sized for {load_phrase(s)} (whole deployment) at {a_or_an(format_tokens(s.context))} cap, "
        + (", ".join(targets) if targets else "no latency targets")
        + f"; request shape: {s.shape.basis}."
    )


def _text(cells: SizingCells, name: str) -> str:
    value = getattr(cells, name)
    return latency_text(value) if name.endswith("_s") else str(value)


def sizing_table(s: Sizing) -> SizingTable:
    """The report's and the page's sizing table, heading, notes and unmet lines (module doc)."""
    columns = tuple(
        Column(name, label, right) for name, label, right in TABLE_COLUMNS if name != "refused" or s.refusals
    )
    key = {name: label for name, label in TABLE_KEY.items() if name != "refused" or s.refusals}
    rows = tuple(tuple(_text(sizing_cells(c), col.name) for col in columns) for c in s.met)
    refusal = [note for note in [refusal_note(s)] if note]
    notes = [f"{sizing_key(key)}.", *refusal, *speeds_notes(s), *load_notes(s), *simulation_notes(s)]
    return SizingTable(_heading(s), columns, rows, tuple(notes), tuple(unmet_line(c) for c in s.unmet))
