"""kvbudget: exact KV-cache memory of LLMs per serving engine, with the arithmetic shown."""

__version__ = "0.1.0"
