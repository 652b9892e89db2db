"""Where a model reference leads: a catalog name, a config.json, a model directory, a GGUF file,
or a Hugging Face repo id (config only, through huggingface_hub, honouring HF_HUB_OFFLINE)."""

from __future__ import annotations

import re
from dataclasses import replace

from kvbudget.errors import ConfigError, MissingExtraError, SourceError
from kvbudget.model import catalog
from kvbudget.model.families import read_spec
from kvbudget.model.spec import ModelSpec

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Any

# A Hub id as the Hub itself takes one (huggingface_hub validate_repo_id): an optional owner and a name, each of
# ASCII letters, digits, ``_``, ``-`` and ``.``, starting and ending with a letter, digit or ``_``, at most 96
# characters, with no ``--`` or ``..`` and not ending in ``.git``. Anything else never reaches the Hub client.
# Compiled on first use, by re's own cache: an answer that reads no such value does not pay for the pattern.
_REPO_PART = r"[A-Za-z0-9_](?:[A-Za-z0-9_.\-]{0,94}[A-Za-z0-9_])?"
_REPO_ID_PATTERN = rf"^{_REPO_PART}/{_REPO_PART}$"


def is_hub_id(ref: str) -> bool:
    """``org/name`` as the Hugging Face Hub accepts it."""
    return (
        bool(re.match(_REPO_ID_PATTERN, ref, re.ASCII))
        and ".." not in ref
        and "--" not in ref
        and (not ref.endswith(".git"))
    )


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a config.json; malformed JSON or a non-object is a one-line ConfigError naming the file.

    Through kvbudget.safeio: regular files only, UTF-8 with or without a BOM, no NaN / Infinity /
    1e309 / 5,000-digit integers, no nesting past what Python follows."""
    from kvbudget.errors import InputError
    from kvbudget.safeio import read_json

    try:
        data = read_json(path, "config")
    except InputError as exc:
        raise ConfigError(str(exc)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config must be a JSON object, found {type(data).__name__}")
    return data


def from_config(config: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    return read_spec(config, name=name, source=source)


def _from_path(path: Path, ref: str) -> ModelSpec:
    spec = _read_path(path)
    if spec.model_id is not None:
        return spec
    where = path if path.is_dir() or path.suffix.lower() == ".gguf" else path.parent
    return replace(spec, model_id=str(where))  # vLLM and SGLang load a model directory, llama.cpp a .gguf


def _read_path(path: Path) -> ModelSpec:
    if path.is_dir():
        config = path / "config.json"
        if config.exists():
            return from_config(load_config_file(config), name=path.name, source=str(config))
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) >= 1:
            return _from_gguf(ggufs[0])
        raise SourceError(f"{path}: directory has no config.json or .gguf file; point at the model's config.json")
    if path.suffix.lower() == ".gguf":
        return _from_gguf(path)
    return from_config(load_config_file(path), name=path.parent.name or path.stem, source=str(path))


def _from_gguf(path: Path) -> ModelSpec:
    from kvbudget.model.gguf import read_gguf_spec

    return read_gguf_spec(path)


def _from_hub(repo_id: str) -> ModelSpec:
    from kvbudget.hub import hub_offline, hub_reachable  # sockets and URLs: only when the Hub is read

    try:
        from huggingface_hub import constants, hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError, RepositoryNotFoundError
    except ImportError:
        raise MissingExtraError(
            f"{repo_id}: reading a Hub id needs huggingface_hub; install it with: pip install 'kvbudget[hub]'"
        ) from None
    unreachable = (
        f"{repo_id}: the Hugging Face Hub cannot be reached{{why}} and the config is not in the local cache; "
        "pass a local config.json or model directory, or a catalog name (kvbudget models)"
    )
    try:
        local = hf_hub_download(repo_id, "config.json", local_files_only=True)
    except LocalEntryNotFoundError:
        if hub_offline(constants.HF_HUB_OFFLINE):
            raise SourceError(unreachable.format(why=" (HF_HUB_OFFLINE is set)")) from None
        if not hub_reachable(constants.ENDPOINT):
            raise SourceError(unreachable.format(why="")) from None
        try:
            local = hf_hub_download(repo_id, "config.json")
        except (RepositoryNotFoundError, EntryNotFoundError):
            raise SourceError(
                f"{repo_id}: no such repository or no config.json on the Hugging Face Hub (gated repos need a token)"
            ) from None
        except Exception as exc:  # any transport failure becomes one line
            raise SourceError(unreachable.format(why=f" ({type(exc).__name__})")) from None
    except ValueError:  # the Hub client's own validation (HFValidationError), should is_hub_id ever be looser
        raise SourceError(f"{repo_id}: not a Hub id the Hugging Face Hub accepts; {_KINDS}") from None
    from pathlib import Path

    spec = from_config(load_config_file(Path(local)), name=repo_id, source=f"hf://{repo_id}/config.json")
    return replace(spec, model_id=repo_id)


def resolve(ref: str) -> ModelSpec:
    """Resolve a model reference to a ModelSpec, trying catalog, local path, then the Hub."""
    entry = catalog.lookup(ref)
    if entry is not None:
        notes = (entry.status,) if entry.geometry_of is None else (entry.status, entry.geometry_note)
        source = entry.source if entry.geometry_of is None else f"{entry.geometry_of}'s config: {entry.source}"
        spec = read_spec(
            entry.config, name=entry.display_name, source=source, where=f"catalog:{entry.name}", notes=notes
        )
        hub = next((alias for alias in entry.aliases if "/" in alias), None)  # the first alias that is a repo id
        return replace(spec, model_id=hub)
    from pathlib import Path  # not for a catalog name: pathlib and urllib.parse are 5 ms of a start

    if not ref or len(ref) > 4096 or ref.lstrip().startswith("-") or any(ord(c) < 32 for c in ref):
        raise SourceError(f"{_shown(ref)} is not a model reference; {_KINDS}")
    try:
        path = Path(ref).expanduser()
        exists = path.exists()
    except RuntimeError:  # ~nobody/x: no such user's home
        raise SourceError(f"{_shown(ref)}: no such user's home folder; {_KINDS}") from None
    except (OSError, ValueError) as exc:  # a name too long for the OS, a NUL byte
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else "not a path this system takes"
        raise SourceError(f"{_shown(ref)}: {why}; {_KINDS}") from None
    if exists:
        return _from_path(path, ref)
    if ref.endswith((".json", ".gguf")) or ref.startswith((".", "/", "~", "\\")):
        raise SourceError(f"{_shown(ref)}: no such file")
    if is_hub_id(ref):
        return _from_hub(ref)
    hint = catalog.suggestions(ref) if len(ref) <= 200 else []
    more = f"; did you mean {', '.join(hint)}?" if hint else ""
    raise SourceError(f"{_shown(ref)} is not a catalog model, a local file, or a Hub id (org/name); {_KINDS}{more}")


_KINDS = "give a catalog name (list them with `kvbudget models`), a config.json, a model folder, a .gguf or org/name"


def _shown(ref: str) -> str:
    from kvbudget.units import shown

    return shown(ref, 80)
