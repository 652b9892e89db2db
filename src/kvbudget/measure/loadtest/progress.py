"""The progress display on stderr: sessions, requests and KV usage, on a terminal or with --progress.

On a terminal one line is rewritten in place (at most twice a second); otherwise (``--progress``
into a file or pipe) a line is printed every ``PLAIN_EVERY_S`` seconds and at each level change.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from kvbudget.measure.loadtest.record import Recorder, percentile

PLAIN_EVERY_S = 5.0


class Progress:
    def __init__(self, enabled: bool | None = None, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.enabled = self.tty if enabled is None else enabled
        self.last = 0.0
        self.level = -1
        self.shown = False

    def tick(self, rec: Recorder, target: int) -> None:
        if not self.enabled or not rec.levels:
            return
        now = time.monotonic()
        changed = len(rec.levels) != self.level
        every = 0.5 if self.tty else PLAIN_EVERY_S
        if not changed and now - self.last < every:
            return
        self.last, self.level = now, len(rec.levels)
        level = rec.level
        p99 = percentile(level.ttfts, 99)
        kv = f"KV {level.kv_usage_peak:.0%}" if level.kv_usage_peak is not None else "KV -"
        line = (
            f"loadtest level {len(rec.levels)} ({target} sessions): {rec.sessions['started']:,} sessions, "
            f"{rec.requests:,} requests ({level.refused} refused, {level.errors} errors), "
            f"TTFT p99 {'-' if p99 is None else f'{p99:.2f} s'}, {kv}, deferred {level.deferred_peak:g}"
        )
        if self.tty:
            self.stream.write("\r\x1b[2K" + line[:200])
        else:
            self.stream.write(line + "\n")
        self.stream.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown and self.tty:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
