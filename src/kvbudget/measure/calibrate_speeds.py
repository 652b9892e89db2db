"""The speeds a calibrated log's serving lines give (``kvbudget calibrate``; simulate/measured_calibration.py says
what they are and how ``--speed-from`` reads them back).

Cheap when the log has no serving line: one pass of str.find over the start-up's lines (measure/logs/serving.py,
about 0.05 s of CPU for bench/calibrate.py's 10 MB log), and the simulator's modules, which derive the speeds, are
imported only when there are serving lines to derive them from.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kvbudget.errors import InputError

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (docs/architecture.md, start-up)
if TYPE_CHECKING:
    from kvbudget.measure.logs.record import EngineLog
    from kvbudget.measure.logs.serving import ServingLog
    from kvbudget.simulate.measured import MeasuredSpeeds


@dataclass(frozen=True)
class CalibratedSpeeds:
    """The speeds a calibrated log's serving lines give, and how many lines they came from."""

    speeds: MeasuredSpeeds
    stats_lines: int  # serving stats / timing lines read in the start-up's lines
    first_line: int
    last_line: int
    samples: int  # clean decode stretches, prefill intervals and prompts kept
    dropped: int  # samples past serving.MAX_SAMPLES, counted not kept

    def to_dict(self) -> dict[str, object]:
        m = self.speeds
        return {
            "provenance": "measured",
            "engine": m.engine,
            "served": m.served,
            "prefill_tokens_per_s": m.prefill_tokens_per_s,
            "decode": [{"sessions": k, "tokens_per_s_per_session": rate} for k, rate in m.points],
            "prefill_basis": m.prefill_basis,
            "decode_basis": m.decode_basis,
            "lines": {
                "stats": self.stats_lines,
                "first": self.first_line,
                "last": self.last_line,
                "samples": self.samples,
                "dropped": self.dropped,
            },
        }


def _family(engine: str | None) -> str | None:
    return "llamacpp" if engine == "ollama" else engine


def calibration_speeds(log: EngineLog) -> tuple[CalibratedSpeeds | None, str | None]:
    """(speeds, None) when the serving lines of ``log``'s start-up give them; (None, why) when it has serving lines
    that give none; (None, None) when it has no serving line (module doc)."""
    from kvbudget.measure.belong import log_model_name
    from kvbudget.measure.logs.serving import read_serving

    name = Path(log.path).name
    try:
        serving: ServingLog = read_serving(log.path, log.window)
        if serving.engine is None:
            return None, None
        from kvbudget.simulate.measured_log import speeds_of_log  # the simulator's modules: only with serving lines

        if _family(serving.engine) != _family(log.engine):
            return None, f"no speeds: its serving lines are {serving.engine}'s, its start-up {log.engine}'s"
        speeds = speeds_of_log(serving, name)
    except InputError as e:
        return None, "no speeds: " + str(e).removeprefix(f"--speed-from {name}: ").removeprefix(
            f"--speed-from {log.path}: "
        )
    samples = len(serving.decode) + len(serving.mixed) + len(serving.prompts)
    found = replace(speeds, engine=log.engine, served=log_model_name(log))
    return CalibratedSpeeds(
        found, serving.stats_lines, serving.first_line, serving.last_line, samples, serving.dropped
    ), None
