"""The exception hierarchy. The CLI turns every KvBudgetError into one line and exit code 1."""

from __future__ import annotations


class KvBudgetError(Exception):
    """Base class for every error a user can cause. Its message is one line: what, where, how to fix."""

    # True when the command already wrote its own JSON document carrying this error (loadtest keeps
    # what it measured), so the CLI does not print a second document.
    reported: bool = False


class InputError(KvBudgetError):
    """A value given on the command line or to the API cannot be used (size, dtype, option)."""


class ConfigError(KvBudgetError):
    """A model config (file, GGUF, Hub) is malformed or inconsistent."""


class UnknownArchitectureError(ConfigError):
    """No family reader can place this config's layers; we fail closed instead of guessing."""


class SourceError(KvBudgetError):
    """A model reference cannot be resolved (no such catalog entry, file, or Hub unreachable)."""


class EngineRefusalError(KvBudgetError):
    """The chosen engine refuses this combination (the message gives the engine's reason)."""


class MissingExtraError(KvBudgetError):
    """An optional dependency is not installed; the message names the extra to install."""


class TraceError(InputError):
    """A trace file cannot be read: unknown format, unreadable file, or a bad row under --strict.

    The message is one line, ``file:line: reason`` for a row, ``file: reason`` for a whole file.
    """


MAX_WORD = 200  # characters of one unbroken run quoted in a message (a 5,000-character value is cut, not echoed)
MAX_MESSAGE = 2000


def one_line(exc: KvBudgetError | str) -> str:
    """The error's message on one line whatever it quotes (a value given with a newline stays on it, escaped),
    with any run of more than MAX_WORD characters without a space cut to its start and its length."""
    import re

    text = str(exc).replace("\r", "\\r").replace("\n", "\\n")
    text = "".join(c if c.isprintable() else f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}" for c in text)
    text = re.sub(rf"\S{{{MAX_WORD + 1},}}", lambda m: f"{m.group()[:60]}… ({len(m.group()):,} characters)", text)
    return text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE] + "… (cut)"


def name_option(exc: KvBudgetError, options: dict[str, object]) -> None:
    """Start ``exc``'s message with the option (``--workload``) whose value (a file, a model) it begins with, so
    that an error met while reading what an option names reads as every other error, the field first:
    ``--workload: nope.toml: no such file``, not ``nope.toml: no such file``. ``options``: flag -> value (a text or
    a list of texts); a message already starting with an option is left as it is."""
    message = str(exc)
    if message.startswith("--") or len(exc.args) != 1:
        return
    for option, value in options.items():
        for one in value if isinstance(value, list | tuple) else (value,):
            if isinstance(one, str) and one and message.startswith((f"{one}:", f"{one!r}")):
                exc.args = (f"{option}: {message}",)
                return


def error_document(exc: KvBudgetError) -> dict[str, object]:
    """What a command prints on stdout under --json when it fails (schemas/error.json)."""
    return {"schema_version": 1, "error": {"kind": type(exc).__name__, "message": one_line(exc)}}
