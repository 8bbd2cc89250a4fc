"""The receiver's Prometheus metrics, in a registry of its own (one per app, so tests stay apart).

Contract: `day0_webhook_received_total`, `..._accepted_total`, `..._deduplicated_total`,
`..._ignored_total{reason}`, `..._rejected_total{reason}` (reason is a short fixed code, never input),
and the histogram `day0_webhook_latency_seconds` over every delivery.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

__all__ = ["WebhookMetrics"]

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class WebhookMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.received = Counter("day0_webhook_received", "Deliveries received.", registry=r)
        self.accepted = Counter("day0_webhook_accepted", "Deliveries that triggered a flow run.", registry=r)
        self.deduplicated = Counter("day0_webhook_deduplicated", "Repeats of a repo+sha already run.", registry=r)
        self.ignored = Counter("day0_webhook_ignored", "Valid deliveries that start nothing.", ["reason"], registry=r)
        self.rejected = Counter("day0_webhook_rejected", "Refused deliveries (4xx).", ["reason"], registry=r)
        self.latency = Histogram(
            "day0_webhook_latency_seconds", "Time to answer a delivery.", buckets=_LATENCY_BUCKETS, registry=r
        )

    def render(self) -> bytes:
        return generate_latest(self.registry)
