"""kvbudget's command line: parse, call the library, render. Nothing else lives here.

Every KvBudgetError becomes ``Error: <one line>`` on stderr and exit code 1, in ``main`` only.
Heavy modules (torch, transformers, gguf, huggingface_hub) are imported only by the commands
that need them, so ``kvbudget cost`` starts fast.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import io
import json
import os
import sys
from collections.abc import Callable, Sequence

from kvbudget import __version__
from kvbudget.cli.options import request_from, spelled
from kvbudget.errors import InputError, KvBudgetError, error_document, one_line

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from typing import Any, NoReturn


def add_model_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="catalog name, config.json, model directory, .gguf file, or Hub id")
    p.add_argument(
        "--engine",
        help="ideal, vllm, sglang, trtllm, llamacpp, ollama, transformers; "
        "optionally with a version: vllm@0.25, transformers<5 (default: ideal)",
    )
    p.add_argument(
        *spelled("--kv-dtype"),
        help="cache dtype for K and V (default auto = model dtype); 'q8_0/q4_0' sets K and V apart",
    )
    p.add_argument("--k-dtype", default=None, help="K cache dtype (overrides --kv-dtype)")
    p.add_argument("--v-dtype", default=None, help="V cache dtype (overrides --kv-dtype)")
    p.add_argument(*spelled("--tp"), help="tensor-parallel size; bytes are per GPU (default 1)")
    p.add_argument("--units", choices=["si", "iec"], default="iec", help="GB (10^9) or GiB (2^30); default iec")
    p.add_argument("--json", action="store_true", help="print the versioned JSON contract")
    g = p.add_argument_group("engine settings")
    g.add_argument("--block-size", help="vLLM/SGLang block (page) size in tokens")
    g.add_argument(
        *spelled("--max-num-batched-tokens"),
        help="vLLM max_num_batched_tokens (window reserve) / SGLang --chunked-prefill-size",
    )
    g.add_argument(
        "--no-prefix-caching",
        action="store_true",
        help="vLLM --no-enable-prefix-caching (default: vLLM's own, on for decoder and hybrid models; "
        "on, a Mamba layer holds 2-3 state pages per sequence)",
    )
    g.add_argument("--image-tokens", help="cross-attention source tokens (default 6404: one image, 4 tiles x 1601)")
    g.add_argument(
        "--mla-storage",
        choices=["latent", "latent+v", "expanded"],
        help="override how latent attention is stored",
    )
    g.add_argument("--swa-full", action="store_true", help="llama.cpp --swa-full: full-size SWA cache")
    g.add_argument("--ubatch", help="llama.cpp -ub (default 512) / Ollama num_batch (default: Ollama's)")
    g.add_argument("--no-flash-attn", action="store_true", help="llama.cpp -fa off")
    g.add_argument("--kv-unified", action="store_true", help="llama.cpp --kv-unified (one stream)")
    g.add_argument(
        "--chunked-hybrid",
        action="store_true",
        help="vLLM VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1: Llama 4's chunked layers keep their chunk "
        "(the default from 0.14; 0.10.1-0.13 cache them as full attention without it)",
    )
    g.add_argument(
        *spelled("--enforce-eager"),
        action="store_true",
        help="no CUDA graphs (vLLM --enforce-eager, SGLang --disable-cuda-graph): none reserved; vLLM from 0.20 "
        "subtracts no graph estimate, SGLang's derived mem_fraction_static keeps no graph reserve",
    )
    g.add_argument(
        "--flashinfer-sampler",
        choices=["on", "off"],
        help="vLLM VLLM_USE_FLASHINFER_SAMPLER=1/0 with flashinfer-python installed: which top-k/top-p sampler its "
        "profile runs (default: the release's own; 0.9-0.11.0 use FlashInfer whenever it is installed)",
    )
    g.add_argument(
        "--attn-backend",
        choices=["trtllm", "flashinfer"],
        help="TensorRT-LLM attn_backend (default trtllm); flashinfer keeps a 320 MiB workspace its profile counts",
    )
    g.add_argument(
        "--max-batch-size",
        help="TensorRT-LLM max_batch_size (default 2048; each slot reserves a hybrid's recurrent state)",
    )
    g.add_argument(
        "--max-running-requests",
        help="SGLang --max-running-requests (default: from the token pool; lowers its graph reserve)",
    )
    g.add_argument(
        "--max-num-seqs",
        help="vLLM --max-num-seqs: sequences running at once, the rest wait (default: vLLM's, 256 or 1024 by GPU; "
        "sizes its profile's sampler and CUDA graphs); SGLang's is --max-running-requests, TensorRT-LLM's "
        "--max-batch-size",
    )
    g.add_argument(
        "--n-gpu-layers",
        help="llama.cpp -ngl: layers on the GPU (the output layer counts as one), auto (the most that fit, as --fit "
        "picks them) or all (default: all); the rest stay in host memory",
    )
    g.add_argument(
        "--tensor-split",
        help="llama.cpp --tensor-split (--split-mode layer): one proportion per GPU, e.g. 3,1; the layers are split "
        "over that many GPUs (default: one GPU)",
    )
    g.add_argument(
        "--dp-attention",
        help="SGLang --enable-dp-attention --dp N: N attention data-parallel ranks within --tp (default off)",
    )


# Command groups in their own modules: each has register(subparsers) -> {command: handler}, and imports
# nothing heavy at module level. They are imported only when the command line names none of the core
# commands below (CORE), so a one-answer `kvbudget cost` loads none of them; `kvbudget --help`, an
# extension's command and an unknown command load them all. A new group is one more name here.
EXTENSIONS = (
    "kvbudget.cli.sizing",
    "kvbudget.cli.plan",
    "kvbudget.cli.compare",
    "kvbudget.cli.trace",
    "kvbudget.cli.workload",
    "kvbudget.cli.simulate",
    "kvbudget.cli.measure",
    "kvbudget.cli.loadtest",
    "kvbudget.cli.report",
    "kvbudget.cli.serve",
    "kvbudget.cli.gateway",
    "kvbudget.cli.coverage",
    "kvbudget.cli.speed",
    "kvbudget.cli.size",
)

Handler = Callable[[argparse.Namespace], str]
CORE = ("cost", "table", "models", "measure")  # the commands defined in this module


def _columns() -> int:
    """The terminal's width as ``shutil.get_terminal_size`` finds it (COLUMNS, then the terminal, then 80)."""
    try:
        columns = int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


