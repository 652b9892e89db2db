"""Speeds in a calibration: ``kvbudget calibrate LOG`` of a log that also holds serving lines, and
``--speed-from CALIBRATION.json`` (its ``--json`` document) through the same path as the log itself.

``calibrate`` (measure/calibrate_speeds.py) reads the log's serving lines (measure/logs/serving.py) in the lines
where the start-up it took served (all of them for a log of one start-up; ``--startup N``: from that start-up's
first once-per-start-up line to the next start-up's, measure/logs/startups.py ``serving``), and derives the speeds
as ``--speed-from LOG`` does (simulate/measured_log.py ``speeds_of_log``). A log with no serving line has no
speeds, and says nothing of them; one whose lines give no speed (no clean decode stretch, no interval that
prefilled) has a note saying why, never an error: calibrate is about memory first.

The document carries the speeds exactly (floats as computed, not rounded), with the engine and model the log's
start-up names, so ``--speed-from`` it gives the same figures, and the same belongs checks (MeasuredSpeeds.check),
as the log. Read back, every field is bounded and checked: a document edited by hand is a one-line error naming
the field.
"""

from __future__ import annotations

import math

from kvbudget.errors import InputError
from kvbudget.simulate.measured import HIGHEST, KNOWN_ENGINES, LOWEST, MAX_LEVELS, MeasuredSpeeds

MAX_TEXT = 2000  # characters of a basis read back (the bases name at most three lines)
MAX_SESSIONS = 10**7
FIX = "give the kvbudget calibrate --json document as written"


def is_calibration(doc: object) -> bool:
    """Whether a JSON document is ``kvbudget calibrate --json``'s (one log's, or ``{"logs": [...]}``)."""
    if not isinstance(doc, dict):
        return False
    logs = doc.get("logs")
    if isinstance(logs, list) and "levels" not in doc:
        return bool(logs) and all(isinstance(one, dict) and "reconciliation" in one for one in logs)
    return "reconciliation" in doc and "lines_read" in doc


def _bad(source: str, field: str, value: object, what: str) -> InputError:
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return InputError(f"--speed-from {source}: speeds.{field} of {shown} is not {what}; {FIX}")


def _rate(value: object, field: str, source: str) -> float:
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not LOWEST <= value <= HIGHEST
    ):
        raise _bad(source, field, value, f"a measured speed ({LOWEST:g}-{HIGHEST:g} tokens/s)")
    return float(value)


def _text(value: object, field: str, source: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT:
        raise _bad(source, field, value, f"a basis (a text of 1-{MAX_TEXT:,} characters)")
    return value


def _points(value: object, source: str) -> tuple[tuple[int, float], ...]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_LEVELS:
        raise _bad(source, "decode", value, f"a list of 1-{MAX_LEVELS:,} levels")
    points: list[tuple[int, float]] = []
    for i, row in enumerate(value):
        sessions = row.get("sessions") if isinstance(row, dict) else None
        if not isinstance(sessions, int) or isinstance(sessions, bool) or not 1 <= sessions <= MAX_SESSIONS:
            raise _bad(source, f"decode[{i}].sessions", sessions, f"a count of sessions (1-{MAX_SESSIONS:,})")
        if points and sessions <= points[-1][0]:
            raise _bad(source, f"decode[{i}].sessions", sessions, "above the level before it (ascending, once each)")
        assert isinstance(row, dict)
        points.append(
            (sessions, _rate(row.get("tokens_per_s_per_session"), f"decode[{i}].tokens_per_s_per_session", source))
        )
    return tuple(points)


def _one(doc: dict[str, object], source: str) -> dict[str, object]:
    """The speeds of the one log in the document that has them."""
    logs = doc.get("logs")
    docs = [one for one in logs if isinstance(one, dict)] if isinstance(logs, list) else [doc]
    found = [one["speeds"] for one in docs if isinstance(one.get("speeds"), dict)]
    if not found:
        raise InputError(
            f"--speed-from {source}: a calibrate document with no speeds (the log it read held no serving lines "
            "that give them); calibrate the log of a server that served, or give --speed-from that log"
        )
    if len(found) > 1:
        raise InputError(
            f"--speed-from {source}: a calibrate document of {len(docs):,} logs, {len(found):,} with speeds; "
            "calibrate the one log measured alone"
        )
    speeds = found[0]
    assert isinstance(speeds, dict)
    return speeds


def speeds_of_calibration(doc: dict[str, object], source: str) -> MeasuredSpeeds:
    """The measured speeds a calibrate document carries (module doc), as ``--speed-from`` its log would give."""
    speeds = _one(doc, source)
    if speeds.get("provenance") != "measured":
        raise _bad(source, "provenance", speeds.get("provenance"), "'measured'")
    engine = speeds.get("engine")
    if engine not in KNOWN_ENGINES:
        raise _bad(source, "engine", engine, f"an engine kvbudget plans for ({', '.join(KNOWN_ENGINES)})")
    served = speeds.get("served")
    if served is not None and (not isinstance(served, str) or not served.strip() or len(served) > MAX_TEXT):
        raise _bad(source, "served", served, "null or the model name the log printed")
    assert isinstance(engine, str)
    bases = (
        _text(speeds.get("prefill_basis"), "prefill_basis", source),
        _text(speeds.get("decode_basis"), "decode_basis", source),
    )
    return MeasuredSpeeds(
        source,
        _rate(speeds.get("prefill_tokens_per_s"), "prefill_tokens_per_s", source),
        _points(speeds.get("decode"), source),
        origin="calibration",  # a label: "Speeds (measured, calibration NAME)"
        bases=bases,
        engine=engine,
        served=served.strip() if isinstance(served, str) else None,
    )
