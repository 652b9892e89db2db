"""Each heavy web answer in a process of its own, within a time and a memory budget that are enforced, not hoped for.

A thread cannot be stopped nor held to a memory size, so ``kvbudget serve`` answers every command but ``gpus`` in a
child process: made from a fork server that has imported the library once (``forkserver``; ``spawn`` where a
platform has no fork server), so a child costs a fork, not an interpreter start. The child:

* limits its own address space (``RLIMIT_AS``) to what it has when it starts plus ``memory_bytes``; an answer that
  needs more gets ``MemoryError``, which ``web.api.run`` turns into a 503 with the reason. Where the platform has
  no such limit (macOS does not enforce ``RLIMIT_AS``; Windows has no ``resource`` module) the budget is the time
  alone, and ``kvbudget serve --help`` says so;
* leads a process group of its own (POSIX ``setpgrp``), and is not a daemon, so a sweep it runs (``jobs``: size's
  check by simulation, compare's rows; simulate/parallel.py) can fork its pool of workers: each worker inherits the
  same address-space limit, so the budget holds per process, ``jobs`` (at most the server's cores, requests/values.py
  ``max_jobs``) times ``memory_bytes`` in all;
* sends back the reply (status and body) through a pipe and exits.

The parent waits for the reply at most ``seconds``; past it, the child's whole process group is killed (the child
and its workers: their work stops, their memory is freed at once) and the client gets the 503, which says what
would answer within the budget (for ``size``: ``no_simulate=1``, fewer rows, or the server's
``--request-seconds``). A child that dies without a reply (killed by the system for memory)
is a 503 as well. No state crosses from one request to the next: the child gets the request's command, query
and a read-only view of the uploads, and nothing it does reaches the server process.
"""

from __future__ import annotations

import functools
import multiprocessing
import sys
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING

from kvbudget.web.limits import Busy

if TYPE_CHECKING:
    from multiprocessing.context import ForkServerContext, SpawnContext

    from kvbudget.web.api import Reply
    from kvbudget.web.uploads import UploadView

PRELOAD = ["kvbudget.cli.main", "kvbudget.web.app", "kvbudget.web.warm"]  # loaded once by the fork server: the
# modules a child needs to re-run the main module as multiprocessing does (the kvbudget command), and one answer of
# each command (web/warm.py)


def memory_enforced() -> bool:
    """Whether this platform holds a child to its memory budget (Linux: RLIMIT_AS)."""
    return sys.platform.startswith("linux")


@functools.cache
def context() -> ForkServerContext | SpawnContext:
    """The process context every answer's child is made from (one fork server for the server's life)."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        made = multiprocessing.get_context("forkserver")
        made.set_forkserver_preload(PRELOAD)
        return made
    return multiprocessing.get_context("spawn")


def start() -> None:
    """Start the fork server now (it loads the library once, seconds on a busy machine), so the first request
    does not wait for it; a no-op where answers are spawned."""
    if isinstance(context(), multiprocessing.context.ForkServerContext):
        from multiprocessing import forkserver

        forkserver.ensure_running()


def _address_space() -> int:
    """This process's address space now, in bytes (Linux /proc/self/statm: the first field, in pages)."""
    import os
    from pathlib import Path

    pages = int(Path("/proc/self/statm").read_text(encoding="ascii").split()[0])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _own_group() -> bool:
    """Whether a child can lead a process group of its own, so that its workers die with it (POSIX)."""
    import os

    return hasattr(os, "setpgrp") and hasattr(os, "killpg")


def _child(conn: Connection, memory_bytes: int, command: str, query: list[tuple[str, str]], view: UploadView) -> None:
    """In the child: lead a process group (its workers join it), hold the address space to its budget, answer, send
    the reply."""
    if _own_group():
        import os

        os.setpgrp()
    if memory_enforced():
        import resource

        limit = _address_space() + memory_bytes
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        if hard != resource.RLIM_INFINITY:
            limit = min(limit, hard)
        resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    from kvbudget.web import api

    try:
        reply = api.run(command, query, view)
    except MemoryError:  # past the budget outside api.run's own guard (the import of a reader, say)
        reply = api.over_memory()
    conn.send(reply)
    conn.close()


def answer(
    command: str, query: Sequence[tuple[str, str]], view: UploadView, *, seconds: float, memory_bytes: int
) -> Reply:
    """``web.api.run(command, query)`` in a child process; Busy when it takes past ``seconds`` or dies unanswered."""
    ctx = context()
    receive, send = ctx.Pipe(duplex=False)
    # not a daemon: a daemon may not start the workers of a sweep; the process group is killed instead (module doc)
    daemon = not _own_group()
    child = ctx.Process(target=_child, args=(send, memory_bytes, command, list(query), view), daemon=daemon)
    try:
        try:
            child.start()
        except OSError as exc:  # no process to be had (a process or memory limit of the machine)
            raise Busy(
                f"the server cannot start a worker for this answer now ({exc.strerror or exc}); try again"
            ) from None
        send.close()  # the child's end: once it exits, a read here ends instead of waiting
        if not receive.poll(seconds):
            raise Busy(too_long(command, seconds))
        try:
            reply: Reply = receive.recv()
        except EOFError:
            child.join(seconds)
            raise Busy(_died(child.exitcode)) from None
        return reply
    finally:
        if child.pid is not None:
            _stop(child.pid)
        if child.is_alive():
            child.kill()
        if child.pid is not None:
            child.join()
        receive.close()


def _stop(pid: int) -> None:
    """Kill the child's process group (its id is the child's): the workers of its sweep, and the child itself if
    still running. A group lives while any member does, so an ended one is a ProcessLookupError, ignored."""
    if not _own_group():
        return
    import contextlib
    import os
    import signal

    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group has ended, or was not made yet
        os.killpg(pid, signal.SIGKILL)


def too_long(command: str, seconds: float) -> str:
    """The 503's message when an answer passes the budget: what would answer within it."""
    smaller = "ask a smaller question (fewer models, GPUs, engines or contexts)"
    if command == "size":
        smaller = (
            "ask with no_simulate=1 (the latency-bound counts kept as speed's upper bound, in seconds) or fewer "
            "models, GPUs or engines"
        )
    return (
        f"the answer took longer than {seconds:g} s, this server's budget per request; {smaller}, run the command "
        "line, or start the server with a larger --request-seconds"
    )


def _died(exitcode: int | None) -> str:
    """Why a child ended without a reply: killed by a signal (the system's out-of-memory killer sends SIGKILL), or
    failed outside the answer (its start-up)."""
    if exitcode is not None and exitcode < 0:
        return (
            "the answer needed more memory than this machine could give and was stopped; ask a smaller question "
            "(fewer models, GPUs, engines or contexts) or run the command line"
        )
    return f"the process answering this request failed (exit code {exitcode}); try again, or run the command line"
