"""What the server is doing, as the client's streams see it: clean decode gaps, and the batch each prompt joins.

The simulator charges a server's time in two parts (kvbudget.simulate.batch): a decode iteration of the sessions
running, and each prompt's prefill, during which decode stands still. A load test's raw inter-token gaps mix the
two: on llama.cpp the prompt tokens of a newly arrived request go into the same batch as one token of every
generating slot (tools/server/server-context.cpp, ``update_slots``: "first, add sampled tokens from any ongoing
sequences", then "next, batch any pending prompts without exceeding n_batch"), so the gap of every other session
that spans it holds the whole prompt; vLLM's chunked prefill mixes them the same way. Nor do the server's own
``timings`` separate them: ``predicted_ms`` is the wall time from a request's first token to its last
(``t_token_generation = now - t_start_generation``, same file), other requests' prompts included.

So every request of a run is counted here as it goes: *prefilling* from the moment it is sent to its first token,
*decoding* from then to its last, holding its planned prompt and the tokens it generated. A gap between two tokens
of one stream is **clean** when nothing changed in between (no request sent, started decoding or ended) and no
request was prefilling: it is one decode iteration of ``decoding`` sessions holding ``context`` tokens, and
nothing else. A request also keeps ``beside``, the sessions decoding when it was sent:
the batch its prompt joins (kvbudget.measure.loadtest.speeds derives the prefill rate from it).

A request sent while others decode waits for the batch running on the server: llama-server's loop takes new
tasks only between two batches (tools/server/server-queue.cpp ``start_loop``: it drains ``queue_tasks`` into the
slots, then ``callback_update_slots()`` runs one ``llama_decode`` of the whole batch; a task posted meanwhile waits
for it to return). The end of that batch is the next token any other stream receives, so a request keeps
``waited_s``: from its sending to that token, or 0 when its own first token came with it (within ``TOGETHER_S``:
its prompt was in that very batch) or no other stream was decoding. The prefill fit takes it out of the time to
first token, and the simulator charges it where the server does (kvbudget.simulate.batch ``join``).
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

SAMPLE_CAP = 20_000  # samples kept per kind (a reservoir past this: long runs stay bounded in memory)
# first tokens this close came from one batch: a batch's prompts get theirs at its end, together, and batches one
# after another are at least one decode iteration apart (the 2-core machine's iteration: 10 ms and more)
TOGETHER_S = 0.01


@dataclass
class Flow:
    """Requests in flight across a run's sessions (one Client's); single-threaded (asyncio)."""

    prefilling: int = 0
    decoding: int = 0
    epoch: int = 0  # bumped at every change of the two counts
    context: int = 0  # tokens the decoding requests hold (their planned prompts and the tokens they generated)
    awaiting: list[Stream] = field(default_factory=list)  # sent while others decoded, the running batch not ended

    def send(self, prompt_tokens: int = 0) -> Stream:
        stream = Stream(self, beside=self.decoding, context=prompt_tokens, sent_t=time.monotonic())
        if self.decoding:
            self.awaiting.append(stream)
        self.prefilling += 1
        self.epoch += 1
        return stream

    def batch_ended(self, now: float, by: Stream) -> None:
        """A stream received a token: the server's running batch ended; the requests waiting for it saw its end."""
        for stream in self.awaiting:
            if stream is not by and stream.boundary_t < 0:
                stream.boundary_t = now
        self.awaiting.clear()


@dataclass(eq=False)  # one request: compared by identity (Flow.awaiting)
class Stream:
    """One request's view of the flow: its clean gaps ``(decoding sessions, tokens they hold, seconds)``;
    ``beside``: the sessions decoding when it was sent; ``context``: the tokens it holds."""

    flow: Flow
    beside: int
    context: int
    gaps: list[tuple[int, int, float]] = field(default_factory=list)
    state: int = 0  # 0 prefilling, 1 decoding, 2 ended
    last_t: float = 0.0
    last_epoch: int = -1
    sent_t: float = 0.0
    boundary_t: float = -1.0  # when the batch running at its sending ended (another stream's token); -1: none seen
    waited_s: float = 0.0  # module doc

    def token(self) -> None:
        """A chunk carrying generated text arrived."""
        now = time.monotonic()
        flow = self.flow
        self.context += 1
        flow.context += 1
        if flow.awaiting:
            flow.batch_ended(now, self)
        if self.state == 0:
            if self.boundary_t >= 0 and now - self.boundary_t > TOGETHER_S:
                self.waited_s = self.boundary_t - self.sent_t
            flow.prefilling -= 1
            flow.decoding += 1
            flow.context += self.context - 1
            flow.epoch += 1
            self.state = 1
        elif self.state == 1 and flow.epoch == self.last_epoch and flow.prefilling == 0:
            self.gaps.append((flow.decoding, flow.context, now - self.last_t))
        self.last_t, self.last_epoch = now, flow.epoch

    def end(self) -> None:
        """The request's last token came (or it failed): it no longer runs on the server. Idempotent."""
        flow = self.flow
        if self in flow.awaiting:
            flow.awaiting.remove(self)
        if self.state == 0:
            flow.prefilling -= 1
        elif self.state == 1:
            flow.decoding -= 1
            flow.context -= self.context
        else:
            return
        flow.epoch += 1
        self.state = 2


@dataclass
class Reservoir:
    """At most SAMPLE_CAP values, a uniform sample of all offered (seeded: the same run keeps the same ones)."""

    values: list[tuple[int, float]] = field(default_factory=list)  # (tokens held, seconds) of clean gaps
    seen: int = 0
    rng: random.Random = field(default_factory=lambda: random.Random(0))

    def add(self, value: tuple[int, float]) -> None:
        self.seen += 1
        if len(self.values) < SAMPLE_CAP:
            self.values.append(value)
        else:
            slot = self.rng.randrange(self.seen)
            if slot < SAMPLE_CAP:
                self.values[slot] = value
