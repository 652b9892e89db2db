"""Capacity planning: the per-GPU memory ledger, sessions at a context cap, levers and engine flags."""
