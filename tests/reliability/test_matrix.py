"""The fuzz matrix (issue 22): every CLI option (read from the real parser), every request field of the Python
API, every web parameter and every file reader has a hostile strategy, and each run of one ends in a clean
one-line error or a valid document: no traceback, within a time limit (SIGALRM) and a memory limit (RLIMIT_AS
lowered to what the process holds plus a margin, so a reader that allocates without bound fails the test with
MemoryError instead of taking the machine). A kind, option or reader added without a strategy fails
``test_every_*_has_a_strategy``. Sampling is derandomized (each option takes a rotating slice of its kind's
values; hypothesis runs derandomized, tests/conftest.py), so the matrix fits in about a minute of CI.
docs/reliability.md shows the matrix and its counts.
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
from collections.abc import Iterator
from dataclasses import fields
from pathlib import Path
from types import FrameType

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvbudget.cli.main import build_parser
from kvbudget.errors import KvBudgetError
from kvbudget.requests import by_command
from kvbudget.requests.values import READERS
from tests.helpers import run_cli
from tests.reliability.hostile import CONFIG, SPECIFIC, VALUES, hostile_files

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = str(ROOT / "examples" / "chat.toml")
TRACE = str(ROOT / "tests" / "data" / "traces" / "tracelab_example" / "round_trace.sanitized.jsonl")
LOG = str(ROOT / "tests" / "data" / "logs" / "vllm" / "v0-0.6.4fmt-llama31-8b-rtx3090-20k.log")
MODEL = "llama-3.1-8b"
DEPLOY = ["--gpu", "h100-sxm", "--context", "32k"]
SECONDS = 20  # per run
MARGIN = 2 * 2**30  # bytes a run may allocate above what the process holds

# a valid invocation of each command, to which one hostile option is added (or whose value it replaces)
BASE: dict[str, list[str]] = {
    "": [],
    "cost": ["cost", MODEL],
    "table": ["table", MODEL],
    "models": ["models"],
    "gpus": ["gpus"],
    "weights": ["weights", MODEL],
    "infer": ["infer", "--context", "32k", "--gpu", "h100-sxm", "--params", "8B"],
    "plan": ["plan", MODEL, *DEPLOY],
    "levers": ["levers", MODEL, *DEPLOY],
    "compare": ["compare", MODEL, *DEPLOY],
    "trace stats": ["trace", "stats", TRACE],
    "trace convert": ["trace", "convert", TRACE, "--out", "{tmp}/converted.jsonl"],
    "workload check": ["workload", "check", WORKLOAD],
    "workload fit": ["workload", "fit", TRACE, "--rate", "1/s"],
    "simulate": ["simulate", MODEL, *DEPLOY, "--workload", WORKLOAD, "--duration", "60"],
    "calibrate": ["calibrate", LOG],
    "loadtest": ["loadtest", "http://127.0.0.1:9", "--workload", WORKLOAD, "--duration", "1", "--out", "{tmp}/l.json"],
    "report": ["report", MODEL, *DEPLOY],
    "serve": ["serve", "--port", "99999"],  # never a valid pair: the matrix must not start a server
    "coverage": ["coverage", "--out", "{tmp}/coverage.md"],
    "measure": ["measure", MODEL, "--tokens", "0"],  # never measures (no GPU in CI): refused before torch
    "speed": ["speed", MODEL, "--gpu", "h100-sxm"],
    "size": ["size", MODEL, "--gpu", "h100-sxm", "--sessions", "10", "--context", "32k"],
    "gateway": ["gateway", "--port", "99999"],  # never a valid pair: the matrix must not start a gateway
}

# options of commands without a request class, and positionals, by kind (a request's fields name their own)
KINDS: dict[str, str] = {
    "model": "model", "--model": "model", "--served-model": "text", "--engine": "text", "--kv-dtype": "text",
    "--k-dtype": "text", "--v-dtype": "text", "--gpu": "text", "--precision": "text", "--keep": "text",
    "--revision": "text", "--weights": "text", "--link": "text", "--name": "text", "--device": "text",
    "--cache-dtypes": "text", "--api": "choice", "--method": "choice", "--format": "choice", "--trace-format": "choice",
    "--memory": "memory", "--weights-size": "memory", "--overhead": "memory", "--kv-budget": "memory",
    "--gpu-memory": "memory", "--offload-memory": "memory", "--params": "positive", "--weight-bits": "count",
    "--kv-heads": "count", "--head-dim": "count", "--group-size": "count", "--context": "tokens", "--prefix": "tokens",
    "--tokens": "tokens", "--sessions": "sessions", "--start": "sessions", "--step": "sessions",
    "--max-sessions": "sessions", "--max-requests": "count", "--seed": "index", "--rate": "per_second",
    "--prefill-rate": "positive", "--decode-rate": "positive", "--timeout-share": "share", "--time-scale": "positive",
    "--level-time": "seconds", "--duration": "seconds", "--scrape-interval": "seconds", "--request-timeout": "seconds",
    "--target-ttft": "seconds", "--prefix-uncached": "tokens", "--history": "path", "--utilization": "fraction",
    "--host": "host", "--port": "port", "url": "url", "file": "path", "files": "path", "traces": "path",
    "logs": "path", "--workload": "path", "--trace": "path", "--from-log": "path", "--prices": "path",
    "--loadtest": "path", "--log": "path", "--out": "out", "--plot": "out", "--time-series": "out", "--check": "path",
    "--upstream": "url", "--from-plan": "path", "--cap": "tokens", "--idle-timeout": "seconds",
    "--queue-timeout": "seconds", "--upstream-timeout": "seconds", "--max-queue": "count", "--max-body": "memory",
    "--record": "out", "--alerts": "out", "--isl": "tokens", "--osl": "tokens", "--concurrency": "sessions",
    "--speed-from": "path",
}  # fmt: skip
# what each path option reads (its hostile files are that reader's); --check of coverage/simulate is named there
READS: dict[str, str] = {
    "--workload": "workload", "file": "workload", "--trace": "trace", "files": "trace", "traces": "trace",
    "--from-log": "log", "logs": "log", "--log": "log", "--prices": "prices", "--loadtest": "loadtest-result",
    "--history": "loadtest-result", "--check": "loadtest-result", "--from-plan": "loadtest-result",
    "--speed-from": "speed-result",
}  # fmt: skip


def cli_options() -> list[tuple[str, argparse.Action]]:
    """(command, action) for every option and positional of the real parser."""
    out: list[tuple[str, argparse.Action]] = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif not isinstance(action, argparse._HelpAction):
                out.append((" ".join(path), action))

    walk(build_parser(), [])
    return out


def _request_kinds() -> dict[str, dict[str, str]]:
    """command -> {--option: kind} from each request class's fields."""
    return {
        command: {"--" + f.name.replace("_", "-"): str(f.metadata["kind"]) for f in fields(cls) if "kind" in f.metadata}
        for command, cls in by_command().items()
    }


