"""The receiver's Prometheus metrics, in a registry of its own (one per app, so tests stay apart).

Contract: `day0_webhook_received_total`, `..._accepted_total` (new releases queued: answered 202),
`..._deduplicated_total` (copies of a release already claimed), `..._ignored_total{reason}`,
`..._rejected_total{reason}` (4xx, 503 and dropped connections; reason is a short fixed code, never
input), `..._triggered_total` (flow runs created and recorded), `..._trigger_failures_total` (tries
that failed and will be retried), the gauge `..._queued` (releases this process holds, not yet run)
and the histogram `day0_webhook_latency_seconds` over every delivery.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

__all__ = ["WebhookMetrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.received = Counter("day0_webhook_received", "Deliveries received.", registry=r)
        self.accepted = Counter("day0_webhook_accepted", "Deliveries that queued a new release.", registry=r)
        self.deduplicated = Counter("day0_webhook_deduplicated", "Repeats of a repo+sha already run.", registry=r)
        self.ignored = Counter("day0_webhook_ignored", "Valid deliveries that start nothing.", ["reason"], registry=r)
        self.rejected = Counter("day0_webhook_rejected", "Refused deliveries (4xx, 503).", ["reason"], registry=r)
        self.triggered = Counter("day0_webhook_triggered", "Flow runs created and recorded.", registry=r)
        self.trigger_failures = Counter("day0_webhook_trigger_failures", "Failed tries (retried).", registry=r)
        self.queued = Gauge("day0_webhook_queued", "Accepted releases this process has not run yet.", registry=r)
        self.latency = Histogram(
            "day0_webhook_latency_seconds", "Time to answer a delivery.", buckets=_LATENCY_BUCKETS, registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