class _Formatter(argparse.HelpFormatter):
    """argparse's help formatter, its width found without importing shutil (2 ms of every start: argparse
    builds a formatter for every option it adds, and the stock one imports shutil to ask the width)."""

    def __init__(self, prog: str, indent_increment: int = 2, max_help_position: int = 24, width: int | None = None):
        super().__init__(prog, indent_increment, max_help_position, _columns() - 2 if width is None else width)


def usage_message(prog: str, message: str) -> str:
    """argparse's error ``message`` of the parser ``prog`` as kvbudget words every error: starting with the field
    (``--policy: 'x' is not a choice; choose one of reserve, paged, watermark``), not ``kvbudget simulate: argument
    --policy: invalid choice: 'x' (choose from 'reserve', ...)``."""
    import re

    see = f"see {prog} --help"
    if found := re.fullmatch(r"the following arguments are required: (.+)", message, re.DOTALL):
        first = found.group(1).split(", ")[0]
        if first.startswith("{") and first.endswith("}"):  # a group's subcommand, shown as its metavar {a,b}
            return f"command is required; choose one of {first[1:-1].replace(',', ', ')}; {see}"
        return f"{first} is required; {see}"
    if found := re.fullmatch(r"ambiguous option: (\S+) could match (.+)", message, re.DOTALL):
        return f"{found.group(1)}: could be any of {found.group(2)}; write the option in full"
    found = re.fullmatch(r"argument ([^:]+): (.+)", message, re.DOTALL)
    if found is None:
        return f"{message}; {see}"
    names = found.group(1).split("/")  # "-o/--output"; "--utilization/--gpu-memory-utilization/..." (spellings)
    field, said = next((n for n in names if n.startswith("--")), names[-1]), found.group(2)
    if choice := re.fullmatch(r"invalid choice: (.+) \(choose from (.+)\)", said, re.DOTALL):
        choices = ", ".join(c.strip("'") for c in choice.group(2).split(", "))
        return f"{field}: {choice.group(1)} is not a choice; choose one of {choices}"
    if said.startswith("expected"):  # expected one argument, expected at least one argument
        return f"{field}: give it a value; {see}"
    return f"{field}: {said.replace('argument ', '')}; {see}"