def kind_of(command: str, action: argparse.Action) -> str | None:
    name = action.option_strings[0] if action.option_strings else action.dest
    if action.nargs == 0:
        return "switch"
    if action.choices is not None and name not in READS:
        return "choice"
    if name in READS or KINDS.get(name) in ("path", "out"):
        return KINDS.get(name, "path")
    kinds = _request_kinds()
    every = {option: kind for table in kinds.values() for option, kind in table.items()}  # shared option groups
    return kinds.get(command.replace(" ", "_"), {}).get(name) or KINDS.get(name) or every.get(name)


@pytest.fixture(autouse=True)
def _bounded() -> Iterator[None]:
    """Each test under a time limit and a memory ceiling (what the process holds now plus MARGIN)."""

    def fired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"a run took over {SECONDS} s: it must be bounded")

    old = signal.signal(signal.SIGALRM, fired)
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    held = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
    ceiling = held + MARGIN if hard == resource.RLIM_INFINITY else min(hard, held + MARGIN)
    resource.setrlimit(resource.RLIMIT_AS, (ceiling, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def clean(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    """Run the CLI; assert a clean error line or a document; return (code, the error line or '')."""
    signal.alarm(SECONDS)
    try:
        code, out, err = run_cli(capsys, *argv)
    finally:
        signal.alarm(0)
    assert "Traceback" not in out + err, (argv, err[-2000:])
    if code == 0:
        if "--json" in argv:
            json.loads(out)
        return 0, ""
    assert code == 1, (argv[:6], code, err[-500:])
    assert err.startswith("Error: ") and err.count("\n") == 1 and len(err) < 1200, (argv[:6], err[:1500])
    return code, err


def _argv(command: str, action: argparse.Action, value: str | None, tmp: Path) -> list[str]:
    base = [word.replace("{tmp}", str(tmp)) for word in BASE[command]]
    value = None if value is None else value.replace("{tmp}", str(tmp))
    if not action.option_strings:  # a positional: the value takes its place
        words = command.split()
        return [*words, value or "", *base[len(words) + 1 :]]
    flag = action.option_strings[-1] if action.option_strings[-1].startswith("--") else action.option_strings[0]
    if flag in base:
        at = base.index(flag)
        del base[at : at + (1 if action.nargs == 0 else 2)]
    if value is None:
        return [*base, flag]
    return [*base, f"{flag}={value}"]


OPTIONS = cli_options()


def test_every_cli_option_has_a_strategy() -> None:
    missing = [
        f"{command or 'kvbudget'} {a.option_strings[0] if a.option_strings else a.dest}"
        for command, a in OPTIONS
        if kind_of(command, a) not in VALUES or command not in BASE
    ]
    assert not missing, f"options with no hostile strategy (tests/reliability/test_matrix.py KINDS): {missing}"
    assert set(READS.values()) <= set(SPECIFIC), "a path option reads a format with no hostile files"


def test_every_request_field_kind_has_a_strategy() -> None:
    kinds = {str(f.metadata["kind"]) for cls in by_command().values() for f in fields(cls) if "kind" in f.metadata}
    assert kinds <= set(VALUES), kinds - set(VALUES)
    assert set(READERS) <= set(VALUES), set(READERS) - set(VALUES)


def _samples(kind: str, index: int, count: int = 2) -> list[str]:
    values = VALUES[kind]
    return [values[(index * count + k) % len(values)] for k in range(min(count, len(values)))]


@pytest.mark.parametrize(("command", "action"), OPTIONS, ids=[f"{c or 'kvbudget'}:{a.dest}" for c, a in OPTIONS])
def test_hostile_values_for_every_option(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, command: str, action: argparse.Action
) -> None:
    kind = kind_of(command, action)
    assert kind is not None
    index = OPTIONS.index((command, action))
    if kind == "switch":
        clean(capsys, [*_argv(command, action, None, tmp_path)[:-1], action.option_strings[-1] + "=1"])
        return
    if kind == "path":
        reader = READS.get(action.option_strings[0] if action.option_strings else action.dest, "workload")
        files = hostile_files(tmp_path, reader)
        picks = sorted(files)[index % len(files) :: max(1, len(files) // 3)][:3]
        for case in picks:
            clean(capsys, _argv(command, action, str(files[case]), tmp_path))
        return
    for value in _samples(kind, index):
        if command in ("serve", "measure", "loadtest") and kind not in ("port", "host", "url", "tokens", "out"):
            pass  # still run: the base is refused or harmless whatever this value is
        clean(capsys, _argv(command, action, value, tmp_path))


READER_ARGV = {
    "config": lambda p: ["plan", str(p), *DEPLOY],  # plan reads the whole config (weights: experts too)
    "gguf": lambda p: ["cost", str(p), "--engine", "llamacpp"],
    "safetensors": lambda p: ["weights", str(p.parent)],
    "index": lambda p: ["weights", str(p.parent)],
    "workload": lambda p: ["workload", "check", str(p)],
    "trace": lambda p: ["trace", "stats", str(p)],
    "log": lambda p: ["calibrate", str(p)],
    "prices": lambda p: ["compare", MODEL, *DEPLOY, "--prices", str(p)],
    "loadtest-result": lambda p: ["report", MODEL, *DEPLOY, "--loadtest", str(p), "--format", "md"],
    "speed-result": lambda p: ["plan", MODEL, *DEPLOY, "--speed-from", str(p)],
}


def test_every_reader_has_hostile_files() -> None:
    assert set(READER_ARGV) == set(SPECIFIC)


@pytest.mark.parametrize("reader", sorted(SPECIFIC))
def test_hostile_files_for_every_reader(capsys: pytest.CaptureFixture[str], tmp_path: Path, reader: str) -> None:
    for case, path in hostile_files(tmp_path, reader).items():
        if reader in ("safetensors", "index") and path.parent.is_dir() and path.parent != Path("/dev"):
            (path.parent / "config.json").write_text(json.dumps(CONFIG), encoding="utf-8")
        code, _ = clean(capsys, READER_ARGV[reader](path))
        if reader in ("config", "gguf", "safetensors", "index") and case not in ("missing", "directory"):
            assert code == 1, (reader, case)  # none of these files is a model: never a silent answer


# -- the Python API: every request class, every field, typed hostile values (hypothesis) ---------------------------

HOSTILE_OBJECTS = st.one_of(
    st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=50),
    st.sampled_from(["--help", "-h", "9" * 400, "Infinity", "x/..", "~nouser/x", "a" * 5000, "\x00"]),
    st.booleans(),
    st.none(),
    st.lists(st.integers(), max_size=3),
)


@pytest.mark.parametrize("command", sorted(by_command()))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_request_field_takes_hostile_values(command: str, data: st.DataObject) -> None:
    cls = by_command()[command]
    for f in fields(cls):
        if "kind" not in f.metadata:
            continue
        value = data.draw(HOSTILE_OBJECTS, label=f.name)
        try:
            cls.from_options({f.name: value})
        except KvBudgetError as exc:
            assert "\n" not in str(exc) and len(str(exc)) < 1200
        except TypeError:
            pytest.fail(f"{command}.{f.name}={value!r}: TypeError instead of one InputError")


# -- the web API: every served command, every parameter, hostile text (the server's own function) ---------------


@pytest.mark.parametrize("command", ["cost", "table", "plan", "levers", "compare", "models", "gpus", "size", "speed"])
def test_every_web_parameter_takes_hostile_values(command: str) -> None:
    pytest.importorskip("starlette")
    from kvbudget.web import api
    from kvbudget.web.uploads import Uploads

    uploads = Uploads()
    try:
        cls = api.served()[command][0]
        base = {"cost": {"model": MODEL}, "table": {"model": MODEL}, "compare": {"model": MODEL, "gpu": "h100-sxm",
                "context": "32k"}, "plan": {"model": MODEL, "gpu": "h100-sxm", "context": "32k"}}  # fmt: skip
        base["levers"] = base["plan"]
        base["size"] = {**base["plan"], "sessions": "10"}
        base["speed"] = {"model": MODEL, "gpu": "h100-sxm", "concurrency": "4"}
        for index, f in enumerate(fields(cls)):
            kind = f.metadata.get("kind")
            if kind is None:
                continue
            for value in _samples("choice" if f.metadata.get("choices") else str(kind), index, 3) or ["1x"]:
                query = {**base.get(command, {}), f.name: value}
                reply = api.run(command, list(query.items()), uploads)
                assert reply.status in (200, 400, 503), (command, f.name, value)
                document = json.loads(reply.body)
                if reply.status != 200:
                    message = document["error"]["message"]
                    assert "\n" not in message and len(message) < 1200 and "/tmp" not in message
    finally:
        uploads.close()
