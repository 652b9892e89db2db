"""Capacity planning: the per-GPU memory ledger, sessions at a context cap, levers and engine flags.

Calling the package is the Python API's ``kvbudget.plan(...)`` (kvbudget/_callable.py says why).
"""

from kvbudget._callable import callable_module

callable_module(__name__)
