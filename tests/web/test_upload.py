"""Uploads to a real ``kvbudget serve``: a config.json, and a GGUF sent as its header only."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest

from kvbudget.cli.main import main
from kvbudget.model.gguf_file import read_gguf_file
from tests.helpers import dense_config
from tests.web.browser import Server


def upload(server: Server, data: bytes, name: str, size: int | None = None) -> tuple[int, dict[str, object]]:
    query = {"name": name} if size is None else {"name": name, "size": str(size)}
    status, body = server.request("POST", f"api/upload?{urllib.parse.urlencode(query)}", data)
    return status, json.loads(body)


def plan(server: Server, model: str, *extra: tuple[str, str]) -> dict[str, object]:
    query = urllib.parse.urlencode([("model", model), ("gpu", "l40s"), ("context", "16k"), *extra])
    status, body = server.get(f"api/plan?{query}")
    assert status == 200, body
    result: dict[str, object] = json.loads(body)
    return result


def cli_plan(capsys: pytest.CaptureFixture[str], model: Path, *extra: str) -> dict[str, object]:
    assert main(["plan", str(model), "--gpu", "l40s", "--context", "16k", *extra, "--json"]) == 0
    result: dict[str, object] = json.loads(capsys.readouterr().out)
    return result


def test_an_uploaded_config_is_planned_as_the_cli_plans_that_file(
    server: Server, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = dense_config(40, 40, 8, 128, hidden_size=5120, intermediate_size=13824, vocab_size=32000)
    status, doc = upload(server, json.dumps(config).encode(), "config.json")
    assert status == 200
    uploaded = doc["upload"]
    assert isinstance(uploaded, dict)
    assert uploaded["kind"] == "config"
    assert uploaded["model"] == uploaded["id"]
    # the same file in a folder of the same name, through the CLI
    local = tmp_path / str(uploaded["id"]) / "config.json"
    local.parent.mkdir()
    local.write_text(json.dumps(config), encoding="utf-8")
    served, expected = plan(server, str(uploaded["id"])), cli_plan(capsys, local)
    assert served["kv_bytes_per_token"] == expected["kv_bytes_per_token"] == 40 * 2 * 8 * 128 * 2
    for key in ("model", "sessions", "ledger", "per_session_bytes", "weights_bytes", "statement"):
        assert served[key] == expected[key], key


def test_a_gguf_header_and_its_size_plan_as_the_whole_file(
    server: Server, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("gguf")
    from tests.live.tiny_gguf import write_llama

    whole = write_llama(tmp_path / "tiny-llama.gguf")
    data = whole.read_bytes()
    header = read_gguf_file(whole).data_start
    assert header < len(data) // 2  # the tensors' bytes stay here
    status, doc = upload(server, data[:header], whole.name, size=len(data))
    assert status == 200, doc
    uploaded = doc["upload"]
    assert isinstance(uploaded, dict)
    assert (uploaded["kind"], uploaded["sent_bytes"], uploaded["file_bytes"]) == ("gguf", header, len(data))
    served = plan(server, str(uploaded["id"]), ("engine", "llamacpp"))
    expected = cli_plan(capsys, whole, "--engine", "llamacpp")
    for key in ("model", "sessions", "kv_bytes_per_token", "weights_bytes", "ledger", "token_budget"):
        assert served[key] == expected[key], key


def test_a_cut_header_is_the_clis_gguf_error(server: Server, tmp_path: Path) -> None:
    pytest.importorskip("gguf")
    from tests.live.tiny_gguf import write_llama

    whole = write_llama(tmp_path / "tiny-llama.gguf")
    data = whole.read_bytes()
    status, doc = upload(server, data[:4000], whole.name)  # no size: the 4,000 bytes are the whole file
    assert status == 400
    error = doc["error"]
    assert isinstance(error, dict)
    assert error["kind"] == "ConfigError"
    assert "tiny-llama.gguf: not a complete GGUF file: 4,000 bytes, cut short or damaged" in str(error["message"])


def test_a_broken_config_is_the_clis_config_error_and_is_not_kept(server: Server) -> None:
    status, doc = upload(server, b'{"model_type": "llama", ', "config.json")
    assert status == 400
    error = doc["error"]
    assert isinstance(error, dict)
    assert error["kind"] == "ConfigError"
    assert "config.json" in str(error["message"])
    status, doc = upload(server, b"", "config.json")
    assert status == 400
    message = "upload: the file is empty; drop a config.json or a .gguf file, or a workload .toml"
    assert doc["error"] == {"kind": "InputError", "message": message}