class _Parser(argparse.ArgumentParser):
    """argparse with kvbudget's error contract: an InputError (one line naming the field, exit code 1, the error
    document under --json), not usage text and exit 2."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        raise InputError(usage_message(self.prog, message))


def build_parser(parser_class: type[_Parser] = _Parser, *, command: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; with ``command`` one of CORE, only that command's parser (no EXTENSIONS
    module is imported): what ``main`` builds when the first word names a core command."""
    parser = parser_class(
        prog="kvbudget",
        description="Exact KV-cache memory of LLMs per serving engine, with the arithmetic shown.",
    )
    parser.add_argument("--version", action="version", version=f"kvbudget {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=parser_class)

    every = command not in CORE  # a core command's own line builds only its own parser (start-up time)
    if every or command == "cost":
        p = sub.add_parser("cost", help="bytes per token, per sequence and for S sequences")
        add_model_options(p)
        p.add_argument("--tokens", help="tokens per sequence (32768, 32k, 128K; default 32k)")
        p.add_argument("--sequences", help="concurrent sequences (default 1)")

    if every or command == "table":
        p = sub.add_parser("table", help="context x sequences table of KV bytes")
        add_model_options(p)
        p.add_argument("--tokens", help="comma-separated contexts (default 8k,32k,128k)")
        p.add_argument("--sequences", help="comma-separated sequence counts (default 1,8)")

    if every or command == "models":
        p = sub.add_parser("models", help="list the built-in catalog with per-token cost")
        p.add_argument("--engine", help="engine, as for cost (default ideal)")
        p.add_argument("--kv-dtype", help="cache dtype, as for cost (default auto)")
        p.add_argument("--tokens", help="context for the per-sequence column (default 32k)")
        p.add_argument("--units", choices=["si", "iec"], default="iec")
        p.add_argument("--json", action="store_true")

    if every:
        for name in EXTENSIONS:
            COMMANDS.update(importlib.import_module(name).register(sub))

    if every or command == "measure":
        p = sub.add_parser("measure", help="measure a skeleton model's real cache in transformers (extra: measure)")
        p.add_argument("model")
        p.add_argument("--tokens", default="64", help="prompt tokens before the one decode step (default 64)")
        p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
        p.add_argument("--json", action="store_true")

    return parser


def _cmd_cost(args: argparse.Namespace) -> str:
    from kvbudget.cost import kv_cost
    from kvbudget.requests.cost import CostRequest

    report = kv_cost(request_from(CostRequest, args))
    if args.json:
        return json.dumps(report.to_json(), indent=2)
    from kvbudget.render.text import render_cost

    return render_cost(report, args.units)  # si or iec (--units choices)


def _cmd_table(args: argparse.Namespace) -> str:
    from kvbudget.requests.cost import TableRequest
    from kvbudget.tables import cost_table

    answer = cost_table(request_from(TableRequest, args))
    if args.json:
        return json.dumps(answer.to_dict(), indent=2)
    from kvbudget.render.text import render_context_table

    report = answer.report
    cells = {(n, s): answer.total_bytes(n, s) for n in answer.tokens for s in answer.sequences}
    return render_context_table(
        report.model.name,
        report.engine.label,
        report.kv_dtype_label,
        list(answer.tokens),
        list(answer.sequences),
        cells,
        args.units,
    )


def _cmd_models(args: argparse.Namespace) -> str:
    from kvbudget.requests.cost import ModelsRequest
    from kvbudget.tables import catalog_costs

    answer = catalog_costs(request_from(ModelsRequest, args))
    if args.json:
        return json.dumps(answer.to_dict(), indent=2)
    from kvbudget.render.text import render_catalog

    return render_catalog(answer, args.units)


def _cmd_measure(args: argparse.Namespace) -> str:
    from kvbudget.measure.skeleton import measure_command
    from kvbudget.units import parse_tokens

    return measure_command(args.model, tokens=parse_tokens(args.tokens), device=args.device, as_json=args.json)


COMMANDS = {
    "cost": _cmd_cost,
    "table": _cmd_table,
    "models": _cmd_models,
    "measure": _cmd_measure,
}


# Commands that answer once and exit, allocating only objects that live until then (modules, classes,
# the parser, the catalog, one report). While one runs, the cyclic garbage collector is paused: its
# passes over those objects find nothing to free and were about 5 ms of a 55 ms `kvbudget cost` on
# Python 3.11 (docs/architecture.md, start-up). Reference counting still frees everything as usual.
# Commands that run long or hold growing state (simulate, trace, loadtest, serve, measure, compare's
# simulations) keep the collector on.
ONE_ANSWER = frozenset({"cost", "table", "models", "gpus", "weights", "infer", "plan", "levers"})


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else argv
    if not (words and words[0] in ONE_ANSWER and gc.isenabled()):
        return _main(words, argv)
    gc.disable()
    try:
        return _main(words, argv)
    finally:
        gc.enable()


def _main(words: Sequence[str], argv: Sequence[str] | None) -> int:
    parser = build_parser(command=words[0] if words else None)
    args = argparse.Namespace(json="--json" in words)  # a usage error under --json is the error document too
    try:
        try:
            args, extra = parser.parse_known_args(argv)
        except SystemExit as done:  # --help, --version
            return done.code if isinstance(done.code, int) else 1
        if extra:  # named here, where the command is known (argparse names only "kvbudget")
            command = f"kvbudget {args.command}"
            if extra[0].startswith("-"):
                raise InputError(f"{extra[0]}: not an option of {command}; see {command} --help")
            raise InputError(f"{extra[0]!r}: {command} takes no more words; see {command} --help")
        output = COMMANDS[args.command](args)
    except KvBudgetError as exc:
        _name_option(exc, args)
        if getattr(args, "json", False) and not exc.reported:  # the JSON contract holds for errors too
            try:
                print(json.dumps(error_document(exc), indent=2), flush=True)
            except BrokenPipeError:
                raise
            except OSError:  # stdout on a full device: the error line below still says what went wrong
                _drop_stdout()
        print(f"Error: {one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    try:
        print(output)
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:  # a full disk (ENOSPC), a file-size limit (EFBIG), a device error (EIO)
        _drop_stdout()
        print(
            f"Error: cannot write the output ({exc.strerror or exc}); free space or write it elsewhere", file=sys.stderr
        )
        return 1
    return 0


# The file and model options of the commands that read their options without a request class (requests.base), whose
# errors name the option first as the others' do (errors.name_option)
UNTYPED_FILE_OPTIONS = {"loadtest": ("workload", "trace", "model", "out")}


def _name_option(exc: KvBudgetError, args: argparse.Namespace) -> None:
    """Start an error met reading a file or model an option names with the option (errors.name_option), as the
    Python API's functions do: commands that call the library's parts (simulate's progress) meet it here."""
    from kvbudget.errors import name_option
    from kvbudget.requests import by_command
    from kvbudget.requests.base import named_options

    given = vars(args)
    cls = by_command().get(str(given.get("command")))
    options = named_options(cls, given) if cls is not None else {}
    for dest in UNTYPED_FILE_OPTIONS.get(str(given.get("command")), ()):  # a command with no request class
        if given.get(dest):
            options["--" + dest.replace("_", "-")] = given[dest]
    if given.get("model_option"):  # simulate's --model NAME, the documented spelling of its model
        options["--model"] = given["model_option"]
    name_option(exc, options)


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail on the same device again."""
    import contextlib

    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):  # not a descriptor: a test's buffer
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def entry() -> None:
    """Console-script entry point. A reader that stops early (``kvbudget models | head``) is not an error."""
    try:
        code = main()
        sys.stdout.flush()
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not raise again (Python docs, signal).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        code = 0
    sys.exit(code)


__all__ = ["InputError", "build_parser", "entry", "main"]
