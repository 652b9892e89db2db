"""``/metrics``: the gateway's Prometheus metrics, in a registry of its own (one per gateway application).

Resident and queued sessions are read from the admission state when scraped (``update``; with ``--state
redis`` they are the counts of all replicas); refusals, cap events and upstream latency are counted as they
happen, by this replica.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from kvbudget.gateway.admission import Counts

PREFIX = "kvbudget_gateway_"
# upstream latency to the response's headers: from a local engine's tokenize call (~1 ms) to a long prefill
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120)
TOKEN_BUCKETS = tuple(float(2**k) for k in range(6, 21))  # 64 .. 1M tokens


class Metrics:
    def __init__(self, upstreams: tuple[str, ...], slots: int, cap: int) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.resident = Gauge(PREFIX + "sessions_resident", "Sessions holding a slot", ["upstream"], registry=r)
        self.queued = Gauge(PREFIX + "sessions_queued", "New sessions waiting for a slot (any upstream)", registry=r)
        planned = Gauge(PREFIX + "sessions_planned", "Resident sessions admitted at most", ["upstream"], registry=r)
        self.healthy = Gauge(PREFIX + "upstream_healthy", "1 while the upstream takes new sessions", ["upstream"],
                             registry=r)  # fmt: skip
        for upstream in upstreams:
            planned.labels(upstream).set(slots)
            self.resident.labels(upstream).set(0)
            self.healthy.labels(upstream).set(1)
        Gauge(PREFIX + "cap_tokens", "The context cap held per request", registry=r).set(cap)
        self.refused = Counter(PREFIX + "admissions_refused", "New sessions refused, by reason", ["reason"], registry=r)
        self.cap_events = Counter(PREFIX + "cap_events", "Requests past the cap", ["behaviour"], registry=r)
        self.ended = Counter(PREFIX + "sessions_ended", "Sessions that left their slot, by why", ["why"], registry=r)
        self.upstream_latency = Histogram(
            PREFIX + "upstream_latency_seconds",
            "Upstream time to response headers",
            ["upstream"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.upstream_errors = Counter(PREFIX + "upstream_errors", "Upstream failures, by kind", ["upstream", "kind"],
                                       registry=r)  # fmt: skip
        self.session_tokens = Histogram(
            PREFIX + "step_context_tokens", "Prompt + output tokens of a step", buckets=TOKEN_BUCKETS, registry=r
        )
        self.count_error = Counter(
            PREFIX + "count_error_tokens", "Tokens the engine reported minus those counted (absolute)", registry=r
        )

        self.count_skipped = Counter(
            PREFIX + "count_skipped", "Requests forwarded without an exact count: a proven bound fit", registry=r
        )
        self.bound_exceeded = Counter(
            PREFIX + "bound_exceeded", "Engine usage above a bound (the bound is then off on that upstream)",
            ["upstream"], registry=r,
        )  # fmt: skip
        self.health_changes = Counter(PREFIX + "upstream_health_changes", "Upstreams taken out (down) or back (up)",
                                      ["upstream", "to"], registry=r)  # fmt: skip
        self.moved = Counter(PREFIX + "sessions_moved", "Resident sessions moved off an upstream out of health",
                             ["upstream"], registry=r)  # fmt: skip
        self.state_errors = Counter(
            PREFIX + "state_errors", "Scrapes that could not read the shared state (gauges stale)", registry=r
        )

    def set_healthy(self, upstream: str, up: bool) -> None:
        self.healthy.labels(upstream).set(1 if up else 0)
        self.health_changes.labels(upstream, "up" if up else "down").inc()

    def update(self, counts: Counts) -> None:
        for upstream, resident in counts.resident.items():
            self.resident.labels(upstream).set(resident)
        self.queued.set(counts.queued)

    def render(self) -> bytes:
        return generate_latest(self.registry)
