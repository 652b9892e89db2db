"""The JSON API behind ``kvbudget serve``: a query string becomes the command's typed request (kvbudget.requests), the
library answers it, and the document is the answer's ``to_dict()``: what ``kvbudget <command> ... --json`` prints,
byte for byte, and an error is the CLI's error document with the same one-line message.

Parameters are named as the command's options, with ``_`` or ``-`` (``kv_dtype`` or ``kv-dtype``); ``model`` is
the model (comma-separated for ``compare``, as every list); a switch (``no_prefix_caching``) takes ``1``/``true`` or
``0``/``false``; ``price`` may repeat. The server reads no file of its machine on a client's behalf: a model is a
catalog name, a Hub id or an upload's id, a ``workload`` only a workload upload's id (a dropped ``.toml``; one
that replays a trace file is refused at the upload), and the other options that name a file (``--from-log``,
``--prices``) are refused, as is ``--ray`` (the server joins no cluster on a client's behalf). ``jobs`` (compare's
and size's processes) is bounded by the server's cores as on every face (requests/values.py ``max_jobs``): a request
asking for more is a 400 naming the limit, so no request makes the server start more processes than it has cores.
Requests are answered concurrently (the library keeps no state between calls).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path

from kvbudget import errors
from kvbudget.errors import ConfigError, InputError, KvBudgetError
from kvbudget.units import shown
from kvbudget.web.uploads import Upload, UploadIndex, Uploads

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from kvbudget.requests.base import Request

FILE_OPTIONS = frozenset({"from_log", "workload", "prices", "trace", "log", "loadtest", "logs", "files", "speed_from"})
WORKLOAD_UPLOADS = frozenset({"size"})  # the commands that take a workload upload's id as workload=
MAX_CELLS = 4096  # the product of a request's lists: a 64 x 64 table (compare's own ceiling is 500 rows)
_TRUE, _FALSE = frozenset({"", "1", "true", "on", "yes"}), frozenset({"0", "false", "off", "no"})


@dataclass(frozen=True)
class Reply:
    status: int
    body: str  # what the CLI prints on stdout, final newline included


def served() -> dict[str, tuple[type[Request], Callable[[Any], Any]]]:
    """command -> (its request, the library function answering it): the commands the API serves."""
    from kvbudget import api
    from kvbudget.hardware import gpu_catalog
    from kvbudget.requests.cost import GpusRequest

    return {
        "cost": (api.CostRequest, api.kv_cost),
        "table": (api.TableRequest, api.cost_table),
        "plan": (api.PlanRequest, api.plan_deployment),
        "levers": (api.LeversRequest, api.rank_levers),
        "compare": (api.CompareRequest, api.compare_deployments),
        "size": (api.SizeRequest, api.size_deployments),
        "speed": (api.SpeedRequest, api.estimate_speed),
        "models": (api.ModelsRequest, api.catalog_costs),
        "gpus": (GpusRequest, gpu_catalog),
    }


SERVED = ("cost", "table", "plan", "levers", "compare", "size", "speed", "models", "gpus")


def error_document(exc: KvBudgetError) -> str:
    """What ``kvbudget <command> --json`` prints on stdout for ``exc`` (kvbudget.cli.main)."""
    return json.dumps(errors.error_document(exc), indent=2)


def run(command: str, query: Iterable[tuple[str, str]], uploads: UploadIndex) -> Reply:
    """Answer ``command`` with the query's parameters as its request: the CLI's JSON document, or its error."""
    try:
        request = request_of(command, query, uploads)
        answer = served()[command][1]
        result = answer(request)
        return Reply(200, json.dumps(result.to_dict(), indent=2) + "\n")
    except KvBudgetError as exc:
        return Reply(400, public_error(exc, uploads) + "\n")
    except (MemoryError, RecursionError):
        return over_memory()


def over_memory() -> Reply:
    """The 503 of an answer that needed more memory (or depth) than the server gives one request."""
    busy = KvBudgetError("the answer needs more memory or depth than this server gives one request; ask less")
    return Reply(503, error_document(busy) + "\n")


def public_error(exc: KvBudgetError, uploads: UploadIndex) -> str:
    """The error document with no path of this machine in its message: an upload is named by its id, the
    server's temporary, home and working folders are left out."""
    import os
    import tempfile

    document = errors.error_document(exc)
    error = document["error"]
    assert isinstance(error, dict)
    message = str(error["message"])
    if uploads.root is not None:
        message = message.replace(str(uploads.root) + os.sep, "").replace(str(uploads.root), "upload")
    try:
        home = str(Path.home())
    except RuntimeError:  # no home folder: nothing of it to hide
        home = ""
    for private in sorted({tempfile.gettempdir(), home, str(Path.cwd())}, key=len, reverse=True):
        if len(private) > 1:
            message = message.replace(private + os.sep, "").replace(private, "~")
    error["message"] = message
    return json.dumps(document, indent=2)


