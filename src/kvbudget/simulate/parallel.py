"""Independent simulations over every core: a ``concurrent.futures.ProcessPoolExecutor``, nothing home-made.

``run_all(fn, items, jobs)`` is ``[fn(x) for x in items]``, computed by up to ``jobs`` worker processes and
returned in the items' order, so a sweep's answer is the serial answer whatever the number of processes
(each simulation is a pure function of its inputs: docs/simulate.md, "Determinism"). The workers are forked,
so ``fn`` and what it closes over (plans, session sources, cost functions) are inherited rather than
pickled; only the items and the results cross the process boundary. Where ``fork`` is not offered (Windows)
or one job is asked, the sweep runs serially in this process. Workers do not start pools of their own, nor does a
daemonic process (Python refuses a daemon children), which runs the sweep serially. ``kvbudget serve`` answers each
web request in a process that is no daemon but leads its own process group, killed whole at its budget, workers
included (web/isolate.py), so a web request's sweep runs on its workers too.
With ``ray`` (a cluster's address) the same items run as tasks on that Ray cluster instead
(simulate/cluster.py), with the same answer.
"""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

# The function of the sweep in progress (inherited by the forked workers), and whether this is a worker.
_STATE: dict[str, Any] = {"task": None, "worker": False}


def default_jobs() -> int:
    """The cores this process may run on (the default ``--jobs``)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on every platform
        return os.cpu_count() or 1


def _call(item: Any) -> Any:
    return _STATE["task"](item)


def _mark_worker() -> None:
    _STATE["worker"] = True


def run_all(fn: Callable[[T], R], items: Sequence[T], jobs: int | None, ray: str | None = None) -> list[R]:
    """``[fn(x) for x in items]``, on up to ``jobs`` processes (None: every core), or as tasks on the Ray cluster
    at ``ray``, in the items' order."""
    if ray is not None and items and not _STATE["worker"]:
        from kvbudget.simulate.cluster import run_on_ray

        return run_on_ray(fn, items, ray)
    workers = min(jobs or default_jobs(), len(items))
    serial = _STATE["worker"] or multiprocessing.current_process().daemon
    if workers <= 1 or serial or "fork" not in multiprocessing.get_all_start_methods():
        return [fn(x) for x in items]
    _STATE["task"] = fn
    try:
        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(workers, mp_context=context, initializer=_mark_worker) as pool:
            return list(pool.map(_call, items))
    finally:
        _STATE["task"] = None
