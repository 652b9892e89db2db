"""The serving commands that implement a plan, each spelled by its engine (``Rules.serve_command``)."""

from __future__ import annotations

import re
import shlex
from dataclasses import replace

from kvbudget.engines import engine_names, parse_engine
from kvbudget.engines.records import ServeSettings
from kvbudget.errors import KvBudgetError
from kvbudget.plan.plan import Plan, make_plan

MODEL_PLACEHOLDER = "MODEL"  # when the model was given as a bare config with no repo id or directory


def serve_settings(plan: Plan) -> ServeSettings:
    i = plan.inputs
    return ServeSettings(
        model=i.spec.model_id or MODEL_PLACEHOLDER,
        context=i.context,
        sessions=plan.sessions,
        k=i.k,
        v=i.v,
        tp=i.tp,
        pp=i.pp,
        fraction=plan.share.fraction,
        kv_pool_bytes=plan.kv_pool_bytes,
        overhead_measured=i.overhead is not None,
        prefix=i.prefix,
        options=replace(i.options, n_gpu_layers=plan.layer_split.n_gpu_layers) if plan.layer_split else i.options,
        native_context=i.spec.max_position_embeddings,
        quantize=i.weights_precision,
    )


def _command(plan: Plan) -> str | None:
    text = engine_command(plan)["text"]
    return text if isinstance(text, str) else None


def _text(plan: Plan, settings: ServeSettings, args: tuple[str, ...] | None) -> str | None:
    """The serve command's text, or why nothing is served; None for an engine without a server."""
    if args is None:
        return None
    if plan.sessions < 1:  # a serve line that cannot hold one session would only fail at start-up
        largest = plan.largest_cap()
        context = plan.inputs.context
        if largest < 1:
            return f"not served: not even a one-token session fits in the {plan.kv_pool_bytes:,}-byte KV pool"
        return (
            f"not served at --context {context}: no session of {context:,} tokens fits; one session fits up to "
            f"--context {largest}"
        )
    note = plan.inputs.engine.rules.serve_note(settings)
    return shell_text(args) + (f"  # {note}" if note else "")


_SHELL_WORDS = frozenset({">", "&&", "|"})
_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=[A-Za-z0-9_.:/,+-]*$")


def shell_text(args: tuple[str, ...]) -> str:
    """The command as one shell line: each argument quoted where the shell would split or expand it, shell
    operators and environment assignments kept as they are."""
    return " ".join(a if a in _SHELL_WORDS or _ENV.match(a) else shlex.quote(a) for a in args)


def engine_command(plan: Plan) -> dict[str, object]:
    """The plan's serve command as arguments and as text: {argv, text}, argv None when it is not served."""
    settings = serve_settings(plan)
    args = plan.inputs.engine.rules.serve_command(settings)
    text = _text(plan, settings, args)
    return {"argv": list(args) if args is not None and plan.sessions >= 1 else None, "text": text}


def _each_server(plan: Plan) -> dict[str, Plan | str]:
    """Every serving engine's own plan of the same deployment (each engine sizes the cache its own way, so
    --max-num-seqs and -np differ), or why it refuses the deployment."""
    out: dict[str, Plan | str] = {}
    for name in engine_names(servers_only=True):
        if name == plan.inputs.engine.name:
            out[name] = plan
            continue
        try:
            out[name] = make_plan(replace(plan.inputs, engine=parse_engine(name)))
        except KvBudgetError as exc:
            out[name] = f"not possible: {exc}"
    return out


def all_engine_commands(plan: Plan) -> dict[str, dict[str, object]]:
    """{engine: {argv, text}} for every serving engine (argv None, the reason as text, where it serves nothing)."""
    return {
        name: engine_command(p) if isinstance(p, Plan) else {"argv": None, "text": p}
        for name, p in _each_server(plan).items()
    }


def all_engine_flags(plan: Plan, commands: dict[str, dict[str, object]] | None = None) -> dict[str, str]:
    """The serve command's text for every serving engine, each from its own plan of the same deployment (from
    ``commands`` when the caller has them already)."""
    return {name: str(c["text"] or "") for name, c in (commands or all_engine_commands(plan)).items()}
