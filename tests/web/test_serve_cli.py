"""``kvbudget serve`` as a command: its one-line errors, and the extra it names when starlette is missing."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from kvbudget.cli.serve import is_loopback
from tests.helpers import run_cli
from tests.web.browser import require_modules


def test_without_the_web_extra_it_names_the_extra_in_one_line() -> None:
    # starlette made unimportable in a fresh interpreter, as when the extra is not installed
    code = "import sys; sys.modules['starlette'] = None; from kvbudget.cli.main import main; sys.exit(main(['serve']))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == "Error: kvbudget serve needs starlette: pip install 'kvbudget[web]'\n"


@pytest.mark.parametrize(
    ("port", "message"),
    [
        ("http", "Error: --port: cannot read 'http' as a whole number; write e.g. 8731\n"),
        ("70000", "Error: --port: 70,000 is outside 0..65,535 (0 = a free port)\n"),
    ],
)
def test_a_bad_port_is_one_line(capsys: pytest.CaptureFixture[str], port: str, message: str) -> None:
    require_modules("starlette", "uvicorn")
    assert run_cli(capsys, "serve", "--port", port) == (1, "", message)


def test_a_busy_port_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    require_modules("starlette", "uvicorn")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        code, out, err = run_cli(capsys, "serve", "--port", str(port))
    assert (code, out) == (1, "")
    assert err.startswith(f"Error: --port {port}: cannot listen on 127.0.0.1:{port} (")
    assert err.endswith("); pick another port, or --port 0\n")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("127.8.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False), ("::", False)],
)
def test_which_hosts_are_this_machine_only(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_a_host_other_than_loopback_is_warned_about(capsys: pytest.CaptureFixture[str]) -> None:
    # a name that cannot resolve: the warning comes first, and nothing listens
    require_modules("starlette", "uvicorn")
    code, out, err = run_cli(capsys, "serve", "--host", "calculator.invalid", "--port", "0")
    assert (code, out) == (1, "")
    warning, error = err.splitlines()
    assert warning == (
        "Warning: --host calculator.invalid is not a loopback address: anyone who can reach this machine on port 0 "
        "can use the calculator and upload files to it"
    )
    assert error.startswith("Error: --host calculator.invalid: cannot resolve it (")
