"""The JSON API of a real ``kvbudget serve``: the CLI's own --json documents, byte for byte, and its errors."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest

from kvbudget.cli.main import main
from tests.web.browser import Server

SCHEMAS = Path(__file__).parents[2] / "src" / "kvbudget" / "schemas"


def cli_stdout(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main([*argv, "--json"])
    return code, capsys.readouterr().out


def cli_argv(command: str, params: dict[str, str], *switches: str) -> list[str]:
    """The command line that the query ``params`` stand for: the model first, then ``--name value`` pairs."""
    argv = [command]
    if "model" in params:
        argv.append(params["model"])
    for name, value in params.items():
        if name != "model":
            argv += ["--" + name.replace("_", "-"), value]
    return [*argv, *switches]


def api(server: Server, command: str, **params: str) -> tuple[int, str]:
    status, body = server.get(f"api/{command}?{urllib.parse.urlencode(params)}")
    return status, body.decode("utf-8")


CASES = [
    ("plan", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "context": "32k"}),
    (
        "plan",
        {"model": "qwen3-32b", "gpu": "h200", "engine": "sglang", "context": "64k", "kv-dtype": "fp8", "sessions": "9"},
    ),
    (
        "plan",
        {"model": "llama-3.1-70b", "gpu": "h100-sxm", "engine": "vllm", "context": "32k", "tp": "4", "prefix": "4k"},
    ),
    ("levers", {"model": "llama-3.1-8b", "gpu": "a100-80gb", "engine": "vllm", "context": "32k"}),
    ("cost", {"model": "llama-3.1-8b", "engine": "llamacpp", "tokens": "128k", "kv_dtype": "q8_0"}),
    ("table", {"model": "llama-3.1-8b", "tokens": "8k,32k", "sequences": "1,4"}),
    ("compare", {"model": "llama-3.1-8b,qwen3-32b", "gpu": "h100-sxm,h200", "engine": "vllm", "context": "8k,32k"}),
    (
        "size",
        {
            "model": "llama-3.1-8b,qwen3-32b",
            "gpu": "h100-sxm,h200",
            "engine": "vllm,sglang",
            "context": "32k",
            "sessions": "60",
            "ttft": "2s",
            "itl": "50ms",
            "price": "h100-sxm=2.49/h,h200=3.59/h",
        },
    ),
    ("speed", {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "concurrency": "13"}),
    ("models", {}),
    ("gpus", {}),
]


@pytest.mark.parametrize(("command", "params"), CASES)
def test_document_is_the_clis_byte_for_byte(
    server: Server, capsys: pytest.CaptureFixture[str], command: str, params: dict[str, str]
) -> None:
    code, expected = cli_stdout(capsys, *cli_argv(command, params))
    assert code == 0
    status, body = api(server, command, **params)
    assert status == 200
    assert body == expected
    assert json.loads(body)["schema_version"] == 1


def test_both_spellings_of_an_option_are_the_same_option(server: Server) -> None:
    base = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "context": "32k"}
    _, dashed = api(server, "plan", **base, **{"kv-dtype": "fp8"})
    _, underscored = api(server, "plan", **base, kv_dtype="fp8")
    _, default = api(server, "plan", **base)
    assert dashed == underscored
    assert json.loads(dashed)["kv_dtype"] == "fp8"
    assert json.loads(dashed)["sessions"] > json.loads(default)["sessions"]


def test_a_switch_takes_one_or_zero(server: Server, capsys: pytest.CaptureFixture[str]) -> None:
    base = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm", "context": "32k"}
    _, expected = cli_stdout(capsys, *cli_argv("plan", base, "--no-prefix-caching"))
    assert api(server, "plan", **base, no_prefix_caching="1") == (200, expected)
    assert api(server, "plan", **base, no_prefix_caching="0") == api(server, "plan", **base)
    status, body = api(server, "plan", **base, no_prefix_caching="maybe")
    assert status == 400
    assert json.loads(body)["error"]["message"] == "--no-prefix-caching: a switch; give 1 (on) or 0 (off), not 'maybe'"


def test_enforce_eager_is_a_switch_that_frees_vllm_0_20s_graph_reserve(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "engine": "vllm@0.20", "context": "32k"}
    _, expected = cli_stdout(capsys, *cli_argv("plan", base, "--enforce-eager"))
    assert api(server, "plan", **base, enforce_eager="1") == (200, expected)
    _, graphs = api(server, "plan", **base, enforce_eager="0")
    assert json.loads(expected)["kv_pool_bytes"] - json.loads(graphs)["kv_pool_bytes"] == int(0.9 * 2**30)


def test_the_flashinfer_sampler_is_a_choice_that_plans_as_the_cli_does(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    base = {"model": "qwen2.5-7b", "gpu": "a100-80gb", "engine": "vllm@0.10.1", "context": "16k", "utilization": "0.25"}
    _, expected = cli_stdout(capsys, *cli_argv("plan", base, "--flashinfer-sampler", "on"))
    assert api(server, "plan", **base, flashinfer_sampler="on") == (200, expected)
    _, native = api(server, "plan", **base, flashinfer_sampler="off")
    # FlashInfer keeps 14 B per (sequence, vocabulary entry) where the sort keeps 37: 256 x 152,064 x 23 B more pool
    assert json.loads(expected)["kv_pool_bytes"] - json.loads(native)["kv_pool_bytes"] == 256 * 152_064 * 23
    status, body = api(server, "plan", **base, flashinfer_sampler="yes")
    assert status == 400
    assert json.loads(body)["error"]["message"] == "--flashinfer-sampler: 'yes' is not a choice; choose one of on, off"


@pytest.mark.parametrize(
    "params",
    [
        {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "32q"},
        {"model": "no-such-model", "gpu": "h100-sxm", "context": "32k"},
        {"model": "llama-3.1-8b", "gpu": "h100-sxm", "context": "32k", "kv-dtype": "fp7"},
        {"model": "llama-3.1-70b", "gpu": "a10", "context": "32k"},
    ],
)
def test_bad_input_is_400_with_the_clis_error_document(
    server: Server, capsys: pytest.CaptureFixture[str], params: dict[str, str]
) -> None:
    code, expected = cli_stdout(capsys, *cli_argv("plan", params))
    assert code == 1
    status, body = api(server, "plan", **params)
    assert status == 400
    assert body == expected
    document = json.loads(body)
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(document, json.loads((SCHEMAS / "error.json").read_text(encoding="utf-8")))


def test_a_missing_or_unknown_option_is_the_requests_one_line(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    status, body = api(server, "plan", model="llama-3.1-8b", gpu="h100-sxm")
    assert status == 400
    assert json.loads(body)["error"] == {"kind": "InputError", "message": "--context is required"}
    code, expected = cli_stdout(capsys, "plan", "llama-3.1-8b", "--gpu", "h100-sxm")
    assert code == 1 and body == expected  # the command line says the same, in the same document
    status, body = api(server, "plan", model="llama-3.1-8b", context="32k", bogus="1")
    assert (status, json.loads(body)["error"]["message"]) == (
        400,
        "--bogus: not an option of kvbudget plan; see kvbudget plan --help",
    )
    status, body = api(server, "serve")
    assert status == 400
    assert json.loads(body)["error"]["message"] == (
        "/api/serve: no such command; the API serves compare, cost, gpus, levers, models, plan, size, speed, table"
    )


def test_the_server_reads_no_file_of_its_machine(server: Server, tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama"}), encoding="utf-8")
    status, body = api(server, "plan", model=str(config), gpu="h100-sxm", context="32k")
    assert status == 400
    message = json.loads(body)["error"]["message"]
    assert "config.json: the web calculator reads no file" in message
    assert str(tmp_path) not in message  # no path of the server's machine in any message, even one it was sent
    status, body = api(server, "plan", model="llama-3.1-8b", gpu="h100-sxm", context="32k", from_log=str(config))
    assert status == 400
    assert "--from-log: names a file on the server's machine" in json.loads(body)["error"]["message"]


def test_another_host_name_or_origin_is_refused(server: Server) -> None:
    port = server.url.rsplit(":", 1)[1].rstrip("/")
    assert server.get("api/gpus", {"Host": f"localhost:{port}"})[0] == 200
    status, body = server.get("api/gpus", {"Host": f"attacker.example:{port}"})
    assert status == 403
    assert b"not this server's name" in body
    status, _ = server.request("POST", "api/upload", b"{}", {"Origin": "http://attacker.example"})
    assert status == 403


def test_the_page_and_its_files_come_from_the_server(server: Server) -> None:
    for path, marker in [("", b"<title>kvbudget"), ("app.js", b"use strict"), ("style.css", b":root")]:
        status, body = server.get(path)
        assert status == 200
        assert marker in body
    assert b"http" not in server.get("app.js")[1].replace(b"http://www.w3.org/2000/svg", b"")
