"""Dropped model files and workload files, kept in a temporary folder for the server's life and named by an id
usable as ``model=`` (a model) or ``workload=`` (a workload, for ``/api/size``).

A config.json is stored as ``<id>/config.json`` (the model is then named by its id, as the CLI names a config by
its folder). A GGUF is stored as ``<id>/<name>.gguf`` from its first bytes only (the header: metadata and the
tensor table) and the size of the whole file: the rest is a hole of that length (a sparse file), so
``model/gguf_file.py`` reads it exactly as it reads the full file, and refuses it the same way when the header
is damaged, without gigabytes of weights crossing the connection. A workload (a name ending in ``.toml``) is stored
as ``<id>/<name>.toml``, at most ``MAX_WORKLOAD_BYTES`` (a workload file is a few hundred bytes). Nothing here is
a web framework.
"""

from __future__ import annotations

import atexit
import re
import secrets
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from kvbudget.errors import InputError

MAX_UPLOAD_BYTES = 64 * 2**20  # the bytes sent: a config, or a GGUF's header (tokenizer arrays included)
MAX_GGUF_BYTES = 2**41  # the size a GGUF may declare for the whole file (2 TiB)
MAX_UPLOADS = 32  # kept at once; the oldest goes first
MAX_WORKLOAD_BYTES = 64 * 2**10  # a workload file (examples/*.toml: under 2 KiB)
GGUF_MAGIC = b"GGUF"
_ID = re.compile(r"^upload-[0-9a-f]{8}$")


@dataclass(frozen=True)
class Upload:
    id: str
    kind: str  # "config", "gguf" or "workload"
    path: Path
    sent_bytes: int
    file_bytes: int


class UploadIndex(Protocol):
    """What answering a request needs of the uploads: a model's file by its id, and the folder to keep out of
    messages."""

    @property
    def root(self) -> Path | None: ...

    def get(self, ref: str) -> Upload | None: ...


@dataclass(frozen=True)
class UploadView:
    """A read-only copy of the uploads at one moment, handed to the process answering one request."""

    root: Path | None
    items: dict[str, Upload]

    def get(self, ref: str) -> Upload | None:
        return self.items.get(ref) if _ID.match(ref) else None


def _stored_name(name: str, suffix: str, default: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(name).name).strip("._")[:100]
    stem = stem.removesuffix(suffix).removesuffix(suffix.upper()) or default
    return f"{stem}{suffix}"


def is_workload(name: str) -> bool:
    """A dropped file named as a workload file (``.toml``), not a model's config.json or GGUF."""
    return name.lower().endswith(".toml")


class Uploads:
    """The uploads of one server: a temporary folder, made at the first upload (a server that never starts, or
    gets none, leaves nothing) and removed by ``close``: at the server's shutdown, and at the interpreter's exit
    whatever ended it (Ctrl-C before the server ran, an error); a failed write removes its own folder at once."""

    def __init__(self) -> None:
        self._root: Path | None = None
        self._items: dict[str, Upload] = {}
        self._lock = threading.Lock()

    def _folder(self) -> Path:
        with self._lock:
            if self._root is None:
                self._root = Path(tempfile.mkdtemp(prefix="kvbudget-serve-"))
                atexit.register(self.close)
            return self._root

    def add(self, data: bytes, *, name: str, size: int | None) -> Upload:
        """Store ``data``: a GGUF (by its magic) whose whole file has ``size`` bytes, a workload (``is_workload``)
        or a config.json."""
        if len(data) > MAX_UPLOAD_BYTES:
            raise InputError(f"upload: {len(data):,} bytes is over the {MAX_UPLOAD_BYTES:,}-byte cap")
        if not data:
            raise InputError("upload: the file is empty; drop a config.json or a .gguf file, or a workload .toml")
        workload = is_workload(name) and data[:4] != GGUF_MAGIC
        if workload and len(data) > MAX_WORKLOAD_BYTES:
            raise InputError(
                f"upload: a workload file of {len(data):,} bytes is over the {MAX_WORKLOAD_BYTES:,}-byte cap; "
                "a workload is a few sections of numbers (kvbudget workload check FILE)"
            )
        gguf = data[:4] == GGUF_MAGIC
        total = len(data) if size is None or not gguf else size
        if gguf and not len(data) <= total <= MAX_GGUF_BYTES:
            raise InputError(
                f"upload: size {total:,} must be the whole GGUF file's bytes, from the {len(data):,} sent up to "
                f"{MAX_GGUF_BYTES:,}"
            )
        upload_id = f"upload-{secrets.token_hex(4)}"
        folder = self._folder() / upload_id
        if gguf:
            path = folder / _stored_name(name, ".gguf", "model")
        else:
            path = folder / (_stored_name(name, ".toml", "workload") if workload else "config.json")
        try:
            folder.mkdir()
            with path.open("wb") as f:
                f.write(data)
                f.truncate(total)  # the weights' bytes as a hole: read as zeros, never stored
        except OSError as exc:  # a full disk, a file-size limit: nothing half-written stays
            shutil.rmtree(folder, ignore_errors=True)
            reason = exc.strerror or exc
            raise InputError(f"upload: the server cannot store the file ({reason}); try again later") from None
        kind = "gguf" if gguf else "workload" if workload else "config"
        upload = Upload(upload_id, kind, path, len(data), total)
        with self._lock:
            self._items[upload_id] = upload
            while len(self._items) > MAX_UPLOADS:
                self._drop(next(iter(self._items)))
        return upload

    @property
    def root(self) -> Path | None:
        """The server's folder of uploads, None before the first (never shown to a client: web/api.py leaves it
        out of messages)."""
        return self._root

    def remove(self, upload_id: str) -> None:
        with self._lock:
            self._drop(upload_id)

    def _drop(self, upload_id: str) -> None:
        gone = self._items.pop(upload_id, None)
        if gone is not None:
            shutil.rmtree(gone.path.parent, ignore_errors=True)

    def view(self) -> UploadView:
        """The uploads as they are now, read-only (what one request's answer may name)."""
        with self._lock:
            return UploadView(self._root, dict(self._items))

    def get(self, ref: str) -> Upload | None:
        if not _ID.match(ref):
            return None
        with self._lock:
            return self._items.get(ref)

    def close(self) -> None:
        with self._lock:
            self._items.clear()
            root, self._root = self._root, None
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
            atexit.unregister(self.close)
