"""The cost tables: one model over contexts x sequence counts (``kvbudget table``), and the whole built-in catalog
at one context (``kvbudget models``), as records whose ``to_dict()`` is the command's JSON document."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.cost import SCHEMA_VERSION

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.cost import CostReport
    from kvbudget.engines import EngineRef
    from kvbudget.requests.cost import ModelsRequest, TableRequest


@dataclass(frozen=True)
class CostTable:
    """KV bytes per GPU of one model for each (tokens, sequences) cell."""

    report: CostReport  # the cost at the first context (per-token figures, engine, dtype)
    tokens: tuple[int, ...]
    sequences: tuple[int, ...]

    def total_bytes(self, tokens: int, sequences: int) -> int:
        return self.report.layout.total_bytes(tokens, sequences)

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget table --json`` document."""
        report = self.report
        return {
            "schema_version": SCHEMA_VERSION,
            "model": report.model.name,
            "engine": report.engine.to_json(),
            "kv_dtype": report.kv_dtype_label,
            "tp": report.layout.tp,
            "kv_bytes_per_token": report.kv_bytes_per_token,
            "rows": [
                {"tokens": n, "sequences": s, "total_bytes": self.total_bytes(n, s)}
                for n in self.tokens
                for s in self.sequences
            ],
        }


def cost_table(request: TableRequest) -> CostTable:
    """KV bytes of the request's model for every context and sequence count (``kvbudget table``)."""
    from kvbudget.cost import kv_cost
    from kvbudget.requests.base import narrowed
    from kvbudget.requests.cost import CostRequest

    report = kv_cost(narrowed(CostRequest, request, tokens=request.tokens[0], sequences=1))
    return CostTable(report, request.tokens, request.sequences)


@dataclass(frozen=True)
class CatalogRow:
    """One catalog model: its cost report, or why the engine refuses it."""

    name: str
    aliases: tuple[str, ...]
    model_type: str
    status: str
    source: str
    report: CostReport | None
    refused: str = ""

    @property
    def kinds(self) -> list[str]:
        """The layer kinds that hold a cache (shared-KV layers hold none of their own)."""
        if self.report is None:
            return []
        return sorted({g.kind for g in self.report.layout.groups if g.kind != "shared_kv"})

    def to_dict(self, tokens: int) -> dict[str, object]:
        if self.report is None:
            return {"name": self.name, "model_type": self.model_type, "refused": self.refused}
        return {
            "name": self.name,
            "aliases": list(self.aliases),
            "model_type": self.model_type,
            "kv_bytes_per_token": self.report.kv_bytes_per_token,
            "state_bytes": self.report.state_bytes,
            "tokens": tokens,
            "sequence_bytes": self.report.sequence_bytes,
            "kinds": self.kinds,
            "status": self.status,
            "source": self.source,
        }


@dataclass(frozen=True)
class CatalogCosts:
    """Every built-in catalog model's cost on one engine and cache dtype, one sequence at ``tokens``."""

    engine: EngineRef
    engine_text: str  # as the request named it (the text output's head)
    kv_dtype: str
    tokens: int
    rows: tuple[CatalogRow, ...]

    def to_dict(self) -> dict[str, object]:
        """The ``kvbudget models --json`` document."""
        return {
            "schema_version": SCHEMA_VERSION,
            "engine": self.engine.to_json(),
            "kv_dtype": self.kv_dtype,
            "models": [row.to_dict(self.tokens) for row in self.rows],
        }


def catalog_costs(request: ModelsRequest) -> CatalogCosts:
    """The built-in catalog with each model's cost (``kvbudget models``); a model the engine refuses is a row that
    says why, so one refusal does not hide the rest of the catalog."""
    from kvbudget.cost import compute_cost
    from kvbudget.engines import parse_engine
    from kvbudget.errors import EngineRefusalError
    from kvbudget.model import catalog
    from kvbudget.model.families import read_spec

    engine = parse_engine(request.engine)
    rows = []
    for entry in catalog.entries():
        spec = read_spec(entry.config, name=entry.name, source=entry.source, where=f"catalog:{entry.name}")
        try:
            report: CostReport | None = compute_cost(
                spec, engine=engine, kv_dtype=request.kv_dtype, tokens=request.tokens
            )
            refused = ""
        except EngineRefusalError as exc:
            report, refused = None, str(exc)
        rows.append(
            CatalogRow(entry.name, tuple(entry.aliases), spec.model_type, entry.status, entry.source, report, refused)
        )
    return CatalogCosts(engine, request.engine, request.kv_dtype, request.tokens, tuple(rows))
