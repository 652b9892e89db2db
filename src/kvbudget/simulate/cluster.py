"""Independent simulations as tasks on an existing Ray cluster (``--ray ADDRESS``; extra ``kvbudget[ray]``).

``run_on_ray(fn, items, address)`` is ``[fn(x) for x in items]``: ``fn`` is put in the cluster's object store
once, each item is one Ray task of one CPU, and ``ray.get`` returns the results in the items' order, so the answer
is the serial one (each simulation is a pure function of its inputs: docs/simulate.md, "Determinism"). Ray
schedules the tasks; kvbudget adds no scheduler of its own. The kvbudget package of this process travels with the
tasks (Ray's ``runtime_env`` ``py_modules``), so every worker runs the same code whatever the cluster has
installed; the workers need Python and numpy. Everything a task reads is in ``fn`` and the items: no file of this
machine is read on the cluster.

The connection is made once per process and kept (a search sends several batches); ``disconnect()`` ends it.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from kvbudget.errors import InputError, KvBudgetError, MissingExtraError

T = TypeVar("T")
R = TypeVar("R")

INSTALL = "--ray: Ray is not installed here; pip install 'kvbudget[ray]'"
CONNECT_TIMEOUT_S = 10.0  # a head that does not accept a TCP connection in this long is not there
_CONNECTED: dict[str, str | None] = {"address": None}


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise MissingExtraError(INSTALL) from None
    return ray


def _reachable(address: str) -> None:
    """Refuse at once an address where nothing listens: ``ray.init`` would retry for minutes."""
    if address == "auto":
        return  # Ray finds the cluster this machine joined, or says at once that there is none
    host, _, port = address.removeprefix("ray://").rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise InputError(
            f"--ray {address}: no Ray head answers there ({reason}); give the HOST:PORT ray start --head printed"
        ) from None


def connect(address: str) -> Any:
    """The ``ray`` module, connected to the cluster at ``address`` (once per process)."""
    ray = _ray()
    if _CONNECTED["address"] == address and ray.is_initialized():
        return ray
    if ray.is_initialized():
        ray.shutdown()
    _reachable(address)
    import logging

    import kvbudget

    try:
        ray.init(
            address=address,
            logging_level=logging.ERROR,
            log_to_driver=False,
            runtime_env={"py_modules": [str(Path(kvbudget.__file__).parent)]},
        )
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"--ray {address}: cannot join the Ray cluster: {first}") from None
    _CONNECTED["address"] = address
    return ray


def disconnect() -> None:
    """End this process's connection to the cluster, if any."""
    if _CONNECTED["address"] is not None:
        _ray().shutdown()
        _CONNECTED["address"] = None


def cluster_cpus(address: str) -> int:
    """The CPUs the cluster offers now (how many probes a search runs at once on it)."""
    return max(1, int(connect(address).cluster_resources().get("CPU", 1)))


def _call(fn: Callable[[Any], Any], item: Any) -> Any:
    return fn(item)


def run_on_ray(fn: Callable[[T], R], items: Sequence[T], address: str) -> list[R]:
    """``[fn(x) for x in items]``, each item one task on the Ray cluster at ``address``, in the items' order."""
    ray = connect(address)
    task = ray.remote(num_cpus=1, max_retries=0)(_call)
    shared = ray.put(fn)
    try:
        results: list[R] = ray.get([task.remote(shared, item) for item in items])
    except ray.exceptions.RayTaskError as exc:
        if isinstance(exc.cause, KvBudgetError):  # a task's own one-line error, as the serial run raises it
            raise exc.cause from None
        raise
    except ray.exceptions.RayError as exc:  # the cluster lost a worker or a node: not the sweep's answer
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise KvBudgetError(f"--ray {address}: the cluster failed a task: {first}") from None
    return results
