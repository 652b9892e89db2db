"""The coverage matrix's GPU x tensor-parallel axes: every engine on each GPU generation at TP 1, 2, 4 and 8.

Generated from the code, as the architecture matrix is (``kvbudget.coverage``): each registered
architecture's config sample is costed on every engine at its default version and cache dtype, with the
compute capability of the GPU (which picks the attention backend, and so the block or page size, on vLLM,
SGLang and TensorRT-LLM) and the tensor-parallel size. A cell counts the architectures with a layout and
gives the reasons of the refusals (one number each, listed under the architecture matrix's); it says
``exact`` only where the test suite runs that engine's own code on that GPU at that layout
(``kvbudget.coverage_oracle``), else ``computed`` (the engine's rules read from its source, never run).
The second table lists those oracle cells: the models run, and any read rather than run with the reason.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvbudget.cost import compute_cost
from kvbudget.coverage_oracle import GPUS, TPS, render_oracle, run_architectures
from kvbudget.engines import engine_names, parse_engine
from kvbudget.engines.base import EngineOptions
from kvbudget.errors import KvBudgetError
from kvbudget.model.architectures import architecture_of
from kvbudget.model.spec import ModelSpec

# the cells the engines' own code runs in the test suite (tests/oracle/test_*_matrix.py)
ORACLE_ENGINES = ("vllm", "sglang")


@dataclass(frozen=True)
class ParallelCell:
    exact: int  # architectures whose layout the engine's own code, run here at this GPU and TP, agrees with
    computed: int  # architectures with a layout from the engine's rules as read, never run at this cell
    total: int
    refusals: tuple[tuple[str, int], ...]  # (reason, architectures refused for it)


@dataclass(frozen=True)
class ParallelRow:
    engine: str
    gpu: str
    cells: tuple[ParallelCell, ...]  # one per TP


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _architecture(spec: ModelSpec) -> str:
    arch = architecture_of(spec.model_type)
    return arch.name if arch else spec.name


def parallel_matrix(specs: Sequence[ModelSpec]) -> list[ParallelRow]:
    """Every engine x GPU generation x TP over the architectures' config samples ``specs``."""
    rows: list[ParallelRow] = []
    for engine in engine_names():
        ref = parse_engine(engine)
        for oracle_gpu in GPUS:
            cells = []
            for tp in TPS:
                # ideal is kvbudget's own arithmetic, exact by definition; an engine's cell, where its code runs
                held = None if engine == "ideal" else run_architectures(engine, oracle_gpu.key, tp)
                exact = computed = 0
                refused: dict[str, int] = {}
                options = EngineOptions(gpu_capability=oracle_gpu.capability)
                for spec in specs:
                    try:
                        compute_cost(spec, engine=ref, tokens=1, tp=tp, options=options)
                    except KvBudgetError as exc:
                        reason = _first_line(exc)
                        refused[reason] = refused.get(reason, 0) + 1
                    else:
                        if held is None or _architecture(spec) in held:
                            exact += 1
                        else:
                            computed += 1
                cells.append(ParallelCell(exact, computed, len(specs), tuple(refused.items())))
            rows.append(ParallelRow(engine, oracle_gpu.label, tuple(cells)))
    return rows


def render_parallel(rows: Sequence[ParallelRow], reasons: dict[str, int]) -> list[str]:
    """The GPU x TP table as markdown lines; refusal reasons are numbered into ``reasons`` (shared)."""

    def cell(c: ParallelCell) -> str:
        parts = [f"{n} {label}" for n, label in ((c.exact, "exact"), (c.computed, "computed")) if n]
        parts += [f"{count} refused [{reasons.setdefault(reason, len(reasons) + 1)}]" for reason, count in c.refusals]
        return ", ".join(parts)

    total = rows[0].cells[0].total if rows else 0
    lines = [
        "## GPU generations x tensor parallelism",
        "",
        "Every architecture's config sample (below) on every engine, with the GPU's compute capability (it picks",
        "the attention backend and so the block or page size on vLLM, SGLang and TensorRT-LLM) and the",
        f"tensor-parallel size, over the {total} architectures' config samples: `n exact` counts those whose",
        "per-GPU layout the test suite holds to the engine's own planning code, run on this GPU at this TP (the",
        "oracle matrix below; `ideal` is kvbudget's own arithmetic); `n computed` those with a layout from the",
        "engine's rules as read from its source, not run at this cell (TensorRT-LLM's, llama.cpp's and Ollama's",
        "code cannot run here); `k refused [n]` those refused for reason n.",
        "",
        "| engine | GPU | " + " | ".join(f"TP {tp}" for tp in TPS) + " |",
        "|" + "---|" * (2 + len(TPS)),
    ]
    lines += [f"| {row.engine} | {row.gpu} | " + " | ".join(cell(c) for c in row.cells) + " |" for row in rows]
    return [*lines, "", *render_oracle(reasons)]
