"""Output onto a full device (issue 22): one error line and exit 1, never a traceback, and no file left behind.

A full disk is simulated two ways a test can own: stdout on /dev/full (every write fails with ENOSPC), and a
file-size limit (RLIMIT_FSIZE, with SIGXFSZ ignored, so a write past it fails with EFBIG) for ``--out``."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "KVBUDGET_WIDTH": "0"}
PLAN = ("plan", "llama-3.1-8b", "--gpu", "h100", "--context", "8k")


def _small_files() -> None:
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (100, 100))


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("extra", [(), ("--json",)])
def test_stdout_on_a_full_device_is_one_error_line(extra: tuple[str, ...]) -> None:
    with open("/dev/full", "w") as full:  # noqa: PTH123
        r = subprocess.run(
            [sys.executable, "-m", "kvbudget", *PLAN, *extra],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            env=ENV,
            timeout=60,
            check=False,
        )
    assert r.returncode == 1
    assert r.stderr == "Error: cannot write the output (No space left on device); free space or write it elsewhere\n"


def test_out_past_a_file_size_limit_is_one_error_line_and_leaves_nothing(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    r = subprocess.run(
        [sys.executable, "-m", "kvbudget", "report", *PLAN[1:], "--out", str(target)],
        preexec_fn=_small_files,
        capture_output=True,
        text=True,
        env=ENV,
        timeout=120,
        check=False,
    )
    assert r.returncode == 1
    assert r.stderr == f"Error: --out {target}: cannot write (File too large)\n"
    assert list(tmp_path.iterdir()) == []  # the atomic writer's temporary file is removed too
