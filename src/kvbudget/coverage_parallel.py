"""The coverage matrix's GPU x tensor-parallel axes: every engine on each GPU generation at TP 1, 2, 4 and 8.

Generated from the code, as the architecture matrix is (``kvbudget.coverage``): each registered
architecture's config sample is costed on every engine at its default version and cache dtype, with the
compute capability of the GPU (which picks the attention backend, and so the block or page size, on vLLM,
SGLang and TensorRT-LLM) and the tensor-parallel size. A cell counts the architectures whose layout is
exact and gives the reasons of the refusals (one number each, listed under the architecture matrix's).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvbudget.cost import compute_cost
from kvbudget.engines import engine_names, parse_engine
from kvbudget.engines.base import EngineOptions
from kvbudget.errors import KvBudgetError
from kvbudget.model.spec import ModelSpec

# the GPU generations of the axis: (label, kvbudget catalog entry, compute capability x 10)
GPUS = (
    ("A100 (Ampere)", "a100-80gb", 80),
    ("L40S (Ada)", "l40s", 89),
    ("H100 (Hopper)", "h100-80gb", 90),
    ("H200 (Hopper)", "h200", 90),
    ("B200 (Blackwell)", "b200", 100),
)
TPS = (1, 2, 4, 8)
# the cells the engines' own code runs in the test suite (tests/oracle/test_*_matrix.py), on five models
ORACLE_ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class ParallelCell:
    exact: int
    total: int
    refusals: tuple[tuple[str, int], ...]  # (reason, architectures refused for it)


@dataclass(frozen=True)
class ParallelRow:
    engine: str
    gpu: str
    cells: tuple[ParallelCell, ...]  # one per TP


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def parallel_matrix(specs: Sequence[ModelSpec]) -> list[ParallelRow]:
    """Every engine x GPU generation x TP over the architectures' config samples ``specs``."""
    rows: list[ParallelRow] = []
    for engine in engine_names():
        ref = parse_engine(engine)
        for label, _, capability in GPUS:
            cells = []
            for tp in TPS:
                exact = 0
                refused: dict[str, int] = {}
                for spec in specs:
                    try:
                        compute_cost(
                            spec, engine=ref, tokens=1, tp=tp, options=EngineOptions(gpu_capability=capability)
                        )
                    except KvBudgetError as exc:
                        reason = _first_line(exc)
                        refused[reason] = refused.get(reason, 0) + 1
                    else:
                        exact += 1
                cells.append(ParallelCell(exact, len(specs), tuple(refused.items())))
            rows.append(ParallelRow(engine, label, tuple(cells)))
    return rows


def render_parallel(rows: Sequence[ParallelRow], reasons: dict[str, int]) -> list[str]:
    """The GPU x TP table as markdown lines; refusal reasons are numbered into ``reasons`` (shared)."""

    def cell(c: ParallelCell) -> str:
        if not c.refusals:
            return f"exact {c.exact}/{c.total}"
        parts = [f"{count} refused [{reasons.setdefault(reason, len(reasons) + 1)}]" for reason, count in c.refusals]
        return f"exact {c.exact}/{c.total}; " + ", ".join(parts)

    lines = [
        "## GPU generations x tensor parallelism",
        "",
        "Every architecture's config sample (below) on every engine, with the GPU's compute capability (it picks",
        "the attention backend and so the block or page size on vLLM, SGLang and TensorRT-LLM) and the",
        "tensor-parallel size: `exact n/m` counts the architectures with a byte-exact per-GPU layout, `k refused",
        f"[n]` those refused for reason n. The {' and '.join(ORACLE_ENGINES)} cells are also run against the",
        "engines' own code on five models each (tests/oracle/test_vllm_matrix.py, test_sglang_matrix.py).",
        "",
        "| engine | GPU | " + " | ".join(f"TP {tp}" for tp in TPS) + " |",
        "|" + "---|" * (2 + len(TPS)),
    ]
    lines += [f"| {row.engine} | {row.gpu} | " + " | ".join(cell(c) for c in row.cells) + " |" for row in rows]
    return lines
