"""The faces of ``kvbudget speed``: the CLI's JSON is the API's to_dict(); bad input is one line."""

from __future__ import annotations

import json

import pytest

import kvbudget
from tests.helpers import run_cli


def test_cli_json_is_the_api_document(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("llama-3.1-8b", "--gpu", "h200", "--engine", "sglang", "--isl", "2000", "--concurrency", "32")
    code, out, err = run_cli(capsys, "speed", *argv, "--json")
    assert code == 0, err
    request = kvbudget.SpeedRequest(model="llama-3.1-8b", gpu="h200", engine="sglang", isl=2000, concurrency="32")
    assert json.loads(out) == json.loads(json.dumps(kvbudget.estimate_speed(request).to_dict()))


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (("--gpu", "a10"), "no datasheet compute figures"),
        (("--gpu", "h100-sxm", "--concurrency", "lots"), "or max"),
        (("--gpu", "h100-sxm", "--prefix", "5000"), "--prefix"),
        ((), "--gpu"),
    ],
)
def test_bad_input_is_one_line(capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], fragment: str) -> None:
    code, _out, err = run_cli(capsys, "speed", "llama-3.1-8b", *argv)
    assert code == 1 and fragment in err and len(err.strip().splitlines()) == 1
