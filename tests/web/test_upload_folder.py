"""``kvbudget serve`` leaves its upload folder clean (issue 22): a real server run in a subprocess with its own
TMPDIR, an upload sent, the server stopped with Ctrl-C (SIGINT) and SIGTERM; a busy port; and an upload that
meets a full disk (a file-size limit in a subprocess) removes its own half-written folder."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("uvicorn")

ROOT = Path(__file__).resolve().parents[2]
CONFIG = json.dumps(
    {"model_type": "llama", "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
     "hidden_size": 256, "intermediate_size": 512, "vocab_size": 1000, "max_position_embeddings": 4096}
).encode()  # fmt: skip


def _serve(tmp: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvbudget", "serve", "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if "http://" in line:
            return proc, line[line.index("http://") :].split()[0].rstrip("/")
    _stop(proc, signal.SIGKILL)
    raise AssertionError("serve printed no URL")


def _stop(proc: subprocess.Popen[str], how: signal.Signals) -> None:
    proc.send_signal(how)
    proc.wait(timeout=30)
    assert proc.stdout is not None
    proc.stdout.close()


def _made(tmp_path: Path) -> list[Path]:
    """The server's own folders in its temporary folder: multiprocessing's (``pymp-*``, the socket of the fork
    server its answers are forked from, web/isolate.py) left out while it runs; it too is gone once it stops."""
    return [p for p in tmp_path.iterdir() if not p.name.startswith("pymp-")]


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_serve_removes_its_uploads_when_stopped(tmp_path: Path, stop: signal.Signals) -> None:
    proc, url = _serve(tmp_path)
    try:
        request = urllib.request.Request(f"{url}/api/upload?name=config.json", data=CONFIG, method="POST")
        with urllib.request.urlopen(request, timeout=30) as answer:
            assert answer.status == 200
        assert [p.name[:14] for p in _made(tmp_path)] == ["kvbudget-serve"]
    finally:
        _stop(proc, stop)
    assert list(tmp_path.iterdir()) == []


def test_a_server_that_gets_no_upload_makes_no_folder(tmp_path: Path) -> None:
    proc, _ = _serve(tmp_path)
    try:
        assert _made(tmp_path) == []
    finally:
        _stop(proc, signal.SIGINT)
    assert list(tmp_path.iterdir()) == []


def test_an_upload_onto_a_full_disk_is_an_error_and_leaves_nothing(tmp_path: Path) -> None:
    script = """
import resource, signal, sys, tempfile
from pathlib import Path
from kvbudget.errors import InputError
from kvbudget.web.uploads import Uploads
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
uploads = Uploads()
try:
    uploads.add(b"{" + b" " * 5000 + b"}", name="config.json", size=None)
except InputError as exc:
    print(exc)
print(sorted(str(p.relative_to(tempfile.gettempdir())) for p in Path(tempfile.gettempdir()).rglob("*")))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "TMPDIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60, check=False)
    message, listing = r.stdout.splitlines()
    assert message == "upload: the server cannot store the file (File too large); try again later"
    assert listing.startswith("['kvbudget-serve-") and listing.count(",") == 0  # its folder, no upload in it
    assert list(tmp_path.iterdir()) == []  # removed at exit
