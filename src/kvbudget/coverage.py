"""The coverage matrix: every registered architecture x reader (config.json, GGUF) x engine, and every engine
x GPU generation x tensor-parallel size (``kvbudget.coverage_parallel``).

Generated from the code, never written by hand: for each architecture of the model-type registry
(``kvbudget.model.architectures``) the config reader reads its sample config (a catalog model, or the
registry's config sample) and the GGUF reader its GGUF sample metadata; every engine then builds the
layout at its default version and cache dtype ("auto": the model dtype; f16 for a GGUF). A cell that
builds is ``exact`` where a test holds that engine's layout for the architecture to the engine's own code
(``kvbudget.engines.evidence``), else ``computed`` (the engine's rule read from its source, never run
against it); a cell is ``refused`` with the reason the engine (or the reader) gives.
``tests/test_coverage.py`` regenerates the matrix and fails when ``docs/coverage.md``
differs, so the document cannot drift from the code.

    kvbudget coverage                      # print the matrix (markdown)
    kvbudget coverage --out docs/coverage.md
    kvbudget coverage --check docs/coverage.md
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvbudget.cost import compute_cost
from kvbudget.coverage_parallel import parallel_matrix, render_parallel
from kvbudget.engines import engine_names, parse_engine
from kvbudget.engines.evidence import layout_label
from kvbudget.errors import KvBudgetError
from kvbudget.model import catalog
from kvbudget.model.architectures import ARCHITECTURES, Architecture
from kvbudget.model.families import read_spec
from kvbudget.model.gguf import spec_from_metadata
from kvbudget.model.spec import ModelSpec

EXACT = "exact"
COMPUTED = "computed"


@dataclass(frozen=True)
class Cell:
    """One architecture on one reader and engine: a layout (exact or computed), or refused with the reason."""

    exact: bool  # the engine builds a layout (``label`` says what it was held to)
    reason: str = ""
    label: str = EXACT


@dataclass(frozen=True)
class Row:
    architecture: Architecture
    config_sample: str
    gguf_sample: str
    config: tuple[Cell, ...]
    gguf: tuple[Cell, ...]
    spec: ModelSpec | None = None  # the config sample as read (the GPU x TP axes cost it)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _config_spec(arch: Architecture) -> tuple[ModelSpec | None, str, str]:
    """(spec, sample label, reader refusal) of the architecture's config sample."""
    if arch.example:
        entry = catalog.lookup(arch.example)
        if entry is None:
            return None, arch.example, f"catalog model {arch.example!r} is missing"
        try:
            return read_spec(entry.config, name=entry.name, source=entry.source), f"catalog: {entry.name}", ""
        except KvBudgetError as exc:
            return None, f"catalog: {entry.name}", _first_line(exc)
    if arch.config_example:
        try:
            spec = read_spec(dict(arch.config_example), name=arch.name, source="registry sample")
        except KvBudgetError as exc:
            return None, "registry config sample", _first_line(exc)
        return spec, "registry config sample", ""
    return None, "-", "no config sample"


def _gguf_spec(arch: Architecture) -> tuple[ModelSpec | None, str, str]:
    if arch.gguf_reader is None or not arch.gguf_archs:
        return None, "-", "no GGUF reader: llama.cpp's rules for this architecture are not implemented"
    name = arch.gguf_archs[0]
    values = {"general.architecture": name, **{f"{name}.{k}": v for k, v in arch.gguf_example.items()}}
    label = f"{name}: {arch.gguf_source}"
    try:
        return spec_from_metadata(values, f"{name}.gguf", name), label, ""
    except KvBudgetError as exc:
        return None, label, _first_line(exc)


def _cells(spec: ModelSpec | None, reader_refusal: str, checked: str | None) -> tuple[Cell, ...]:
    """One cell per engine; ``checked``: the architecture whose layouts the oracle tests hold (config reader only:
    the oracles run the engines on config.json, not on GGUF metadata)."""
    out: list[Cell] = []
    for engine in engine_names():
        if spec is None:
            out.append(Cell(False, reader_refusal))
            continue
        try:
            compute_cost(spec, engine=parse_engine(engine), tokens=1)
        except KvBudgetError as exc:
            out.append(Cell(False, _first_line(exc)))
        else:
            out.append(Cell(True, label=layout_label(engine, checked) if checked or engine == "ideal" else COMPUTED))
    return tuple(out)


