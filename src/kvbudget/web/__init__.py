"""``kvbudget serve``: a local web calculator over the CLI's own commands (docs/serve.md).

``api`` turns a query string into the command's argv and runs it through the CLI's parser and command
functions (the documents are the CLI's ``--json`` output, byte for byte); ``uploads`` keeps dropped
config.json files and GGUF headers for the server's life; ``app`` is the Starlette application, and
``static/`` the page (vanilla JavaScript, no build step, nothing fetched from elsewhere). Starlette and
uvicorn are the ``web`` extra; nothing here is imported by the other commands.
"""

from __future__ import annotations

EXTRA = "web"


def require_extra() -> None:
    """Raise MissingExtraError (one line) when starlette or uvicorn is not installed."""
    import importlib.util

    from kvbudget.errors import MissingExtraError

    missing = [name for name in ("starlette", "uvicorn") if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(f"kvbudget serve needs {' and '.join(missing)}: pip install 'kvbudget[{EXTRA}]'")
