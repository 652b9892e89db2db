"""The JSON API behind ``kvbudget serve``: a query string becomes the command's argv, parsed by the CLI's own parser
and run by the CLI's own command function, so a document is ``kvbudget <command> ... --json``'s output, byte for
byte, and an error is the CLI's error document with the same one-line message.

Parameters are named as the command's options, with ``_`` or ``-`` (``kv_dtype`` or ``kv-dtype``); ``model`` is
the positional model (comma-separated for ``compare``); a switch (``no_prefix_caching``) takes ``1``/``true`` or
``0``/``false``; ``price`` may repeat. The server reads no file of its machine on a client's behalf: a model is a
catalog name, a Hub id or an upload's id, and the options that name a file (``--from-log``, ``--workload``,
``--prices``) are refused.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from kvbudget import errors
from kvbudget.api import Option, _argv
from kvbudget.errors import ConfigError, InputError, KvBudgetError
from kvbudget.web.uploads import Upload, Uploads

# command -> does it take the model as its positional argument
SERVED = {"cost": True, "table": True, "plan": True, "levers": True, "compare": True, "models": False, "gpus": False}
FILE_OPTIONS = frozenset({"from_log", "workload", "prices", "trace"})
NOT_PARAMETERS = frozenset({"json", "help", "version"})
_TRUE, _FALSE = frozenset({"", "1", "true", "on", "yes"}), frozenset({"0", "false", "off", "no"})
_LOCK = threading.Lock()  # one command at a time: the commands were written for one process, one call


@dataclass(frozen=True)
class Reply:
    status: int
    body: str  # what the CLI prints on stdout, final newline included


def error_document(exc: KvBudgetError) -> str:
    """What ``kvbudget <command> --json`` prints on stdout for ``exc`` (kvbudget.cli.main)."""
    return json.dumps(errors.error_document(exc), indent=2)


def run(command: str, query: Iterable[tuple[str, str]], uploads: Uploads) -> Reply:
    """Run ``command`` with the query's parameters as its options: the CLI's JSON document, or its error."""
    from kvbudget.cli.main import COMMANDS, RaisingParser, build_parser

    try:
        with _LOCK:
            parser = build_parser(RaisingParser)
            args = parser.parse_args(argv(command, query, uploads, _options_of(parser, command)))
            return Reply(200, COMMANDS[command](args) + "\n")
    except KvBudgetError as exc:
        return Reply(400, error_document(exc) + "\n")


def argv(command: str, query: Iterable[tuple[str, str]], uploads: Uploads, options: dict[str, bool]) -> list[str]:
    """The command line for ``command``: ``options`` maps each option's dest to whether it is a switch."""
    positional: list[str] = []
    single: dict[str, Option] = {}
    repeated: list[str] = []
    for raw, value in query:
        name = raw.replace("-", "_")
        if name == "model" and SERVED[command]:
            positional = [",".join(model_ref(item.strip(), uploads) for item in value.split(","))]
            continue
        if name in FILE_OPTIONS:
            raise InputError(
                f"--{raw.replace('_', '-')}: names a file on the server's machine, which the web API never reads; "
                "run the command line for it"
            )
        if name in NOT_PARAMETERS or name not in options:
            raise InputError(f"kvbudget: unrecognized arguments: --{raw.replace('_', '-')}")
        if options[name]:
            single[name] = _switch(raw, value)
        elif name == "price":
            repeated += ["--price", value]
        else:
            single[name] = value
    return _argv(command, positional, {**single, "json": True}) + repeated


def _switch(raw: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise InputError(f"--{raw.replace('_', '-')}: a switch; give 1 (on) or 0 (off), not {value!r}")


def _options_of(parser: argparse.ArgumentParser, command: str) -> dict[str, bool]:
    if command not in SERVED:
        raise InputError(f"/api/{command}: no such command; the API serves {', '.join(sorted(SERVED))}")
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {
        action.dest: action.nargs == 0
        for action in sub.choices[command]._actions
        if any(flag.startswith("--") for flag in action.option_strings)
    }


def model_ref(ref: str, uploads: Uploads) -> str:
    """An upload's id becomes its stored file; a catalog name or Hub id is kept; a path of this machine is refused."""
    upload = uploads.get(ref)
    if upload is not None:
        return str(upload.path)
    from kvbudget.model import catalog

    if catalog.lookup(ref) is not None:
        return ref
    looks_local = ref.startswith((".", "/", "~", "\\")) or ref.endswith((".json", ".gguf")) or "\\" in ref
    if looks_local or (ref and Path(ref).expanduser().exists()):
        raise InputError(
            f"{ref}: the web calculator reads no file of the machine it runs on; drop the config.json or GGUF "
            "on the page (POST /api/upload) or name a catalog model (kvbudget models)"
        )
    return ref


def upload(uploads: Uploads, data: bytes, *, name: str, size: int | None) -> Reply:
    """Store a dropped config.json or GGUF header and read it as the CLI reads that file: its id and model name,
    or the CLI's error document (the upload is then dropped)."""
    try:
        stored = uploads.add(data, name=name, size=size)
    except KvBudgetError as exc:
        return Reply(400, error_document(exc) + "\n")
    try:
        return Reply(200, json.dumps(_read(stored), indent=2) + "\n")
    except KvBudgetError as exc:
        uploads.remove(stored.id)
        return Reply(400, error_document(exc) + "\n")


def _read(stored: Upload) -> dict[str, object]:
    from kvbudget.model.sources import resolve

    with _LOCK:
        if stored.kind == "gguf":
            from kvbudget.model.gguf_file import read_gguf_file

            header = read_gguf_file(stored.path)
            if header.data_start > stored.sent_bytes:
                raise ConfigError(
                    f"{stored.path.name}: the GGUF header runs to byte {header.data_start:,}, past the "
                    f"{stored.sent_bytes:,} bytes sent; send the file's first {header.data_start:,} bytes"
                )
        spec = resolve(str(stored.path))
    return {
        "schema_version": 1,
        "upload": {
            "id": stored.id,
            "kind": stored.kind,
            "model": spec.name,
            "model_type": spec.model_type,
            "sent_bytes": stored.sent_bytes,
            "file_bytes": stored.file_bytes,
        },
    }
