"""Test-suite settings: Hypothesis runs derandomized, so CI explores the same examples every run and a
property failure is reproducible from the log (explore new examples by hand with --hypothesis-seed)."""

from __future__ import annotations

from hypothesis import settings

settings.register_profile("kvbudget", derandomize=True, print_blob=True)
settings.load_profile("kvbudget")
