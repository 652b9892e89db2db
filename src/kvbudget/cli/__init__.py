"""kvbudget's command line: one module per command group (options -> request -> result -> render).

``main`` and ``entry`` (the console script) live in kvbudget.cli.main; nothing in the core imports this package.
"""

from __future__ import annotations

from kvbudget.cli.main import entry, main

__all__ = ["entry", "main"]