def matrix() -> list[Row]:
    """Every registered architecture with its samples and one cell per reader and engine."""
    rows: list[Row] = []
    for arch in ARCHITECTURES:
        config_spec, config_label, config_refusal = _config_spec(arch)
        gguf_spec, gguf_label, gguf_refusal = _gguf_spec(arch)
        rows.append(
            Row(
                arch,
                config_label,
                gguf_label,
                _cells(config_spec, config_refusal, arch.name),
                _cells(gguf_spec, gguf_refusal, None),
                config_spec,
            )
        )
    return rows


def render(rows: Sequence[Row]) -> str:
    """The matrix as markdown: one table of cells, numbered reasons, and the samples each row used."""
    reasons: dict[str, int] = {}

    def cell(c: Cell) -> str:
        if c.exact:
            return c.label
        number = reasons.setdefault(c.reason, len(reasons) + 1)
        return f"refused [{number}]"

    engines = list(engine_names())
    head = ["architecture", "config model_type"] + [f"config: {e}" for e in engines]
    head += ["GGUF architecture"] + [f"GGUF: {e}" for e in engines]
    lines = [
        "# Coverage: architectures x readers x engines",
        "",
        "Generated by `kvbudget coverage --out docs/coverage.md` from the model-type registry",
        "(`src/kvbudget/model/architectures.py`) and the engines; `tests/test_coverage.py` regenerates it and",
        "fails when this file differs. Each architecture's sample (below the table) is read by the config reader",
        "and by the GGUF reader, and costed on every engine at its default version (`kvbudget --version`) and",
        "cache dtype (the model dtype; f16 for a GGUF). `exact`: the engine's layout, held by a test to the",
        "engine's own code run on that architecture (the vLLM and SGLang oracles; `ideal` is kvbudget's own",
        "arithmetic); `computed`: the engine's rule as read from its source, never run against the engine;",
        "`refused [n]`: the engine or reader refuses, for reason n. An architecture missing from the table",
        "fails closed: kvbudget names its model_type and the fields it could not place. These cells are the",
        "KV layout only: the memory before the pool (weights as loaded, runtime overhead) is a `heuristic`",
        "figure, held to real engine logs in docs/measure.md.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    counts = {"config": 0, "gguf": 0, "checked": 0}
    for row in rows:
        arch = row.architecture
        gguf_names = ", ".join(arch.gguf_archs) if arch.gguf_reader is not None else "-"
        cells = [arch.name, ", ".join(arch.model_types), *(cell(c) for c in row.config)]
        cells += [gguf_names, *(cell(c) for c in row.gguf)]
        lines.append("| " + " | ".join(cells) + " |")
        counts["config"] += sum(c.exact for c in row.config)
        counts["gguf"] += sum(c.exact for c in row.gguf)
        counts["checked"] += sum(c.exact and c.label == EXACT for c in row.config + row.gguf)
    total = len(rows) * len(engine_names())
    lines += [
        "",
        f"{len(rows)} architectures; cells with a layout: {counts['config']} of {total} from config.json, "
        f"{counts['gguf']} of {total} from GGUF; {counts['checked']} of them exact (held to the engine's code or "
        "kvbudget's own arithmetic), the rest computed.",
        "",
        *render_parallel(parallel_matrix([row.spec for row in rows if row.spec is not None]), reasons),
        "",
        "## Reasons",
        "",
    ]
    lines += [f"{number}. {reason}" for reason, number in reasons.items()]
    lines += ["", "## Samples", "", "| architecture | config sample | GGUF sample |", "|---|---|---|"]
    lines += [f"| {row.architecture.name} | {row.config_sample} | {row.gguf_sample} |" for row in rows]
    return "\n".join(line.replace("\n", " ") for line in lines) + "\n"
