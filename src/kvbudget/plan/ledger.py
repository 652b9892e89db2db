"""The per-GPU memory ledger: each line a labelled amount with where it came from."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.provenance import Label


@dataclass(frozen=True)
class LedgerLine:
    """One line of the ledger: ``bytes`` (per GPU), its provenance and the basis in words."""

    label: str
    bytes: int
    provenance: Label  # one of kvbudget.provenance.LABELS; the detail words go in basis
    basis: str
    low: int | None = None
    high: int | None = None

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {
            "label": self.label,
            "bytes": self.bytes,
            "provenance": self.provenance,
            "basis": self.basis,
        }
        if self.low is not None and self.high is not None:
            out["range"] = [self.low, self.high]
        return out
