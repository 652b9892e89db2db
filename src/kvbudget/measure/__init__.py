"""Measurement of real allocations: a geometry-preserving skeleton's cache in transformers.

torch and transformers are imported lazily, by ``measure`` only (extra ``kvbudget[measure]``).
"""

from __future__ import annotations

from kvbudget.measure.skeleton import GroupMeasurement, Measurement, measure, measure_command, render_measurement
from kvbudget.measure.skeleton_config import skeleton_config

__all__ = ["GroupMeasurement", "Measurement", "measure", "measure_command", "render_measurement", "skeleton_config"]
