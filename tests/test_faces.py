"""One core, many faces: the command line, the Python API and the web API build the same typed request and get the
same document, defaults and errors included; the core imports no face; defaults live in the requests only; the
library answers many threads at once as it answers one."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

import kvbudget
from kvbudget.cli.main import build_parser, main
from kvbudget.errors import InputError, KvBudgetError, error_document
from kvbudget.requests.base import Request
from kvbudget.requests.report import ReportRequest
from kvbudget.web import api as web_api
from kvbudget.web.uploads import Uploads

SRC = Path(kvbudget.__file__).parent
FACES = ("kvbudget.cli", "kvbudget.web", "kvbudget.api")
ROOT = Path(__file__).resolve().parents[1]
WEKA = sorted(str(p) for p in (ROOT / "tests" / "data" / "traces" / "weka_kv_cache_tester").glob("*.json"))[:3]
LOG = str(ROOT / "tests" / "data" / "logs" / "vllm" / "v0-0.6.4fmt-llama31-8b-rtx3090-20k.log")


def _module(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module a file imports, at module level, in functions and under TYPE_CHECKING alike."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names |= {f"{node.module}.{alias.name}" for alias in node.names}
    return names


def _is(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


MODULES = {_module(path): _imports(path) for path in sorted(SRC.rglob("*.py"))}


def test_the_walk_sees_the_whole_package() -> None:
    assert {"kvbudget.cli.main", "kvbudget.plan.build", "kvbudget.requests.plan", "kvbudget.web.api"} <= set(MODULES)
    assert "argparse" in MODULES["kvbudget.cli.main"]  # the walk reads imports where they are


def test_argparse_is_imported_only_by_the_cli_package() -> None:
    users = sorted(name for name, imported in MODULES.items() if "argparse" in imported)
    assert users and all(_is(name, "kvbudget.cli") for name in users), users


@pytest.mark.parametrize("face", FACES)
def test_nothing_in_the_core_imports_a_face(face: str) -> None:
    # the package's own __init__ and __main__ are the doors to the faces: the Python API (lazily) and the CLI
    core = {
        name: imported
        for name, imported in MODULES.items()
        if name not in ("kvbudget", "kvbudget.__main__") and not any(_is(name, f) for f in FACES)
    }
    offenders = sorted(name for name, imported in core.items() if any(_is(i, face) for i in imported))
    assert not offenders, f"core modules importing {face}: {offenders}"


def test_every_cli_option_that_a_request_takes_defaults_to_not_given() -> None:
    """A request's defaults are the only defaults: an option of the command line that a request field takes is None
    (or False for a switch) until given, so nothing can differ between the faces."""
    from kvbudget.requests import by_command

    parser = build_parser()
    sub: Any = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    checked = 0
    for command, cls in by_command().items():
        words = command.split()
        p = sub.choices[words[0]]
        for word in words[1:]:
            inner: Any = next(a for a in p._actions if a.__class__.__name__ == "_SubParsersAction")
            p = inner.choices[word]
        names = {f.name for f in fields(cls)}
        for action in p._actions:
            if action.dest in names and action.option_strings:
                assert action.default in (None, False), f"{command} {action.option_strings[0]}: {action.default!r}"
                checked += 1
    assert checked > 150


# --- the same questions through every face ----------------------------------------------------------------------

Question = tuple[str, dict[str, Any]]  # the command, and its options as a face collects them (None: not given)

QUESTIONS: list[Question] = [
    ("cost", {"model": "llama-3.1-70b"}),
    ("cost", {"model": "gemma-3-27b", "engine": "vllm", "tokens": "128k", "kv_dtype": "fp8"}),
    ("table", {"model": "qwen3-32b"}),
    ("table", {"model": "llama-3.1-8b", "engine": "llamacpp", "tokens": "8k,32k", "sequences": "1,4"}),
    ("models", {}),
    ("gpus", {}),
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "32k"}),
    ("plan", {"model": "qwen3-32b", "gpu": "h200", "engine": "sglang", "context": "64k", "sessions": "9"}),
    ("plan", {"model": "llama-3.1-70b", "gpu": "h100-sxm", "engine": "vllm", "tp": "4", "context": "32k"}),
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "context": "32k", "alerts": True}),
    # vLLM --enforce-eager: no CUDA-graph term in the overhead (0.20 subtracts one otherwise); a switch on every face
    (
        "plan",
        {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm@0.20", "context": "32k", "enforce_eager": True},
    ),
    # vLLM VLLM_USE_FLASHINFER_SAMPLER with flashinfer-python installed: the profile's sampler; a choice on every face
    (
        "plan",
        {
            "model": "qwen2.5-7b",
            "gpu": "a100-80gb",
            "engine": "vllm@0.10.1",
            "context": "16k",
            "flashinfer_sampler": "on",
        },
    ),
    # TensorRT-LLM attn_backend FLASHINFER: its 320 MiB workspace in the overhead, the setting in the serve YAML
    (
        "plan",
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-sxm",
            "engine": "trtllm",
            "context": "32k",
            "attn_backend": "flashinfer",
        },
    ),
    # SGLang --disable-cuda-graph (kvbudget's --enforce-eager): no graph reserve in the derived fraction
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "sglang", "context": "32k", "enforce_eager": True}),
    ("levers", {"model": "llama-3.1-8b", "gpu": "a100-80gb", "engine": "vllm", "context": "32k"}),
    ("compare", {"model": "llama-3.1-8b,qwen3-32b", "gpu": "h100-sxm,rtx-5090", "context": "32k,128k"}),
    (
        "compare",
        {
            "model": "qwen3-32b",
            "gpu": "h100-sxm,h200",
            "engine": "vllm",
            "context": "32k",
            "weights": "checkpoint,fp8",
            "tp": "1,2",
            "sessions": "8",
            "price": "h100-sxm=2.49/h",
        },
    ),
]
QUESTIONS += [  # llama.cpp's layer placement: -ngl auto on a 5 GiB card, and a split over two GPUs
    (
        "plan",
        {
            "model": "llama-3.1-8b",
            "gpu_memory": "5141MiB",
            "engine": "llamacpp",
            "context": "32k",
            "weights": "q4_0",
            "n_gpu_layers": "auto",
        },
    ),
    (
        "plan",
        {
            "model": "qwen3-30b-a3b",
            "gpu": "rtx-4090",
            "engine": "llamacpp",
            "context": "16k",
            "weights": "q4_0",
            "tensor_split": "1,3",
            "gpus": "2",
        },
    ),
]
ERRORS: list[Question] = [
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "context": "32k", "n_gpu_layers": "20"}),
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "llamacpp", "context": "32k", "tensor_split": "0"}),
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "trtllm", "context": "32k", "enforce_eager": True}),
    (
        "plan",
        {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "sglang", "context": "32k", "flashinfer_sampler": "on"},
    ),
    (
        "plan",
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-sxm",
            "engine": "vllm@0.6.6",
            "context": "8k",
            "flashinfer_sampler": "on",
        },
    ),
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "32k", "flashinfer_sampler": "yes"}),
    (
        "plan",
        {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "context": "32k", "attn_backend": "flashinfer"},
    ),
    (
        "plan",
        {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "trtllm", "context": "32k", "attn_backend": "vanilla"},
    ),
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "lots"}),
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm"}),
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "32k", "utilization": "1.5"}),
    ("cost", {"model": "llama-3.1-8b", "tokens": "0"}),
    ("compare", {"model": "qwen3-32b", "gpu": "h100-sxm", "context": "32k", "sort": "vibes"}),
    ("levers", {"model": "no-such-model", "gpu": "h100-sxm", "context": "32k"}),
    ("plan", {"model": "qwen3-32b", "gpu": "rtx-5090", "engine": "vllm", "context": "128k"}),  # refused: won't fit
]


def cli_document(command: str, options: dict[str, Any]) -> tuple[int, str]:
    argv = command.split()
    for name, value in options.items():
        if name == "model" and command in ("cost", "table", "plan", "levers", "compare", "size"):
            argv.insert(len(command.split()), value)
        elif name in ("files", "logs"):
            argv += list(value)
        elif value is True:
            argv.append("--" + name.replace("_", "-"))
        else:
            argv += ["--" + name.replace("_", "-"), str(value)]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main([*argv, "--json"])
    return code, out.getvalue()


def api_document(command: str, options: dict[str, Any]) -> str:
    from kvbudget.requests import by_command

    functions: dict[str, Callable[[Any], Any]] = {
        "cost": kvbudget.kv_cost,
        "table": kvbudget.cost_table,
        "models": kvbudget.catalog_costs,
        "plan": kvbudget.plan_deployment,
        "levers": kvbudget.rank_levers,
        "compare": kvbudget.compare_deployments,
        "simulate": kvbudget.simulate_deployment,
        "trace stats": kvbudget.trace_report,
        "calibrate": kvbudget.calibrate_logs,
        "size": kvbudget.size_deployments,
    }
    try:
        if command == "gpus":
            from kvbudget.hardware import gpu_catalog

            answer: Any = gpu_catalog()
        else:
            answer = functions[command](by_command()[command].from_options(options))
    except KvBudgetError as exc:
        return json.dumps(error_document(exc), indent=2) + "\n"
    return json.dumps(answer.to_dict(), indent=2) + "\n"


def web_document(command: str, options: dict[str, Any], tmp_path: Path) -> tuple[int, str]:
    query = [(name, str(value)) for name, value in options.items()]
    uploads = Uploads()
    try:
        reply = web_api.run(command, query, uploads)
    finally:
        uploads.close()
    return reply.status, reply.body


@pytest.mark.parametrize(("command", "options"), QUESTIONS, ids=[f"{c}{i}" for i, (c, _) in enumerate(QUESTIONS)])
def test_the_same_question_gives_the_same_document_on_every_face(
    command: str, options: dict[str, Any], tmp_path: Path
) -> None:
    code, cli = cli_document(command, options)
    assert code == 0, cli
    assert api_document(command, options) == cli
    assert web_document(command, options, tmp_path) == (200, cli)


@pytest.mark.parametrize(("command", "options"), ERRORS, ids=[f"{c}{i}" for i, (c, _) in enumerate(ERRORS)])
def test_the_same_mistake_gives_the_same_error_on_every_face(
    command: str, options: dict[str, Any], tmp_path: Path
) -> None:
    code, cli = cli_document(command, options)
    assert code == 1
    document = json.loads(cli)
    assert document["error"]["message"] and "\n" not in document["error"]["message"]
    assert api_document(command, options) == cli
    assert web_document(command, options, tmp_path) == (400, cli)


SPEEDS = str(ROOT / "tests" / "data" / "loadtest" / "speeds-llama31-8b-vllm.json")
FILE_QUESTIONS: list[Question] = [
    (
        "simulate",
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-sxm",
            "engine": "vllm",
            "context": "32k",
            "workload": str(ROOT / "examples" / "coding-agent.toml"),
            "sessions": "150",
            "search_sessions": "0",
        },
    ),
    ("simulate", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "64k", "trace": WEKA[0]}),
    # the engine's running limit binds: the same document (running_limit, the waits in TTFT) on both faces
    (
        "simulate",
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-sxm",
            "engine": "sglang",
            "context": "32k",
            "workload": str(ROOT / "examples" / "chat.toml"),
            "rate": "2",
            "sessions": "100",
            "search_sessions": "0",
            "max_running_requests": "3",
        },
    ),
    ("trace stats", {"files": WEKA}),
    ("trace stats", {"files": WEKA, "model": "qwen3-32b", "gpu": "h200", "engine": "vllm"}),
    ("calibrate", {"logs": [LOG]}),
    # a load test's measured speeds (--speed-from): the same figures through every face that reads files
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "context": "32k", "speed_from": SPEEDS}),
    (
        "size",
        {
            "model": "llama-3.1-8b",
            "gpu": "h100-sxm",
            "engine": "vllm,sglang",
            "context": "32k",
            "sessions": "60",
            "itl": "25ms",
            "speed_from": SPEEDS,
        },
    ),
]


@pytest.mark.parametrize(
    ("command", "options"), FILE_QUESTIONS, ids=[f"{c.replace(' ', '-')}{i}" for i, (c, _) in enumerate(FILE_QUESTIONS)]
)
def test_questions_that_read_files_agree_between_the_command_line_and_the_api(
    command: str, options: dict[str, Any]
) -> None:
    code, cli = cli_document(command, options)
    assert code == 0, cli
    assert api_document(command, options) == cli


def test_the_web_api_reads_no_file_for_a_client(tmp_path: Path) -> None:
    status, body = web_document(
        "compare",
        {"model": "qwen3-32b", "gpu": "h100-sxm", "context": "32k", "workload": "examples/coding-agent.toml"},
        tmp_path,
    )
    assert status == 400 and "never reads" in json.loads(body)["error"]["message"]


# --- the requests themselves --------------------------------------------------------------------------------------


def test_typed_values_and_texts_make_the_same_request() -> None:
    typed = kvbudget.PlanRequest(model="qwen3-32b", gpu="h100-sxm", context=32_768, gpu_memory=None)
    texts = kvbudget.PlanRequest.from_options({"model": "qwen3-32b", "gpu": "h100-sxm", "context": "32k"})
    wrapped = kvbudget.PlanRequest(model="qwen3-32b", gpu="h100-sxm", context=kvbudget.Tokens("32k"))
    assert typed == texts == wrapped and type(texts.context) is int
    assert kvbudget.Memory("80GB") == 80 * 10**9 and kvbudget.Memory("24GiB") == 24 * 2**30
    compare = kvbudget.CompareRequest.from_options({"model": "a,b", "gpu": ["h100-sxm"], "context": "32k"})
    assert (compare.model, compare.gpu, compare.context) == (("a", "b"), ("h100-sxm",), (32_768,))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"context": True}, "--context: give a whole number of tokens, not True"),
        ({"context": 2**50}, "--context: 1,125,899,906,842,624 is outside 1..1,099,511,627,776 tokens"),
        ({"context": "32k", "tp": 0}, "--tp: 0 is outside 1..65,536 GPUs"),
        ({"context": "32k", "utilization": float("nan")}, "--utilization: nan is outside 0..1 (a fraction like 0.9)"),
        ({"context": "32k", "no_prefix_caching": "yes"}, "--no-prefix-caching: a switch; give True or False"),
        ({"context": "32k", "mla_storage": "zip"}, "--mla-storage: 'zip' is not a choice; choose one of latent"),
        ({"context": "32k", "colour": "red"}, "--colour: not an option of kvbudget plan; see kvbudget plan --help"),
    ],
)
def test_a_bad_field_is_one_error_naming_its_option(options: dict[str, object], message: str) -> None:
    with pytest.raises(InputError) as caught:
        kvbudget.PlanRequest.from_options({"model": "qwen3-32b", "gpu": "h100-sxm", **options})
    assert str(caught.value).startswith(message)


@pytest.mark.parametrize(
    ("cls", "options", "message"),
    [
        # a misspelt name in a list was a row "that cannot meet the load" (exit 0), or an error naming no option
        (kvbudget.SizeRequest, {"engine": "vllm,foo"}, "--engine: unknown engine 'foo'; choose one of: ideal"),
        (kvbudget.SizeRequest, {"kv_dtype": "fp8,int3"}, "--kv-dtype: unknown cache dtype 'int3'"),
        (kvbudget.SizeRequest, {"weights": "fp8,fp7"}, "--weights: unknown weight precision 'fp7'"),
        (kvbudget.SizeRequest, {"gpu": "h100-sxm,h900"}, "--gpu: GPU 'h900' is not in the catalog"),
        (kvbudget.CompareRequest, {"engine": "vllm@abc"}, "--engine vllm@abc: a version is a release number"),
        (kvbudget.PlanRequest, {"gpu": "h900"}, "--gpu: GPU 'h900' is not in the catalog"),
        # an unknown --link was answered (exit 0) unless --offload-memory was given, then named no option
        (kvbudget.PlanRequest, {"link": "pcie9"}, "--link: link 'pcie9' is not in the catalog"),
        (kvbudget.SpeedRequest, {"gpu": "h900"}, "--gpu: GPU 'h900' is not in the catalog"),
        (ReportRequest, {"size_gpu": "h900"}, "--size-gpu: GPU 'h900' is not in the catalog"),
        (ReportRequest, {"size_engine": "tgi"}, "--size-engine: unknown engine 'tgi'"),
        # a list with a repeat or an empty item was answered with the row twice, or the item dropped
        (kvbudget.SizeRequest, {"gpu": "h100-sxm,h100-sxm"}, "--gpu: 'h100-sxm' is given twice; give each value"),
        (kvbudget.CompareRequest, {"context": "32k,32768"}, "--context: '32768' is given twice"),
        (kvbudget.SizeRequest, {"engine": "vllm,,sglang"}, "--engine: 'vllm,,sglang' has an empty item; remove"),
        (kvbudget.SizeRequest, {"engine": "vllm,"}, "--engine: 'vllm,' has an empty item"),
    ],
)
def test_a_bad_name_or_list_is_refused_when_the_request_is_made(
    cls: type[Any], options: dict[str, object], message: str
) -> None:
    base = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "32k"}
    if cls is kvbudget.SpeedRequest:
        del base["context"]
    with pytest.raises(InputError) as caught:
        cls.from_options({**base, **options})
    assert str(caught.value).startswith(message), str(caught.value)


def test_calibrate_refuses_a_cache_dtype_it_cannot_read() -> None:
    # calibrate --kv-dtype foo printed "cache_dtype: foo (given)" and exited 0
    with pytest.raises(InputError, match=r"^--kv-dtype: unknown cache dtype 'foo'"):
        kvbudget.CalibrateRequest(logs=("engine.log",), kv_dtype="foo")
    assert kvbudget.CalibrateRequest(logs=("engine.log",), kv_dtype="q8_0/q4_0").kv_dtype == "q8_0/q4_0"


def test_checkpoint_weights_mean_the_same_on_plan_as_on_size_and_compare() -> None:
    # size and compare default --weights to "checkpoint"; plan refused the same word as an unknown precision
    own = kvbudget.PlanRequest(model="llama-3.1-8b", gpu="h100-sxm", context=8192)
    named = kvbudget.PlanRequest.from_options({"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "8k",
                                               "weights": "Checkpoint"})  # fmt: skip
    assert named == own and named.weights is None
    assert kvbudget.plan_deployment(named).to_dict() == kvbudget.plan_deployment(own).to_dict()


def test_a_prefix_of_zero_is_no_prefix_as_every_answer_prints_it() -> None:
    # speed --json prints "prefix": 0 by default, yet --prefix 0 (and prefix=0 on the web) was refused
    none = kvbudget.SpeedRequest(model="llama-3.1-8b", gpu="h100-sxm")
    assert kvbudget.SpeedRequest.from_options({"model": "llama-3.1-8b", "gpu": "h100-sxm", "prefix": "0"}) == none
    assert kvbudget.SpeedRequest(model="llama-3.1-8b", gpu="h100-sxm", prefix=0) == none
    assert kvbudget.estimate_speed(none).to_dict()["prefix"] == 0
    with pytest.raises(InputError, match="--prefix: cannot read '-1' as a token count"):
        kvbudget.SpeedRequest.from_options({"model": "llama-3.1-8b", "gpu": "h100-sxm", "prefix": "-1"})


def test_requests_are_frozen_and_carry_over_to_another_question() -> None:
    request = kvbudget.PlanRequest(model="qwen3-32b", gpu="h100-sxm", context=32_768)
    with pytest.raises(AttributeError):
        request.context = 1  # type: ignore[misc]
    levers = kvbudget.LeversRequest.from_options(request.options())
    assert levers.context == 32_768 and isinstance(levers, Request)


def test_the_library_answers_many_threads_as_it_answers_one() -> None:
    """The web API answers requests concurrently with no lock: the same plans from 8 threads at once are the
    documents one thread gets."""
    requests = [
        kvbudget.PlanRequest(model=model, gpu=gpu, engine=engine, context=context)
        for model in ("llama-3.1-8b", "qwen3-32b", "gemma-3-27b")
        for gpu in ("h100-sxm", "rtx-5090")
        for engine in ("vllm", "sglang", "llamacpp")
        for context in (8192, 131_072)
    ]

    def document(request: kvbudget.PlanRequest) -> str:
        try:
            return json.dumps(kvbudget.plan_deployment(request).to_dict())
        except KvBudgetError as exc:
            return json.dumps(error_document(exc))

    serial = [document(r) for r in requests]
    with ThreadPoolExecutor(max_workers=8) as pool:
        parallel = list(pool.map(document, requests * 2))
    assert parallel == serial * 2


def test_import_kvbudget_offers_exactly_the_python_api() -> None:
    import kvbudget.api

    assert sorted(set(kvbudget.__all__) - {"__version__"}) == sorted(kvbudget.api.__all__)
    for name in kvbudget.api.__all__:
        assert getattr(kvbudget, name) is getattr(kvbudget.api, name)
