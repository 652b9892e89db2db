"""Gateway API keys (``--keys``): the file, the key a request carries, and each key's session quota in memory and
in Redis (the live test sends real requests through a gateway in front of a llama-server that has a key of its
own: tests/live/test_gateway_live.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
from pathlib import Path

import pytest

from kvbudget.errors import InputError
from kvbudget.gateway import keys
from kvbudget.gateway.admission import Admission, Refused
from tests.helpers import run_cli

QUOTAS = {"team-a": 2, "team-b": 1}


def write(tmp_path: Path, doc: object) -> Path:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc, encoding="utf-8")
    return path


def test_a_key_names_its_team_by_bearer_or_x_api_key_and_the_file_may_hold_only_digests(tmp_path: Path) -> None:
    digest = hashlib.sha256(b"sk-team-b-secret").hexdigest()
    loaded = keys.load(write(tmp_path, {"team-a": {"key": "sk-team-a-secret", "sessions": 2},
                                        "team-b": {"sha256": digest, "sessions": 1}}))  # fmt: skip
    assert loaded.quota == QUOTAS
    assert loaded.identify({"authorization": "Bearer sk-team-a-secret"}) == "team-a"
    assert loaded.identify({"x-api-key": "sk-team-b-secret"}) == "team-b"
    with pytest.raises(keys.Unauthorized, match="no API key"):
        loaded.identify({"authorization": "Basic abc"})
    with pytest.raises(keys.Unauthorized, match="incorrect API key") as wrong:
        loaded.identify({"authorization": "Bearer sk-team-a-secreT"})
    assert "secreT" not in str(wrong.value)  # the key is never echoed


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ("{team", "not JSON"),
        ([], "a JSON object of teams"),
        ({"team a": {"key": "sk-12345678", "sessions": 1}}, "team 'team a': name it"),
        ({"t": {"key": "sk-12345678", "sessions": 0}}, "team t: 'sessions' must be a whole number >= 1"),
        ({"t": {"key": "short", "sessions": 1}}, "team t: give 'key' (8 or more"),
        ({"t": {"key": "sk-12345678", "sha256": "0" * 64, "sessions": 1}}, "not both"),
        ({"t": {"key": "sk-12345678", "sessions": 1, "quota": 3}}, 'team t: give {"key"'),
        (
            {"t": {"key": "sk-12345678", "sessions": 1}, "u": {"key": "sk-12345678", "sessions": 1}},
            "same key as team t",
        ),
    ],
)
def test_a_bad_keys_file_is_one_line_naming_the_entry(tmp_path: Path, doc: object, message: str) -> None:
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace("{", r"\{")):
        keys.load(write(tmp_path, doc))


def test_the_command_says_a_missing_keys_file_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("aiohttp")
    missing = tmp_path / "nope.json"
    code, out, err = run_cli(capsys, "gateway", "--upstream", "http://h:1", "--cap", "1k", "--sessions", "1",
                             "--keys", str(missing))  # fmt: skip
    assert (
        (code, out) == (1, "") and err.startswith(f"Error: --keys {missing}: cannot read it") and err.count("\n") == 1
    )


def test_an_unset_upstream_key_variable_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("aiohttp")
    code, _, err = run_cli(capsys, "gateway", "--upstream", "http://h:1", "--cap", "1k", "--sessions", "1",
                           "--upstream-key-env", "KVBUDGET_TEST_NO_SUCH_VARIABLE")  # fmt: skip
    assert code == 1 and err == (
        "Error: --upstream-key-env KVBUDGET_TEST_NO_SUCH_VARIABLE: the variable is not set; "
        "export KVBUDGET_TEST_NO_SUCH_VARIABLE=<the engine's key>\n"
    )


def test_a_key_holds_at_most_its_quota_and_its_own_namespace() -> None:
    async def scenario() -> None:
        admission = Admission(2, queue_timeout_s=0.05, max_queue=8, idle_timeout_s=60, quotas=QUOTAS)
        a1 = await admission.wait("team-a/s1")
        b1 = await admission.wait("team-b/s1")  # the same client id under another key: another session
        assert a1 is not b1 and admission.load == {"upstream": 2}
        with pytest.raises(Refused, match="key-quota"):
            await admission.wait("team-b/s2")  # team-b holds its one session: refused at once, not queued
        waiting = asyncio.ensure_future(admission.wait("team-a/s2"))  # no slot: it waits, and counts
        await asyncio.sleep(0.01)
        with pytest.raises(Refused, match="key-quota"):
            await admission.wait("team-a/s3")
        with pytest.raises(Refused, match="queue-timeout"):
            await waiting
        assert admission.held == {"team-a": 1, "team-b": 1}  # the one that gave up no longer counts
        admission.leave(b1)
        assert admission.end("team-b/s1") and admission.held["team-b"] == 0
        assert (await admission.wait("team-b/s2")).id == "team-b/s2"

    asyncio.run(scenario())
