"""A workload uploaded to a real ``kvbudget serve`` sizes as ``kvbudget size --workload FILE`` does, and the server
reads no other file for it: a bad workload is the CLI's one-line error (400), an oversized one is refused by its
size, one that replays a trace (a file of the server's machine) is refused, and ``workload=`` takes nothing but a
workload upload's id."""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest

from kvbudget.web.uploads import MAX_WORKLOAD_BYTES
from tests.helpers import run_cli
from tests.web.browser import Server
from tests.web.test_upload import upload

ROOT = Path(__file__).resolve().parents[2]
CHAT = ROOT / "examples" / "chat.toml"
SIZE = [("model", "llama-3.1-8b"), ("gpu", "h100-sxm"), ("context", "32k"), ("sessions", "60"), ("itl", "40ms")]


def size(server: Server, workload: str) -> tuple[int, dict[str, object]]:
    status, body = server.get(f"api/size?{urllib.parse.urlencode([*SIZE, ('workload', workload)])}")
    return status, json.loads(body)


def uploaded_id(server: Server) -> str:
    """A workload upload's id (examples/chat.toml)."""
    status, doc = upload(server, CHAT.read_bytes(), "chat.toml")
    assert status == 200, doc
    return str(doc["upload"]["id"])  # type: ignore[index]


def test_an_uploaded_workload_sizes_as_the_cli_sizes_that_file(
    server: Server, capsys: pytest.CaptureFixture[str]
) -> None:
    status, doc = upload(server, CHAT.read_bytes(), "chat.toml")
    assert status == 200, doc
    uploaded = doc["upload"]
    assert isinstance(uploaded, dict)
    assert (uploaded["kind"], uploaded["workload"], uploaded["sent_bytes"]) == ("workload", "chat", CHAT.stat().st_size)
    status, served = size(server, str(uploaded["id"]))
    assert status == 200, served
    argv = [f"--{name}={value}" for name, value in SIZE[1:]]
    code, out, err = run_cli(capsys, "size", "llama-3.1-8b", *argv, "--workload", str(CHAT), "--json")
    assert code == 0, err
    assert served == json.loads(out)
    assert served["refused_at_cap"] is not None  # the workload's sessions were drawn: it was read


def test_a_bad_workload_is_the_clis_one_line_error(
    server: Server, capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "agents.toml"
    bad.write_text(CHAT.read_text(encoding="utf-8").replace("mean = 4", "mean = -4"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    argv = ["size", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "32k", "--sessions", "6", "--workload", bad.name]
    code, _, err = run_cli(capsys, *argv)
    assert code == 1 and err.count("\n") == 1 and err.startswith("Error: --workload: agents.toml: ")
    status, doc = upload(server, bad.read_bytes(), bad.name)
    assert status == 400
    assert f"Error: {doc['error']['message']}\n" == err  # type: ignore[index]


def test_an_oversized_or_replaying_workload_and_a_path_are_refused(server: Server) -> None:
    status, doc = upload(server, b"#" * (MAX_WORKLOAD_BYTES + 1), "big.toml")
    assert status == 400 and "over the 65,536-byte cap" in doc["error"]["message"]  # type: ignore[index]
    replay = CHAT.read_text(encoding="utf-8").replace("rate_per_s = 0.5", 'replay = "/etc/hostname"').encode()
    status, doc = upload(server, replay, "replay.toml")
    assert status == 400
    assert "[arrival].replay names a trace file on the server's machine" in doc["error"]["message"]  # type: ignore[index]
    for named in (str(CHAT), "examples/chat.toml", "upload-00000000"):
        status, doc = size(server, named)
        assert status == 400, named
        message = doc["error"]["message"]  # type: ignore[index]
        assert message.startswith("--workload ") and "not a workload uploaded to this server" in message
    for other in ("plan", "compare"):  # size alone takes a workload upload; the others refuse the option
        status, body = server.get(f"api/{other}?model=llama-3.1-8b&workload={uploaded_id(server)}")
        assert status == 400 and b"names a file on the server's machine" in body