def request_of(command: str, query: Iterable[tuple[str, str]], uploads: UploadIndex) -> Request:
    """The request ``command`` takes, from the query's parameters (a model named by an upload's id is its file)."""
    table = served()
    if command not in table:
        raise InputError(f"/api/{command}: no such command; the API serves {', '.join(sorted(table))}")
    cls = table[command][0]
    kinds = {f.name: f.metadata.get("kind") for f in fields(cls)}
    many = {f.name for f in fields(cls) if f.metadata.get("many")}
    options: dict[str, object] = {}
    for raw, value in query:
        name = raw.replace("-", "_")
        if name in FILE_OPTIONS and not (name == "workload" and command in WORKLOAD_UPLOADS):
            raise InputError(
                f"--{raw.replace('_', '-')}: names a file on the server's machine, which the web API never reads; "
                "run the command line for it"
            )
        if name == "ray":
            raise InputError(
                "--ray: the web API joins no Ray cluster on a client's behalf; run the command line for it"
            )
        if name not in kinds:
            raise InputError(
                f"--{raw.replace('_', '-')}: not an option of kvbudget {command}; see kvbudget {command} --help"
            )
        if name == "model":
            given = ",".join(model_ref(item.strip(), uploads) for item in value.split(","))
        else:
            given = workload_ref(value, uploads) if name == "workload" else value
        if kinds[name] == "switch":
            options[name] = _switch(raw, given)
        elif name in many and name in options:  # a repeated list parameter (price) adds to the list
            options[name] = f"{options[name]},{given}"
        elif name in options:
            raise InputError(f"--{raw.replace('_', '-')}: given twice; give it once")
        else:
            options[name] = given
    request = cls.from_options(options)
    cells = 1
    for f in fields(request):
        value = getattr(request, f.name)
        if f.metadata.get("many") and isinstance(value, tuple):
            cells *= max(len(value), 1)
    if cells > MAX_CELLS:
        raise InputError(
            f"/api/{command}: {cells:,} combinations of the lists given; this server answers at most {MAX_CELLS:,} "
            "per request (narrow the lists, or run the command line)"
        )
    return request


def _switch(raw: str, value: str) -> bool:
    if value.lower() in _TRUE:
        return True
    if value.lower() in _FALSE:
        return False
    raise InputError(f"--{raw.replace('_', '-')}: a switch; give 1 (on) or 0 (off), not {value!r}")


def model_ref(ref: str, uploads: UploadIndex) -> str:
    """An upload's id becomes its stored file; a catalog name or Hub id is kept; a path of this machine is refused."""
    upload = uploads.get(ref)
    if upload is not None:
        return str(upload.path)
    from kvbudget.model import catalog

    if catalog.lookup(ref) is not None:
        return ref
    looks_local = ref.startswith((".", "/", "~", "\\")) or ref.endswith((".json", ".gguf")) or "\\" in ref
    if looks_local or _exists(ref):
        raise InputError(
            f"{ref}: the web calculator reads no file of the machine it runs on; drop the config.json or GGUF "
            "on the page (POST /api/upload) or name a catalog model (kvbudget models)"
        )
    return ref


def workload_ref(ref: str, uploads: UploadIndex) -> str:
    """A workload upload's id becomes its stored file; anything else would be a file of this machine: refused."""
    upload = uploads.get(ref.strip())
    if upload is None or upload.kind != "workload":
        raise InputError(
            f"--workload {shown(ref)}: not a workload uploaded to this server; drop the workload .toml on the page "
            "(POST /api/upload?name=NAME.toml) and give its id"
        )
    return str(upload.path)


def _exists(ref: str) -> bool:
    try:
        return bool(ref) and Path(ref).exists()
    except (OSError, ValueError):  # too long a name, a NUL byte: not a file of this machine either way
        return False


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
        return Reply(400, public_error(exc, uploads) + "\n")


def _read(stored: Upload) -> dict[str, object]:
    if stored.kind == "workload":
        return _read_workload(stored)
    from kvbudget.model.sources import resolve

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


def _read_workload(stored: Upload) -> dict[str, object]:
    """A dropped workload read as ``--workload`` reads it (the CLI's one-line errors); one that replays a trace
    names a file of this machine, which the server does not read on a client's behalf."""
    from kvbudget.workload.loader import load_workload

    try:
        workload = load_workload(stored.path)
    except InputError as exc:  # named as the client named it, and after the option, as the CLI says it
        raise InputError(f"--workload: {str(exc).replace(str(stored.path), stored.path.name)}") from None
    if workload.arrival.replay is not None:
        raise InputError(
            f"--workload: {stored.path.name}: [arrival].replay names a trace file on the server's machine, which the "
            "web API never reads; give the workload's arrival as a rate, or run the command line for it"
        )
    return {
        "schema_version": 1,
        "upload": {
            "id": stored.id,
            "kind": stored.kind,
            "workload": workload.name,
            "sent_bytes": stored.sent_bytes,
            "file_bytes": stored.file_bytes,
        },
    }
