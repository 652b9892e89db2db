"""Event-driven simulation of a serving instance (or N replicas) under agent traffic.

Library entry points: ``simulate(sessions, SimConfig(...)) -> SimResult`` for one run,
``run_study(...)`` for a run plus the sustained-sessions search, ``memory_from_plan(plan)`` to take
the KV pool and per-sequence bytes from a capacity plan. The model in words: docs/simulate.md.
"""

from kvbudget.simulate.build import cap_from_workload, memory_from_plan, time_from_plan
from kvbudget.simulate.costs import CostTable, MemoryModel
from kvbudget.simulate.policies import CapPolicy, MemoryPolicy, Target, TimeModel
from kvbudget.simulate.runner import SimConfig, SimResult, simulate
from kvbudget.simulate.search import Sustained, find_sustained, meets
from kvbudget.simulate.study import Study, run_study, study_json

__all__ = [
    "CapPolicy",
    "CostTable",
    "MemoryModel",
    "MemoryPolicy",
    "SimConfig",
    "SimResult",
    "Study",
    "Sustained",
    "Target",
    "TimeModel",
    "cap_from_workload",
    "find_sustained",
    "meets",
    "memory_from_plan",
    "run_study",
    "simulate",
    "study_json",
    "time_from_plan",
]
